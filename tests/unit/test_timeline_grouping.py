"""Integer keys over the raw op table (timeline.grouping) and the raw-row -> op-row index built from them,
checked against plain pandas (groupby, pivot_table, string joins) on small random tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceview.timeline.aggregate import aggregate_ops, op_stats
from traceview.timeline.async_ops import _first_at_or_after
from traceview.timeline.devices import _sorted_codes, _step_positions
from traceview.timeline.grouping import device_codes, device_rows, exact_sums, first_rows, group_ids
from traceview.timeline.timing import per_step_self_time


def random_raw(seed: int, n: int = 400, missing: bool = False) -> pd.DataFrame:
    """A raw op table with categorical keys (some categories unused), rows in no particular order."""
    rng = np.random.default_rng(seed)
    devices = [f"h/TPU:{i}" for i in (3, 1, 0, 2)]
    raw = pd.DataFrame({
        "device": pd.Categorical(rng.choice(devices[:3], n), categories=devices),
        "program_id": rng.choice([7, -1, 12345678901234], n),
        "module": pd.Categorical(rng.choice(["jit_b", "jit_a"], n), categories=["jit_b", "jit_a", "unused"]),
        "op": pd.Categorical(rng.choice([f"fusion.{i}" for i in range(6)], n)),
        "category": pd.Categorical(rng.choice(["", "convolution"], n)),
        "start_ps": rng.integers(0, 10_000, n),
        "duration_ps": rng.integers(1, 100, n),
        "step": rng.integers(-1, 5, n).astype("int32"),
        "trace_flops": np.where(rng.random(n) < 0.5, np.nan, rng.random(n)),
        "trace_bytes": np.nan,
        "executions": np.where(rng.random(n) < 0.2, 0, 1).astype(np.int8),   # further kernels of an execution
    })
    raw["self_ps"] = raw["duration_ps"] - rng.integers(0, 2, n)
    if missing:
        raw.loc[rng.random(n) < 0.1, "op"] = np.nan
    return raw


KEY = ["program_id", "module", "op"]


@pytest.mark.parametrize("missing", [False, True])
def test_group_ids_number_groups_as_pandas_groupby_does(missing):
    raw = random_raw(1, missing=missing)
    ids, n = group_ids(raw, KEY)
    want = raw.groupby(KEY, observed=True, sort=False).ngroup().fillna(-1).to_numpy(dtype=np.int64)
    assert n == want.max() + 1
    assert ids.tolist() == want.tolist()
    first = first_rows(ids, n)
    assert [int(ids[i]) for i in first] == list(range(n))
    assert all((ids[: first[g]] != g).all() for g in range(n))     # no earlier row carries the group


@pytest.mark.parametrize("per_device", [False, True])
@pytest.mark.parametrize("missing", [False, True])
def test_the_op_index_points_every_raw_row_at_its_aggregated_row(per_device, missing):
    raw = random_raw(2, missing=missing)
    stats, rows = aggregate_ops(raw, per_device)
    key = (["device"] if per_device else []) + KEY
    text = {"module": str, "op": str} | ({"device": str} if per_device else {})
    # The plain-pandas way: join every raw row with the aggregated table on its key, by name.
    joined = raw[key].astype(text).merge(stats[key].astype(text).assign(_row=np.arange(len(stats))), on=key,
                                         how="left")["_row"].fillna(-1).to_numpy(dtype=np.int64)
    assert rows.tolist() == joined.tolist()
    assert (rows == -1).sum() == (raw["op"].isna().sum() if missing else 0)


def test_op_stats_sums_as_a_plain_groupby_does():
    raw = random_raw(3)
    stats = op_stats(raw).set_index(KEY)
    grouped = raw.astype({"module": str, "op": str}).groupby(KEY)
    want = pd.DataFrame({"occurrences": grouped["executions"].sum(), "kernels": grouped.size(),
                         "total_time_ps": grouped["duration_ps"].sum(),
                         "self_time_ps": grouped["self_ps"].sum(), "devices": grouped["device"].nunique(),
                         "trace_flops": grouped["trace_flops"].sum(min_count=1)})
    got = stats.loc[want.index, list(want.columns)]
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert stats["self_time_ps"].is_monotonic_decreasing


@pytest.mark.parametrize("spread", [1, 3])          # steps 0..n-1, and steps with gaps
def test_per_step_self_time_equals_a_pivot_of_the_raw_rows(spread):
    raw = random_raw(4)
    raw["step"] = np.where(raw["step"] >= 0, raw["step"] * spread, -1).astype("int32")
    ops, rows = aggregate_ops(raw)
    got = per_step_self_time(raw, ops, rows)
    inside = raw[raw["step"] >= 0].astype({"module": str, "op": str})
    pivot = inside.pivot_table(index=KEY, columns="step", values="self_ps", aggfunc="sum", fill_value=0)
    for i, row in ops.iterrows():
        assert got[i] == pivot.loc[(row["program_id"], row["module"], row["op"])].astype(int).tolist()


def test_exact_sums_stay_exact_beyond_float_precision():
    index = np.array([0, 1, 0, 1])
    big = 2 ** 60
    assert exact_sums(index, np.array([big, 1, 1, 2]), 2).tolist() == [big + 1, 3]
    assert exact_sums(index, np.array([5, 1, 7, 2]), 3).tolist() == [12, 3, 0]
    rng = np.random.default_rng(6)
    values = rng.integers(-(2 ** 62), 2 ** 62, 1000) // 1000     # sums far beyond 2^53, no int64 overflow
    groups = rng.integers(0, 7, 1000)
    want = [sum(int(v) for v, g in zip(values, groups) if g == k) for k in range(7)]
    assert exact_sums(groups, values, 7).tolist() == want


def test_device_codes_follow_sorted_names_and_slices_group_each_devices_rows():
    raw = pd.DataFrame({"device": pd.Categorical(["b", "c", "b", None, "a"], categories=["c", "b", "a", "z"])})
    codes, names = device_codes(raw)
    assert names == ["a", "b", "c"]                       # devices with rows only, sorted by name
    assert codes.tolist() == [1, 2, 1, -1, 0]
    by_device = device_rows(raw)
    rows = by_device.take(np.arange(5))
    assert [rows[lo:hi].tolist() for lo, hi in by_device.spans()] == [[4], [0, 2], [1]]
    assert by_device.take(np.arange(5))[: by_device.bounds[0]].tolist() == [3]      # no device: first, left out
    grouped = device_rows(pd.DataFrame({"device": pd.Categorical(["a", "a", "b"])}))
    assert grouped.order is None and grouped.spans() == [(0, 2), (2, 3)]            # already grouped: no copy
    plain = pd.DataFrame({"device": ["b", "a", "b"]})     # not categorical: factorized
    codes, names = device_codes(plain)
    assert codes.tolist() == [1, 0, 1] and names == ["a", "b"]


def test_first_done_at_or_after_each_start_whatever_the_key_width():
    rng = np.random.default_rng(5)
    groups, times = rng.integers(0, 3, 50), rng.integers(0, 40, 50)
    q_groups, q_times = rng.integers(0, 4, 30), rng.integers(0, 45, 30)
    want = []
    for g, t in zip(q_groups, q_times):
        candidates = [i for i in range(50) if groups[i] == g and times[i] >= t]
        want.append(min(candidates, key=lambda i: (times[i], i)) if candidates else -1)
    assert _first_at_or_after(groups, times, q_groups, q_times).tolist() == want
    # times near int64's range: the ranks stand in for the times, same answer
    far = times * (2 ** 57)
    assert _first_at_or_after(groups, far, q_groups, q_times * (2 ** 57)).tolist() == want


def test_step_positions_and_sorted_codes_agree_with_pandas():
    rng = np.random.default_rng(7)
    step = pd.Series(rng.integers(-1, 8, 300).astype("int32"))
    for ids in (np.arange(6), np.array([0, 2, 3, 7])):      # steps 0..n-1, and steps with gaps
        want = pd.Index(ids).get_indexer(step.to_numpy().astype(np.int64))
        assert _step_positions(step, ids).tolist() == want.tolist()
    for keys in (np.sort(rng.integers(0, 50, 300)), rng.integers(0, 50, 300)):   # ascending, and not
        codes, uniques = _sorted_codes(keys)
        want_codes, want_uniques = pd.factorize(keys, sort=True)
        assert codes.tolist() == want_codes.tolist() and uniques.tolist() == want_uniques.tolist()
