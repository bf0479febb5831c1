"""Interval union / coverage against a brute-force count on a picosecond grid."""

import numpy as np

from traceview.timeline.intervals import covered_length, total_length, union


def brute_mask(starts, ends, size):
    mask = np.zeros(size, dtype=bool)
    for s, e in zip(starts, ends):
        mask[s:e] = True
    return mask


def test_union_and_coverage_match_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n, m, size = rng.integers(1, 40), rng.integers(1, 20), 500
        starts = rng.integers(0, size - 1, n)
        ends = starts + rng.integers(0, 60, n)
        ends = np.minimum(ends, size)
        us, ue = union(starts, ends)
        mask = brute_mask(starts, ends, size)
        assert total_length(us, ue) == mask.sum()
        assert np.all(us[1:] > ue[:-1])  # disjoint and not touching
        qs = rng.integers(0, size - 1, m)
        qe = np.minimum(qs + rng.integers(0, 100, m), size)
        got = covered_length(qs, qe, us, ue)
        want = [mask[s:e].sum() for s, e in zip(qs, qe)]
        assert got.tolist() == want


def test_empty_inputs():
    us, ue = union(np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    assert us.size == 0
    assert covered_length(np.array([0]), np.array([10]), us, ue).tolist() == [0]
