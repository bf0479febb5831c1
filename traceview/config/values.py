"""Checking the values users hand the Python API (``traceview.load(...)``, ``Analysis.whatif(...)``).

The command line's parser gives every value its type before traceview sees it; from Python anything can
arrive (an int for a path, a string for a flag). Each check here turns a value of the wrong type or out of
range into a one-line :class:`UserError` naming the argument and the value, never a traceback from deep
inside, and accepts the forms a Python user would naturally write (``2.0`` for a count of 2).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from traceview.errors import UserError


def path_like(value: object, what: str) -> str | Path:
    """``value`` when it names a file or folder (a str or an ``os.PathLike``); an empty string is no path:
    ``Path("")`` would quietly mean the current folder."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, os.PathLike):
        text = os.fspath(value)
        if isinstance(text, str) and text.strip():
            return value if isinstance(value, Path) else Path(text)
    raise UserError(f"{what}={value!r}: expected a path (a str or pathlib.Path)")


def non_empty(value: object, what: str) -> str:
    """``value`` when it is a string with more than white space in it: an empty name (a chip, a run, an op),
    e.g. ``--target "$CHIP"`` with CHIP unset, would read as "not given" wherever a name is tested for truth."""
    if isinstance(value, str) and value.strip():
        return value
    raise UserError(f"{what}={value!r}: expected a name (a non-empty str)")


def optional_path(value: object, what: str) -> str | Path | None:
    """:func:`path_like`, with None meaning "not given"."""
    return None if value is None else path_like(value, what)


def flag(value: object, what: str) -> bool:
    """True or False (1 and 0 too); a string such as ``"no"`` would be true, so it is refused."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise UserError(f"{what}={value!r}: expected True or False")


def whole_number(value: object, what: str, low: int = 1, high: int | None = None) -> int:
    """A count: an int, a float with no fraction (``2.0``) or a string of digits (what the command line
    hands on), within ``low..high``. True is not a count of 1."""
    if isinstance(value, bool):
        number = None
    elif isinstance(value, numbers.Integral):
        number = int(value)
    elif isinstance(value, numbers.Real):
        real = as_float(value)
        number = int(real) if math.isfinite(real) and real.is_integer() else None
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    else:
        number = None
    span = f"{low}..{high}" if high is not None else f"at least {low}"
    if number is None:
        raise UserError(f"{what}={value!r}: expected a whole number ({span})")
    if number < low or (high is not None and number > high):
        raise UserError(f"{what}={value!r}: out of range ({span})")
    return number


def as_float(value: Any) -> float:
    """``float(value)`` of a real number (an int, a float, a NumPy scalar, a Fraction), infinite for one beyond
    any float (``10**400``) rather than an OverflowError."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def listed(value: object, what: str, single: tuple[type, ...] = ()) -> list:
    """A list of what the user asked for: a list, tuple or other iterable as it is, one item of a ``single``
    type as a list of it (``batches=2560`` asks for one batch), None as an empty list. A string or a mapping
    is never taken apart item by item (``batches="x2"`` is not the batches "x" and "2")."""
    if value is None:
        return []
    if single and isinstance(value, single):
        return [value]
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise UserError(f"{what}={value!r}: expected a list")
    return list(value)
