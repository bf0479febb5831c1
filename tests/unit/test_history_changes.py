"""Change points on generated series whose truth is known: runs of lognormal step times, a known shift.

Rates over many seeds, not one lucky series: a 20% shift is found at its run in nearly every series,
pure run-to-run noise and a single odd run are almost never called a change.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("scipy", reason="change points need scipy (the `history` extra)")

from traceview.history.changes import find_changes  # noqa: E402

LABELS = [f"run-{i}" for i in range(20)]


def _series(seed: int, shift_at: int | None = None, shift: float = 0.2, outlier: int | None = None,
            between: float = 0.03, within: float = 0.05, steps: int = 8):
    """20 runs: each run's level wanders by `between` (lognormal), its steps by `within` around it."""
    rng = np.random.default_rng(seed)
    values, samples = [], []
    for i in range(20):
        level = 10_000 * np.exp(rng.normal(0, between))
        if shift_at is not None and i >= shift_at:
            level *= 1 + shift
        if i == outlier:
            level *= 1.5
        run = level * np.exp(rng.normal(0, within, steps))
        samples.append(list(run))
        values.append(float(np.median(run)))
    return values, samples


def _confirmed(values, samples) -> list[int]:
    return [c.index for c in find_changes(values, LABELS, samples) if c.significant]


def test_a_real_shift_is_found_at_its_run():
    hits = sum(_confirmed(*_series(seed, shift_at=10)) == [10] for seed in range(100))
    assert hits >= 85, hits
    values, samples = _series(3, shift_at=10)
    change = next(c for c in find_changes(values, LABELS, samples) if c.significant)
    assert change.label == "run-10" and change.low is not None and change.low > 0
    assert change.change == pytest.approx(0.2, abs=0.05)       # the Hodges-Lehmann estimate of the shift
    assert change.before == pytest.approx(np.median(values[:10])) and change.after == pytest.approx(
        np.median(values[10:]))


def test_run_to_run_noise_is_not_a_change():
    false = sum(len(_confirmed(*_series(seed))) for seed in range(100))
    assert false <= 5, false


def test_one_odd_run_is_not_a_change():
    false = sum(len(_confirmed(*_series(seed, outlier=7))) for seed in range(100))
    assert false <= 8, false


def test_a_faster_run_series_is_a_change_too():
    values, samples = _series(1, shift_at=12, shift=-0.25)
    changes = [c for c in find_changes(values, LABELS, samples) if c.significant]
    assert [c.index for c in changes] == [12] and changes[0].change < 0


def test_metrics_without_steps_use_the_run_values():
    labels = LABELS[:6]
    # A peak memory figure: constant on each side, so even two runs after it are a certain change.
    changes = find_changes([100.0, 100.0, 100.0, 100.0, 150.0, 150.0], labels)
    assert [(c.index, c.significant, c.method) for c in changes] == [(4, True, "run values: constant on each side")]
    # MFU wandering by noise: no confirmed change; two values after a jump are too few for Mann-Whitney.
    assert not any(c.significant for c in find_changes([0.30, 0.31, 0.30, 0.29, 0.30, 0.31], labels))
    noisy = find_changes([0.30, 0.31, 0.30, 0.29, 0.40, 0.41], labels)
    assert [(c.index, c.significant) for c in noisy] == [(4, False)]


def test_unknown_values_are_skipped_and_short_series_have_no_change():
    assert find_changes([1.0, 2.0, 3.0], LABELS[:3]) == []
    values = [100.0, None, 100.0, 100.0, float("nan"), 200.0, 200.0]
    changes = find_changes(values, LABELS[:7])
    assert [(c.label, c.significant) for c in changes] == [("run-5", True)]


def test_the_headline_metrics_stay_within_the_series_limit():
    """The History tab asks for the headline metrics first, then every other: a store with hundreds of op
    series ("op:..." sorts before "step_time") still shows step time."""
    from traceview.history.trends import HEADLINE, MAX_SERIES, _wanted

    names = sorted([f"op:jit_f/fusion.{i}" for i in range(MAX_SERIES + 50)] + ["step_time", "mfu", "gain"])
    shown = _wanted(names, [*HEADLINE, "*"])[:MAX_SERIES]
    assert shown[:3] == [n for p in HEADLINE[:3] for n in names if n == p]
    assert "step_time" not in _wanted(names, ["*"])[:MAX_SERIES]      # what the tab asked before
    assert len(set(shown)) == len(shown)


def test_the_search_is_pelts_exact_partition():
    """The compiled kernel search gives the partition ruptures' Python PELT (least squares, same penalty and
    minimum segment) gives, on series with and without shifts."""
    ruptures = pytest.importorskip("ruptures")
    from traceview.history.changes import pelt

    rng = np.random.default_rng(44)
    for _ in range(60):
        n = int(rng.integers(4, 200))
        x = rng.normal(size=n)
        for _ in range(int(rng.integers(0, 4))):
            x[int(rng.integers(0, n)):] += rng.normal() * 3
        penalty = 3.0 * np.log(n)
        ours = pelt(x, penalty, 2)
        theirs = ruptures.Pelt(model="l2", min_size=2, jump=1).fit(x.reshape(-1, 1)).predict(pen=penalty)
        assert ours == [int(b) for b in theirs]


def test_pooled_steps_are_thinned_to_quantiles():
    from traceview.history.changes import MAX_POOLED, _at_most

    samples = np.arange(10 * MAX_POOLED, dtype=float)[::-1]
    thinned = _at_most(samples)
    assert thinned.size == MAX_POOLED and thinned[0] == 0 and thinned[-1] == samples.max()
    assert np.all(np.diff(thinned) > 0)
    assert _at_most(samples[:5]) is not None and _at_most(samples[:5]).size == 5
