"""Interval union / coverage against a brute-force count on a picosecond grid."""

import numpy as np
import pytest

from traceview.timeline.intervals import covered_length, tagged_union, total_length, union


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


def test_tagged_union_tags_each_interval_with_its_group_when_groups_lie_apart():
    rng = np.random.default_rng(1)
    starts, ends, tags = [], [], []
    for group, base in enumerate((0, 1000, 2000)):        # three groups on separate stretches of the axis
        s = base + rng.integers(0, 400, 30)
        starts += s.tolist()
        ends += (s + rng.integers(0, 80, 30)).tolist()
        tags += [group] * 30
    order = rng.permutation(len(starts))                  # in no particular order
    starts, ends, tags = np.array(starts)[order], np.array(ends)[order], np.array(tags)[order]
    us, ue, ut = tagged_union(starts, ends, tags)
    plain_starts, plain_ends = union(starts, ends)
    assert np.array_equal(us, plain_starts) and np.array_equal(ue, plain_ends)
    assert ut.tolist() == (us // 1000).tolist()
    for group in range(3):                                 # lengths per tag = the group's own union
        mask = brute_mask(starts[tags == group] - 1000 * group, ends[tags == group] - 1000 * group, 1000)
        assert (ue - us)[ut == group].sum() == mask.sum()


# ---- intersect / subtract / complement, against the brute-force grid

def _random_set(rng, width: int, n: int):
    from traceview.timeline.intervals import union

    starts = rng.integers(0, width - 1, n)
    return union(starts, starts + rng.integers(1, 12, n))


def test_intersect_subtract_complement_match_a_grid() -> None:
    from traceview.timeline.intervals import complement, intersect, subtract

    rng = np.random.default_rng(7)
    width = 200
    for _ in range(200):
        a, b = _random_set(rng, width, int(rng.integers(0, 15))), _random_set(rng, width, int(rng.integers(0, 15)))
        ga, gb = brute_mask(*a, width + 20), brute_mask(*b, width + 20)
        both = intersect(*a, *b)
        assert (np.diff(both[0]) > 0).all() if both[0].size > 1 else True
        assert np.array_equal(brute_mask(*both, width + 20), ga & gb)
        assert np.array_equal(brute_mask(*subtract(*a, *b), width + 20), ga & ~gb)
        gaps = complement(*b, 10, 150)
        window = np.zeros(width + 20, dtype=bool)
        window[10:150] = True
        assert np.array_equal(brute_mask(*gaps, width + 20), window & ~gb)


@pytest.mark.parametrize("step", [1, 2, 5, 1 << 18])
@pytest.mark.parametrize("seed", range(8))
def test_union_in_steps_equals_union(step, seed, monkeypatch):
    """Walked in steps (the open block and the reach carried across), sorted starts with empty, negative,
    touching and nested intervals: the same disjoint intervals as the whole-column union; unsorted: None."""
    from traceview.timeline import intervals

    monkeypatch.setattr(intervals, "STEP_ROWS", step)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 50))
    starts = np.sort(rng.integers(0, 100, size=n)).astype(np.int64)
    durations = rng.integers(-2, 12, size=n).astype(np.int64)
    got = intervals.union_in_steps(starts, durations)
    want = intervals.union(starts, starts + durations)
    assert got is not None
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[0].dtype == want[0].dtype == np.int64
    if n > 2 and starts[0] != starts[-1]:
        assert intervals.union_in_steps(starts[::-1].copy(), durations) is None
