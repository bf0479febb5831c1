"""The part of a matmul's work that does not grow with its FLOPs, fitted over one capture's compute-bound ops.

On a host's virtual devices an execution of a matmul costs a fixed part plus a part proportional to its FLOPs
(docs/whatif.md, "How well it projects"): on twice the rows it takes less than twice as long. Scaling all of
an op's measured work with its FLOPs over-projects a larger batch. A capture whose compute-bound ops differ in
FLOPs per execution (blocks of different widths, forward and gradient matmuls of different shapes) shows
both parts: work per execution = a + b x FLOPs, fitted robustly (Theil-Sen: the median of the pairwise
slopes, then the median intercept), so that an op whose executions all waited for a core does not move it. A
capture whose ops all have about the same FLOPs cannot tell a from b: a is then 0 (all work scales, as
before).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The largest FLOPs per execution must be at least this many times the smallest for a fit: with less spread
# the slope is the noise of a few ops' timings.
MIN_SPREAD = 1.5
# Two ops give a slope only when their FLOPs differ by more than this fraction (equal shapes give none).
PAIR_GAP = 0.05
# At least this many ops for a fit.
MIN_OPS = 3
# At most this many ops enter the pairwise slopes (a program of thousands of matmuls: an even sample of them).
MAX_OPS = 1000


@dataclass(frozen=True)
class FixedPart:
    """work per execution = per_execution + per_flop x FLOPs, in seconds; per_execution 0 when not fitted."""
    per_execution: float
    per_flop: float | None
    ops: int
    how: str


def fixed_part(flops: np.ndarray, work: np.ndarray) -> FixedPart:
    """The fixed part of one execution's work from the ops' FLOPs per execution and work per execution
    (seconds). Clamped to [0, the smallest op's work per execution], so that no op's fixed part exceeds its
    work; 0 when the FLOPs do not spread by MIN_SPREAD, there are fewer than MIN_OPS ops, or the slope is not
    positive."""
    flops, work = np.asarray(flops, dtype=float), np.asarray(work, dtype=float)
    keep = (flops > 0) & (work > 0)
    flops, work = flops[keep], work[keep]
    n = len(flops)
    if n < MIN_OPS or flops.max() < MIN_SPREAD * flops.min():
        spread = f"{flops.max() / flops.min():.3g}x" if n else "no op"
        return FixedPart(0.0, None, n, f"not fitted: {n} compute-bound ops, FLOPs per execution spread {spread} "
                                       f"(a fit needs {MIN_OPS} ops and {MIN_SPREAD}x)")
    if n > MAX_OPS:      # the pairs grow as n^2: an even sample of the ops in FLOPs order stands for them
        pick = np.argsort(flops, kind="stable")[np.linspace(0, n - 1, MAX_OPS).round().astype(int)]
        flops, work = flops[pick], work[pick]
    i, j = np.triu_indices(len(flops), 1)
    apart = np.abs(flops[j] - flops[i]) > PAIR_GAP * np.minimum(flops[i], flops[j])
    slope = float(np.median((work[j] - work[i])[apart] / (flops[j] - flops[i])[apart]))
    if slope <= 0:
        return FixedPart(0.0, None, n, f"not fitted: work per execution does not grow with FLOPs over {n} ops")
    fitted = float(np.median(work - slope * flops))
    a = min(max(fitted, 0.0), float(work.min()))
    return FixedPart(a, slope, n, f"{a * 1e6:.3g} us per execution + {slope * 1e12:.3g} us per MFLOP "
                                  f"(Theil-Sen over {n} compute-bound ops, FLOPs per execution spread "
                                  f"{flops.max() / flops.min():.3g}x; fitted {fitted * 1e6:.3g} us, clamped to "
                                  "[0, the smallest op's work])")
