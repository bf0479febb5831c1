"""Decoders for the raw attribute text the HLO readers keep (``Instruction.attributes``).

Values are as XLA prints them: ``{1,2}``, ``{size=3x3 stride=2x2 pad=1_1x1_1}``,
``b01f_01io->b01f``, ``{{0,1},{2,3}}``, ``[2,4]<=[8]``, ...
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

from traceview.parsers.hlo.text import parse_replica_groups

_INT_RE = re.compile(r"-?\d+")


@lru_cache(maxsize=8192)
def int_list(text: str | None) -> tuple[int, ...]:
    """``{1,2}`` / ``1,2`` / ``[1,2]`` -> (1, 2); empty or None -> ()."""
    if not text:
        return ()
    return tuple(int(x) for x in _INT_RE.findall(text))


def int_attr(attrs: dict[str, str], key: str, default: int) -> int:
    value = attrs.get(key)
    if value is None:
        return default
    m = _INT_RE.search(value)
    return int(m.group()) if m else default


@dataclass(frozen=True)
class WindowDim:
    size: int = 1
    stride: int = 1
    pad_low: int = 0
    pad_high: int = 0
    lhs_dilate: int = 1   # base dilation
    rhs_dilate: int = 1   # window dilation


@lru_cache(maxsize=4096)
def window(text: str | None) -> tuple[WindowDim, ...]:
    """``{size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=2x2 rhs_dilate=1x1}`` -> one WindowDim per spatial dim."""
    if not text:
        return ()
    fields: dict[str, list[str]] = {}
    for part in text.strip("{} ").split():
        key, _, value = part.partition("=")
        fields[key] = value.split("x")
    n = len(fields.get("size", ()))
    if n == 0:
        return ()

    def ints(key: str, default: int) -> list[int]:
        vals = fields.get(key)
        return [int(v) for v in vals] if vals and len(vals) == n else [default] * n

    pads = fields.get("pad")
    lows, highs = [0] * n, [0] * n
    if pads and len(pads) == n:
        for i, p in enumerate(pads):
            lo, _, hi = p.partition("_")
            lows[i], highs[i] = int(lo), int(hi or lo)
    size, stride = ints("size", 1), ints("stride", 1)
    lhs, rhs = ints("lhs_dilate", 1), ints("rhs_dilate", 1)
    return tuple(WindowDim(size[i], stride[i], lows[i], highs[i], lhs[i], rhs[i]) for i in range(n))


@dataclass(frozen=True)
class ConvDims:
    """Convolution dimension numbers decoded from ``dim_labels``."""
    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]


@lru_cache(maxsize=1024)
def conv_dims(dim_labels: str | None) -> ConvDims | None:
    """``b01f_01io->b01f`` -> ConvDims; None when absent or malformed."""
    if not dim_labels:
        return None
    m = re.fullmatch(r"\s*(\w+)_(\w+)->(\w+)\s*", dim_labels)
    if not m:
        return None
    lhs, rhs, out = m.groups()
    n = sum(c.isdigit() for c in lhs)
    try:
        return ConvDims(lhs.index("b"), lhs.index("f"), tuple(lhs.index(str(i)) for i in range(n)),
                        rhs.index("i"), rhs.index("o"), tuple(rhs.index(str(i)) for i in range(n)),
                        out.index("b"), out.index("f"), tuple(out.index(str(i)) for i in range(n)))
    except ValueError:
        return None


@lru_cache(maxsize=4096)
def replica_groups(text: str | None) -> tuple[tuple[int, ...], ...] | None:
    """Decode ``replica_groups`` in any of XLA's forms (explicit, iota ``[G,S]<=[dims]T(perm)``, mesh).

    Returns () for ``{}`` (all devices) and None when absent or unreadable. The
    decoding itself is the HLO reader's; this only caches and freezes it.
    """
    if text is None:
        return None
    groups = parse_replica_groups(text)
    if groups is None:
        return None
    return tuple(tuple(int(x) for x in g) for g in groups)


def source_target_pairs(text: str | None) -> tuple[tuple[int, int], ...]:
    if not text:
        return ()
    return tuple((p[0], p[1]) for p in (int_list(g) for g in re.findall(r"\{([^{}]*)\}", text)) if len(p) == 2)


def backend_config(text: str | None) -> dict:
    """The backend_config JSON as a dict; {} when absent or not JSON."""
    if not text or not text.lstrip().startswith("{"):
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than any real config
        return {}
    return value if isinstance(value, dict) else {}


def known_trip_count(text: str | None) -> int | None:
    """``known_trip_count.n`` from a while loop's backend_config, or None."""
    if not text or "known_trip_count" not in text:
        return None
    count = backend_config(text).get("known_trip_count")
    n = count.get("n") if isinstance(count, dict) else None
    try:
        trips = int(n)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    # A count no loop can run (negative, or past what float64 counts exactly) is corrupt: unknown.
    return trips if 0 <= trips <= 1 << 53 else None
