"""Change points of one metric over the runs, each confirmed with the runs' own per-step times.

Candidates come from a PELT search (Killick et al. 2012: the optimal partition under a penalty per
segment, with pruning; least squares, at least MIN_SEGMENT runs per segment; :func:`pelt`, ruptures'
compiled kernel search)
on the series standardized by its run-to-run noise: the values' logarithm (relative changes) when
they are all positive, divided by the larger of a robust estimate of the noise between consecutive
runs (the MAD of the first differences, at least half their standard deviation), the typical
standard error of one run's median (from its step times) and a floor (0.1%). The penalty, PENALTY * log(n), is BIC-like: a shift must stand out
of the noise by about two of its standard deviations over a few runs to be a candidate.

A candidate is ``significant`` when the step times confirm it: the per-step samples of the runs
before it (back to the previous candidate) and after it (up to the next) give a Hodges-Lehmann
change whose Mann-Whitney interval (regress/stats.py, what ``check`` uses) excludes zero, and every
run on either side, by its own steps, differs from the other side in the same direction and by at
least 40% of the change (one odd run, or a wander between runs the steps cannot tell from noise, is
not a change). A metric without
per-step samples (MFU, memory, gain) is confirmed by a Mann-Whitney test on the runs' values
(two-sided, at 1 - confidence), or, when it is constant on each side (memory), by differing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from traceview.regress.stats import relative_shift

MIN_SEGMENT = 2          # runs on each side of a change, at least
PENALTY = 3.0            # times log(n), on the standardized series
RELATIVE_FLOOR = 1e-3    # the noise is never taken below 0.1% (identical values: a memory figure)
RUN_SHARE = 0.4         # each run must show at least this share of the change (in log terms) by its own steps


@dataclass(frozen=True)
class Change:
    """A change point: the first run after it (``index`` in the series, ``label``), the medians of the
    run values before and after, the relative change (after/before - 1, or the Hodges-Lehmann estimate
    of the pooled step times) with its interval, and whether the step times (or run values) confirm it."""

    index: int
    label: str
    before: float
    after: float
    change: float | None
    low: float | None
    high: float | None
    significant: bool
    method: str


def _noise(x: np.ndarray, samples: list[np.ndarray | None], log: bool) -> float:
    """The run-to-run noise of the (transformed) series, never below the floor."""
    diffs = np.diff(x)
    mad = float(np.median(np.abs(diffs - np.median(diffs)))) if len(diffs) else 0.0
    # The MAD is robust to the jumps themselves, but fragile over a few runs (it can be ~0 by chance):
    # never below half the plain standard deviation of the differences.
    spread = max(1.4826 * mad, 0.5 * float(np.std(diffs))) if len(diffs) else 0.0
    between = spread / math.sqrt(2.0)
    errors = []
    for s in samples:
        if s is not None and len(s) >= 2 and np.all(s > 0):
            t = np.log(s) if log else s
            errors.append(1.2533 * float(np.std(t, ddof=1)) / math.sqrt(len(t)))
    within = float(np.median(errors)) if errors else 0.0
    floor = RELATIVE_FLOOR if log else RELATIVE_FLOOR * max(float(np.median(np.abs(x))), 1e-12)
    return max(between, within, floor)


def candidates(values: np.ndarray, samples: list[np.ndarray | None] | None = None,
               min_segment: int = MIN_SEGMENT, penalty: float = PENALTY) -> list[int]:
    """Indices (into `values`, all finite) of the first run of each new segment the search finds."""
    n = len(values)
    if n < 2 * min_segment:
        return []
    log = bool(np.all(values > 0))
    x = np.log(values) if log else values.astype("float64")
    sigma = _noise(x, samples or [None] * n, log)
    signal = (x - np.median(x)) / sigma
    return [b for b in pelt(signal, penalty * math.log(n), min_segment) if 0 < b < n]


def pelt(x: np.ndarray, penalty: float, min_segment: int = MIN_SEGMENT) -> list[int]:
    """The ends of the segments (the last is len(x)) minimizing the sum of squared deviations from each
    segment's mean plus `penalty` per segment, every segment at least `min_segment` long: ruptures' PELT
    with the linear kernel (least squares), run in its compiled code. The same partition as its
    ``Pelt(model="l2")``, which runs in Python and took 70 s on 2,000 runs."""
    import ruptures

    ends = ruptures.KernelCPD(kernel="linear", min_size=min_segment, jump=1).fit(
        np.ascontiguousarray(x, dtype=np.float64).reshape(-1, 1)).predict(pen=penalty)
    return [int(b) for b in ends]


MAX_POOLED = 1000        # pooled step times per side; more are thinned to as many evenly spaced quantiles


def _at_most(samples: np.ndarray, limit: int = MAX_POOLED) -> np.ndarray:
    """The samples, or `limit` evenly spaced order statistics of them: the rank tests compare every pair, so
    a long window of runs would otherwise cost its square in time and memory."""
    if samples.size <= limit:
        return samples
    return np.sort(samples)[np.linspace(0, samples.size - 1, limit).round().astype(np.int64)]


def _by_steps(before: list[np.ndarray], after: list[np.ndarray], confidence: float):
    """The pooled step times' change, confirmed only when every run on each side, by its own steps, is
    shifted from the other side's pooled steps in the same direction, by at least RUN_SHARE of the
    change (so one odd run, or a wander between runs the steps cannot tell from noise, is no change)."""
    pooled_before, pooled_after = _at_most(np.concatenate(before)), _at_most(np.concatenate(after))
    shift = relative_shift(pooled_before, pooled_after, confidence)
    method = f"step times: {shift.method} ({shift.n_base} vs {shift.n_new} steps, {len(before)} vs {len(after)} runs)"
    if shift.low is None or shift.high is None or shift.estimate is None:
        return shift.estimate, None, None, False, method
    up = shift.low > 0
    significant = up or shift.high < 0
    for run, other, sign in [(r, pooled_after, -1) for r in before] + [(r, pooled_before, 1) for r in after]:
        if not significant:
            break
        one = relative_shift(other, run, confidence) if sign > 0 else relative_shift(run, other, confidence)
        significant = (one.low is not None and one.high is not None and one.estimate is not None
                       and (one.low > 0 if up else one.high < 0)
                       and abs(math.log1p(one.estimate)) >= RUN_SHARE * abs(math.log1p(shift.estimate)))
    return shift.estimate, shift.low, shift.high, significant, method


def _confirm(before_values: np.ndarray, after_values: np.ndarray, before_samples: list[np.ndarray | None],
             after_samples: list[np.ndarray | None], confidence: float):
    """(change, low, high, significant, method) for one candidate."""
    before_steps = [s for s in before_samples if s is not None and len(s) >= 2]
    after_steps = [s for s in after_samples if s is not None and len(s) >= 2]
    if len(before_steps) == len(before_samples) and len(after_steps) == len(after_samples):
        return _by_steps(before_steps, after_steps, confidence)
    from scipy.stats import mannwhitneyu

    before, after = float(np.median(before_values)), float(np.median(after_values))
    change = after / before - 1.0 if before != 0 else None
    if np.ptp(before_values) == 0 and np.ptp(after_values) == 0:   # no noise at all: memory, a static count
        return change, None, None, before != after, "run values: constant on each side"
    p = float(mannwhitneyu(before_values, after_values, alternative="two-sided").pvalue)
    return change, None, None, p < 1.0 - confidence, \
        f"run values: mann-whitney p={p:.3g} ({len(before_values)} vs {len(after_values)} runs)"


def find_changes(values: list[float | None], labels: list[str], samples: list[list | None] | None = None,
                 confidence: float = 0.95, min_segment: int = MIN_SEGMENT) -> list[Change]:
    """The change points of one series (runs in time order; None: unknown in that run, skipped)."""
    samples = samples or [None] * len(values)
    kept = [i for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    x = np.array([values[i] for i in kept], dtype="float64")
    runs_samples = []
    for i in kept:
        s = samples[i]
        arr = None if s is None else np.array([v for v in s if v is not None and math.isfinite(v)], dtype="float64")
        runs_samples.append(arr if arr is not None and len(arr) else None)
    cuts = candidates(x, runs_samples, min_segment)
    bounds = [0, *cuts, len(x)]
    out = []
    for k, cut in enumerate(cuts):
        lo, hi = bounds[k], bounds[k + 2]
        change, low, high, significant, method = _confirm(x[lo:cut], x[cut:hi], runs_samples[lo:cut],
                                                          runs_samples[cut:hi], confidence)
        index = kept[cut]
        out.append(Change(index=index, label=labels[index], before=float(np.median(x[lo:cut])),
                          after=float(np.median(x[cut:hi])), change=change, low=low, high=high,
                          significant=bool(significant), method=method))
    return out
