"""Units and number cleaners shared by every stage and report.

Times are integer picoseconds inside and microseconds in reports; durations a
user types ("5ms") go through ``PS_PER_UNIT``. Unknown numbers are None,
never 0: ``number`` and ``finite`` turn whatever a frame or a JSON file holds
into a float or None, ``json_scalar`` makes a value safe for JSON.
"""

from __future__ import annotations

import math

PS_PER_NS = 1e3
PS_PER_US = 1e6
PS_PER_MS = 1e9
PS_PER_S = 1e12
US_PER_MS = 1e3
# Duration suffixes a user may type, in picoseconds.
PS_PER_UNIT = {"ps": 1.0, "ns": PS_PER_NS, "us": PS_PER_US, "µs": PS_PER_US, "ms": PS_PER_MS, "s": PS_PER_S}


def number(value: object) -> float | None:
    """A float, or None for None, NaN and what is not a number; infinities are kept."""
    if value is None:
        return None
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def finite(value: object) -> float | None:
    """A finite float, or None (None, NaN, infinities, not a number)."""
    out = number(value)
    return out if out is not None and math.isfinite(out) else None


def json_scalar(value):
    """JSON-safe scalars: NaN and infinities -> None, numpy scalars -> Python."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


# Numbers as a person reads them (every renderer and message uses these).

def fmt_time_us(us: float | None) -> str:
    """Microseconds, in the unit a person reads fastest."""
    if us is None or us != us:
        return "-"
    if abs(us) >= 1e6:
        return f"{us / 1e6:.3f} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.3f} ms"
    return f"{us:.2f} us"


def clipped(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, ending in "..." where it was cut (a long name or shape in a
    table cell or a message)."""
    return text if len(text) <= width else text[:width - 3] + "..."


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun in the number it takes: "1 op", "3 ops", "1 time" ("called 1 time")."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def fmt_si(value: float | None, unit: str = "") -> str:
    """1.23 T, 456 G, ... for FLOPs, bytes and rates."""
    if value is None or value != value:
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def fmt_bytes(n: float | None) -> str:
    """A memory size (capacity, peak, buffer, headroom, budget) in binary units, as memory is counted:
    1.50 GiB. Data moved (bytes accessed, collective bytes) and rates are decimal: ``fmt_si(n, "B")``
    (docs/architecture.md, Conventions)."""
    if n is None or n != n:
        return "-"
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{sign}{n / size:.2f} {unit}"
    return f"{sign}{int(n)} B"


def fmt_pct(value: float | None) -> str:
    if value is None or value != value:
        return "-"
    return f"{100 * value:.1f}%"


def fmt_share(value: float | None) -> str:
    """A percentage that stays readable when tiny (an MFU of 5e-6 is not '0.0%')."""
    if value is not None and value == value and 0 < abs(value) < 0.001:
        return f"{100 * value:.2g}%"
    return fmt_pct(value)
