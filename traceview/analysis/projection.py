"""Projecting measured times onto another chip: what a trace taken on one chip says about a target.

When the target is not the chip the trace ran on, measured times are not
the target's times, so an op's efficiency against the target's roofline is
meaningless (it can exceed 100%). Instead each op gets a projected time
under one stated model:

    the op keeps the fraction of its roofline it reached on the capture chip
    projected = roofline_target / min(1, roofline_capture / measured)
              = roofline_target x max(1, measured / roofline_capture)

so its efficiency on the target equals its efficiency on the capture chip
(capped at 100%: an op that beat the capture chip's roofline is projected
to run at the target's roofline), and a projection never shows an
efficiency above 100%. Ops the model cannot place (no cost, a zero modelled
time on either chip, an unknown bound) keep their measured time, and the
share of time kept that way is reported. Idle time is kept as measured; busy
time (steps, the whole run) scales as the ops' summed time does.
"""

from __future__ import annotations

import numpy as np

PROJECTION_MODEL = ("each op keeps the fraction of its roofline it reached on the capture chip "
                    "(projected = target roofline x max(1, measured / capture roofline)); ops without "
                    "a roofline on both chips and idle time are kept as measured")


def projected_times(measured: np.ndarray, roof_capture: np.ndarray, roof_target: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(projected time, whether the model applied) per op; times in any one unit.

    Where it does not apply the projected time is the measured time (NaN stays NaN).
    """
    measured = np.asarray(measured, dtype="float64")
    roof_capture = np.asarray(roof_capture, dtype="float64")
    roof_target = np.asarray(roof_target, dtype="float64")
    modelled = (np.isfinite(measured) & (measured > 0) & np.isfinite(roof_capture) & (roof_capture > 0)
                & np.isfinite(roof_target) & (roof_target > 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = roof_target * np.maximum(1.0, measured / roof_capture)
    return np.where(modelled, scaled, measured), modelled


def projected_total(busy: float, idle: float, measured: np.ndarray, projected: np.ndarray) -> float:
    """A measured busy + idle time with the busy part scaled as the ops' time scales: idle +
    busy x sum(projected) / sum(measured) over ops with both. Scaling the busy time rather than
    subtracting the saving keeps overlapping ops (threads, streams) from being saved twice."""
    measured = np.asarray(measured, dtype="float64")
    projected = np.asarray(projected, dtype="float64")
    both = np.isfinite(measured) & np.isfinite(projected) & (measured > 0)
    total = float(np.sum(measured[both]))
    scale = float(np.sum(projected[both])) / total if total > 0 else 1.0
    return float(idle + busy * scale)
