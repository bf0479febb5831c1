"""Units and JSON scalars shared by every report: times are integer picoseconds inside, microseconds out."""

from __future__ import annotations

import math

PS_PER_US = 1e6
PS_PER_S = 1e12


def json_scalar(value):
    """JSON-safe scalars: NaN and infinities -> None, numpy scalars -> Python."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value
