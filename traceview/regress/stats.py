"""Timing noise: relative changes of per-step times with their Mann-Whitney confidence interval.

Two estimates of one change: `median_change` (median new / median base - 1,
what diff and check report, so a row's change is the change between its own
columns) and `relative_shift` (the Hodges-Lehmann shift, the median of all
pairwise log ratios, which the history store's change points use). Both come
with the distribution-free interval of the pairwise log ratios, so a verdict
can ask "is this slowdown real?" rather than compare one number against another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

_EXACT_LIMIT = 60  # exact Mann-Whitney distribution up to this many samples per side


def _mann_whitney_counts(n: int, m: int) -> np.ndarray:
    """Number of orderings giving each value u = 0..n*m of the Mann-Whitney U statistic (no ties)."""
    # counts(i, j)[u] = counts(i-1, j)[u-j] + counts(i, j-1)[u]; rows over j for the current i.
    prev = [np.ones(1) for _ in range(m + 1)]            # i = 0: U is always 0
    for i in range(1, n + 1):
        row = [np.ones(1)]                               # j = 0
        for j in range(1, m + 1):
            out = np.zeros(i * j + 1)
            a = prev[j]
            out[j:j + len(a)] += a
            b = row[j - 1]
            out[:len(b)] += b
            row.append(out)
        prev = row
    return prev[m]


@lru_cache(maxsize=256)
def _rank_for_interval(n: int, m: int, confidence: float) -> int:
    """k such that [D_(k), D_(nm+1-k)] of the sorted pairwise differences covers `confidence`; 0 if none."""
    alpha = (1.0 - confidence) / 2.0
    if max(n, m) <= _EXACT_LIMIT:
        counts = _mann_whitney_counts(n, m)
        cdf = np.cumsum(counts) / counts.sum()
        return int(np.count_nonzero(cdf <= alpha + 1e-12))
    z = NormalDist().inv_cdf(1.0 - alpha)
    k = math.floor(n * m / 2.0 - z * math.sqrt(n * m * (n + m + 1) / 12.0))
    return max(k, 0)


@dataclass(frozen=True)
class Shift:
    """Relative change new/base - 1: estimate and confidence bounds (None when not computable)."""

    estimate: float | None
    low: float | None
    high: float | None
    method: str
    n_base: int
    n_new: int
    base_median: float | None = None   # of the samples, in their unit
    new_median: float | None = None


def _positive(base: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positive samples of each side (a zero is no time, not a fast step)."""
    base = np.asarray(base, dtype="float64")
    new = np.asarray(new, dtype="float64")
    return base[base > 0], new[new > 0]


def _interval(diffs: np.ndarray, n: int, m: int, confidence: float) -> tuple[float, float] | None:
    """Mann-Whitney interval of the relative shift from the sorted pairwise log differences, or None."""
    k = _rank_for_interval(n, m, confidence)
    if k < 1:
        return None
    return float(np.expm1(diffs[k - 1])), float(np.expm1(diffs[len(diffs) - k]))


def relative_shift(base: np.ndarray, new: np.ndarray, confidence: float = 0.95) -> Shift:
    """Hodges-Lehmann estimate and Mann-Whitney interval of the ratio of typical values, minus 1.

    Works on log times, so the change is relative and one slow outlier step
    moves it little. With too few samples for the confidence asked (e.g. 2
    vs 2 at 95%), the estimate is the ratio of medians and no interval is given.
    """
    base, new = _positive(base, new)
    n, m = len(base), len(new)
    if n == 0 or m == 0:
        return Shift(None, None, None, "no samples", n, m)
    medians = (float(np.median(base)), float(np.median(new)))
    if n == 1 or m == 1:
        return Shift(medians[1] / medians[0] - 1.0, None, None, "ratio of medians", n, m, *medians)
    diffs = np.sort(np.subtract.outer(np.log(new), np.log(base)).ravel())
    estimate = float(np.expm1(np.median(diffs)))
    interval = _interval(diffs, n, m, confidence)
    if interval is None:
        return Shift(estimate, None, None, "hodges-lehmann (too few steps for an interval)", n, m, *medians)
    return Shift(estimate, *interval, f"hodges-lehmann, {confidence:.0%} mann-whitney interval", n, m, *medians)


def median_change(base: np.ndarray, new: np.ndarray, confidence: float = 0.95) -> Shift:
    """The change of the median per-step value (median new / median base - 1) with the Mann-Whitney interval.

    A report row shows the two medians and this change, so the change is the
    one between the columns beside it and a reader can check it by hand. The
    interval is the distribution-free range of relative shifts that the rank
    test does not reject (the same pairwise log ratios the Hodges-Lehmann
    estimate uses); it answers "is this change real?" for the row.
    """
    base, new = _positive(base, new)
    n, m = len(base), len(new)
    if n == 0 or m == 0:
        return Shift(None, None, None, "no samples", n, m)
    medians = (float(np.median(base)), float(np.median(new)))
    estimate = medians[1] / medians[0] - 1.0
    what = f"ratio of medians of {n} vs {m} steps"
    if n == 1 or m == 1:
        return Shift(estimate, None, None, what + " (no interval from one step)", n, m, *medians)
    diffs = np.sort(np.subtract.outer(np.log(new), np.log(base)).ravel())
    interval = _interval(diffs, n, m, confidence)
    if interval is None:
        return Shift(estimate, None, None, what + " (too few steps for an interval)", n, m, *medians)
    return Shift(estimate, *interval, f"{what}, {confidence:.0%} mann-whitney interval", n, m, *medians)
