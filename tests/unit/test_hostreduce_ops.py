"""Hosts reduced where they are read, merged in the parent: every table equals one pass over all rows.

The reference is the row-level pipeline (timeline.aggregate / timing / devices, accounting) run on
the concatenated op table; the map-reduce (hostreduce.host_ops + hostreduce.run_ops) must give the same
tables exactly, whatever the devices' overlaps, steps, async pairs, missing rows or host split.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceview.analysis.build import build_analysis
from traceview.hostreduce.host_ops import KeepRows, reduce_ops
from traceview.hostreduce.part import HostPart
from traceview.hostreduce.profile import Profile
from traceview.hostreduce.reader import TablesReader
from traceview.hostreduce.run_ops import merge_parts, per_step_self_time
from traceview.hostreduce.step_times import folded, step_times_of
from traceview.parsers.profile import HOST_EVENT_COLUMNS, OP_COLUMNS, STEP_COLUMNS, Source, empty_frame
from traceview.render.record import analysis_json
from traceview.timeline.aggregate import aggregate_ops, step_times
from traceview.timeline.devices import device_busy_by_label, device_time, step_busy_by_label
from traceview.timeline.timing import judged_and_exposed
from traceview.timeline.timing import per_step_self_time as raw_per_step

NAMES = ["fusion.1", "fusion.2", "copy.3", "all-reduce-start.1", "all-reduce-done.1", "ars", "ard", "while.4"]
PAIRS = pd.DataFrame({"module": ["m", "m"], "start": ["all-reduce-start.1", "ars"], "done": ["all-reduce-done.1", "ard"]})
COLLECTIVES = {"all-reduce-start.1", "all-reduce-done.1", "ars", "ard", "copy.3"}


def host_table(rng: np.random.Generator, host: str, n_devices: int, rows: int, overlap: float,
               steps: bool) -> pd.DataFrame:
    """One host's op rows: per device, ops one after another with gaps, some overlapping the one before."""
    frames = []
    for d in range(n_devices):
        gaps = rng.integers(0, 50, rows)
        dur = rng.integers(0, 100, rows)
        start = np.cumsum(gaps + dur) - dur
        back = rng.random(rows) < overlap               # this op starts inside the previous one
        start[1:][back[1:]] -= rng.integers(1, 60, back[1:].sum())
        self_ps = np.where(rng.random(rows) < 0.2, dur // 2, dur)
        frames.append(pd.DataFrame({
            "host": host, "device": f"{host}/TPU:{d}", "line": "XLA Ops",
            "module": rng.choice(["m", "n"], rows, p=[0.8, 0.2]), "program_id": rng.choice([-1, 7], rows),
            "op": rng.choice(NAMES, rows), "category": rng.choice(["", "convolution"], rows),
            "start_ps": start, "duration_ps": dur, "self_ps": self_ps,
            "step": rng.integers(-1, 3, rows) if steps else -1,
            "trace_flops": np.where(rng.random(rows) < 0.5, rng.integers(0, 1000, rows).astype(float), np.nan),
            "trace_bytes": np.nan,
            "executions": np.where(rng.random(rows) < 0.2, 0, 1)}))   # some rows: a further kernel of an execution
    out = pd.concat(frames, ignore_index=True)
    return out.astype({k: v for k, v in OP_COLUMNS.items()})


def run_tables(seed: int, steps: bool, overlap: float):
    rng = np.random.default_rng(seed)
    hosts = [host_table(rng, f"h{i}", n_devices=2, rows=300, overlap=overlap, steps=steps) for i in range(3)]
    raw = pd.concat(hosts, ignore_index=True)
    raw = raw.astype({k: v for k, v in OP_COLUMNS.items()})     # categories: the union
    return hosts, raw


def merged(hosts, per_device=False, pairs=PAIRS, jobs=1):
    parts = [reduce_ops(h) for h in hosts]
    run = merge_parts(parts, per_device, jobs)
    need = run.missing_rows(pairs)
    if need:
        parts = [reduce_ops(h, need.get(i)) for i, h in enumerate(hosts)]
        run = merge_parts(parts, per_device, jobs)
        assert not run.missing_rows(pairs)           # now every pair member's rows are there
    return run


def steps_of(raw: pd.DataFrame) -> pd.DataFrame:
    inside = raw[raw["step"] >= 0]
    table = inside.groupby(["device", "step"], observed=True).agg(start_ps=("start_ps", "min"),
                                                                   end=("start_ps", "max")).reset_index()
    table["duration_ps"] = table["end"] - table["start_ps"] + 50
    table["source"] = "steps_line"
    return step_times(table.drop(columns="end").astype({"step": "int32"}))


@pytest.mark.parametrize("per_device", [False, True])
@pytest.mark.parametrize("seed,steps,overlap,jobs", [(1, False, 0.0, 1), (2, False, 0.3, 2), (3, True, 0.1, 2),
                                                     (4, True, 0.0, 1)])
def test_merged_parts_equal_one_pass_over_all_rows(seed, steps, overlap, per_device, jobs):
    """jobs 2: the hosts' rows measured in forked processes where this process may fork (the forking itself:
    test_runtime_forked.py and test_scale.py, in fresh interpreters), with the same results."""
    hosts, raw = run_tables(seed, steps, overlap)
    stats, rows = aggregate_ops(raw, per_device)
    run = merged(hosts, per_device, jobs=jobs)
    pd.testing.assert_frame_equal(run.stats, stats)
    pd.testing.assert_frame_equal(run.device_time(), device_time(raw))

    ops = _same_measures(run, raw, stats, rows, seed, steps)
    assert run.judged_and_exposed(ops, PAIRS)["judged_time_ps"].notna().any()


def _same_measures(run, raw: pd.DataFrame, stats: pd.DataFrame, rows: np.ndarray, seed: int,
                   steps: bool) -> pd.DataFrame:
    """What the merge measures on the kept rows equals the row-level functions over all rows: judged and
    exposed time, per-step self time, busy time by label per device (and per step); the ops it judged."""
    ops = stats.assign(collective_kind=[("all-reduce" if o in COLLECTIVES else None) for o in stats["op"]])
    pd.testing.assert_frame_equal(run.judged_and_exposed(ops, PAIRS), judged_and_exposed(raw, ops, rows, PAIRS))
    pd.testing.assert_series_equal(per_step_self_time(run, len(ops), ops.index), raw_per_step(raw, ops, rows))
    labels = np.random.default_rng(seed).integers(-1, 4, len(ops))
    expected = device_busy_by_label(raw, np.append(labels, -1)[rows], 4)
    got = run.busy_by_label(labels, 4)
    assert list(got) == list(expected)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])
    if steps:
        table = steps_of(raw)
        pd.testing.assert_frame_equal(run.step_busy_by_label(labels, 4, table),
                                      step_busy_by_label(raw, np.append(labels, -1)[rows], 4, table))
    return ops


def test_a_device_that_runs_one_op_at_a_time_ships_no_rows():
    hosts, _ = run_tables(5, steps=False, overlap=0.0)
    part = reduce_ops(hosts[0])
    async_looking = np.isin(hosts[0]["op"].astype(str), ["all-reduce-start.1", "all-reduce-done.1"]).sum()
    assert len(part.kept_group) == async_looking        # only the rows that may pair up travel
    assert part.kept_alone.all()


def test_an_async_pair_named_like_any_op_is_asked_for_again():
    hosts, raw = run_tables(6, steps=False, overlap=0.0)
    run = merge_parts([reduce_ops(h) for h in hosts])
    need = run.missing_rows(PAIRS)
    assert sorted(need) == [0, 1, 2]
    assert all(k.names == frozenset({("m", "ars"), ("m", "ard")}) for k in need.values())


@pytest.mark.parametrize("steps", [False, True])
def test_a_device_in_two_hosts_files_is_kept_whole(steps):
    hosts, raw = run_tables(7, steps=steps, overlap=0.2)
    twin = hosts[0].copy()
    twin["start_ps"] += 25                              # the same device names, other times
    split = [hosts[0], twin, hosts[1]]
    all_rows = pd.concat(split, ignore_index=True).astype({k: v for k, v in OP_COLUMNS.items()})
    run = merge_parts([reduce_ops(h) for h in split])
    need = run.shared_devices()
    assert set(need) == {0, 1}
    run = merge_parts([reduce_ops(h, need.get(i)) for i, h in enumerate(split)])
    assert not run.shared_devices()
    pairs_need = run.missing_rows(PAIRS)                # the pairs named like any op, asked for too
    assert sorted(pairs_need) == [0, 1, 2]
    keep = {i: KeepRows(devices=need[i].devices if i in need else frozenset(), names=pairs_need[i].names)
            for i in range(len(split))}
    assert all(pairs_need[i].devices == keep[i].devices for i in keep)   # the devices kept stay kept
    run = merge_parts([reduce_ops(h, keep[i]) for i, h in enumerate(split)])
    assert not run.missing_rows(PAIRS)
    assert run._chunk_parts() == [[0, 1], [2]]          # the hosts sharing a device are measured together
    pd.testing.assert_frame_equal(run.device_time(), device_time(all_rows))
    # everything measured per device equals one pass over all rows, the shared device's rows together
    stats, rows = aggregate_ops(all_rows, False)
    _same_measures(run, all_rows, stats, rows, 7, steps)


@pytest.mark.parametrize("steps", [False, True])
def test_rows_with_no_device_in_two_hosts_files_are_measured_together(steps):
    """Rows naming no device, in two hosts' files: those hosts form one chunk (such rows pair up across hosts),
    and every measure equals one pass over all rows."""
    hosts, _ = run_tables(11, steps=steps, overlap=0.2)
    hosts = [h.copy() for h in hosts]
    for i in (0, 2):
        hosts[i].loc[hosts[i].index[::37], "device"] = np.nan
    all_rows = pd.concat(hosts, ignore_index=True).astype({k: v for k, v in OP_COLUMNS.items()})
    run = merged(hosts)
    assert [p.kept_without_device for p in run.parts] == [True, False, True]
    assert run._chunk_parts() == [[0, 2], [1]]
    stats, rows = aggregate_ops(all_rows, False)
    _same_measures(run, all_rows, stats, rows, 11, steps)


SOURCE = Source(path="synthetic", run=None, hosts=["h0", "h1", "h2"], files=[])


def profile_of(raw: pd.DataFrame, hosts=None, reader=None) -> Profile:
    """The whole table as one part (``hosts`` None), else one part per host table, re-read by ``reader``
    (default: from the hosts' tables put end to end)."""
    if hosts is None:
        return Profile.from_tables(SOURCE, raw, empty_frame(HOST_EVENT_COLUMNS), empty_frame(STEP_COLUMNS), [])
    parts = [HostPart(file="", ops=reduce_ops(h)) for h in hosts]
    steps = empty_frame(STEP_COLUMNS)
    return Profile(source=SOURCE, devices=[], parts=parts,
                   reader=reader or TablesReader(raw, empty_frame(HOST_EVENT_COLUMNS)), steps=steps,
                   step_times=step_times_of(parts, steps, folded(parts)), kept=None)


class HostsAgain:
    """A reader that reads the hosts again from their own tables, noting what it was asked for; ``broken``:
    one that keeps nothing more than before."""

    def __init__(self, hosts, broken: bool = False):
        self.hosts, self.broken, self.asked = hosts, broken, []

    def reduce_again(self, parts, keep):
        self.asked.append(sorted(keep))
        return {i: reduce_ops(self.hosts[i], None if self.broken else k) for i, k in keep.items()}


def test_analysis_from_host_parts_equals_the_analysis_of_the_whole_table():
    hosts, raw = run_tables(8, steps=True, overlap=0.2)
    whole = analysis_json(build_analysis(profile_of(raw), target="tpu-v5p"))
    parts = analysis_json(build_analysis(profile_of(raw, hosts), target="tpu-v5p"))
    assert parts == whole
    assert whole["ops"]


def test_keep_rows_of_a_device_keeps_all_its_rows():
    hosts, _ = run_tables(9, steps=False, overlap=0.0)
    part = reduce_ops(hosts[1], KeepRows(devices=frozenset({"h1/TPU:0"})))
    on_device = (hosts[1]["device"].astype(str) == "h1/TPU:0").to_numpy()
    assert (np.asarray(part.devices)[part.kept_device[~part.kept_alone]] == "h1/TPU:0").all()
    assert (~part.kept_alone).sum() == on_device.sum()


@pytest.mark.parametrize("ops_kept", [True, False])
def test_combine_reduces_hosts_again_when_a_pair_member_was_not_kept(ops_kept):
    from traceview.hostreduce.combine import combine

    hosts, raw = run_tables(10, steps=False, overlap=0.0)
    again = HostsAgain(hosts)
    profile = profile_of(raw, hosts, reader=None if ops_kept else again)   # the kept table, or the files
    run = combine(profile, False, PAIRS)
    stats, rows = aggregate_ops(raw)
    ops = stats.assign(collective_kind=[("all-reduce" if o in COLLECTIVES else None) for o in stats["op"]])
    pd.testing.assert_frame_equal(run.judged_and_exposed(ops, PAIRS), judged_and_exposed(raw, ops, rows, PAIRS))
    assert again.asked == ([] if ops_kept else [[0, 1, 2]])
    assert all(("m", "ars") in p.ops.kept_names for p in profile.parts)   # kept for the next analysis


def test_combine_fails_loudly_when_reading_again_never_keeps_the_rows():
    """A re-read that does not keep what was asked must end in an error (exit 3), not a partial answer."""
    from traceview.hostreduce.combine import combine

    hosts, raw = run_tables(10, steps=False, overlap=0.0)
    again = HostsAgain(hosts, broken=True)
    with pytest.raises(RuntimeError, match="still lack rows"):
        combine(profile_of(raw, hosts, reader=again), False, PAIRS)
    assert len(again.asked) >= 2


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1 << 18])
@pytest.mark.parametrize("seed", range(6))
def test_union_length_and_alone_in_steps_equal_whole_columns(chunk, seed, monkeypatch):
    """The device pass in steps of `chunk` intervals (carrying the reach and the open block) gives the union
    length and the alone flags of the whole-column formulas (blocks from the running maximum of the ends),
    ties, nesting, touching and empty intervals, and intervals that end before they start, included."""
    from traceview.hostreduce import host_ops
    from traceview.timeline.intervals import union

    monkeypatch.setattr(host_ops, "STEP_ROWS", chunk)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    s = np.sort(rng.integers(0, 80, size=n)).astype(np.int64)
    e = s + rng.integers(-3 if seed % 3 == 0 else 0, 15, size=n)
    reach = np.maximum.accumulate(e)
    new = np.append(True, s[1:] > reach[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, n - 1)
    want_busy = int(np.maximum(reach[last] - s[first], 0).sum())
    after = np.append(True, s[1:] >= reach[:-1])
    before = np.append(s[1:] >= e[:-1], True)
    busy, last, alone = host_ops._union_and_alone(s, e - s, True)
    assert busy == want_busy and last == int(e.max())
    np.testing.assert_array_equal(alone, after & before)
    assert host_ops._union_and_alone(s, e - s, False) == (busy, last, None)
    if (e >= s).all():                                    # the same length as the union intervals'
        u_start, u_end = union(s, e)
        assert busy == int((u_end - u_start).sum())


@pytest.mark.parametrize("seed", range(4))
def test_groups_numbered_by_lookup_equal_those_of_the_combined_key(seed, monkeypatch):
    """Few possible keys: numbered in steps through a lookup table; else by factorizing one combined key
    column: the same numbers (order of first appearance, -1 where a key is missing), devices missing too."""
    from traceview.hostreduce import host_ops

    rng = np.random.default_rng(seed)
    n = 500
    ops = pd.DataFrame({
        "device": pd.Categorical(rng.choice(["d0", "d1", None], size=n, p=[0.45, 0.45, 0.1])),
        "program_id": rng.integers(0, 3, size=n),
        "module": pd.Categorical(rng.choice(["m", "n", None], size=n, p=[0.5, 0.45, 0.05])),
        "op": pd.Categorical(rng.choice(["a", "b", "c", None], size=n, p=[0.3, 0.3, 0.3, 0.1])),
    })
    dev, devices = host_ops._device_codes(ops["device"])
    monkeypatch.setattr(host_ops, "STEP_ROWS", 7)
    small = host_ops._group_numbers(ops, dev, len(devices))
    monkeypatch.setattr(host_ops, "_SMALL_KEYS", 0)
    combined = host_ops._group_numbers(ops, dev, len(devices))
    np.testing.assert_array_equal(small, combined)
    assert small.dtype == np.int64 and (small == -1).any() and small.max() >= 10


def _step_times_grouped(steps: pd.DataFrame) -> pd.DataFrame:
    """The grouped formulas step_times falls back to (pandas' own min, max, mean and nunique)."""
    grouped = steps.assign(end_ps=steps["start_ps"] + steps["duration_ps"]).groupby("step", sort=True)
    return pd.DataFrame({"start_ps": grouped["start_ps"].min(),
                         "time_ps": grouped["end_ps"].max() - grouped["start_ps"].min(),
                         "device_mean_ps": grouped["duration_ps"].mean(),
                         "devices": grouped["device"].nunique()}).reset_index()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_step_times_equal_the_grouped_formulas(seed):
    """A pod's step table (a row per step and device, in any order, repeated rows, rows with no device) gives
    the grouped formulas' table, whole and merged from random hosts' slices of it."""
    from traceview.timeline import aggregate
    from traceview.timeline.step_parts import reduce_steps

    rng = np.random.default_rng(seed)
    n = 5000
    devices = [f"host{i // 4}/TPU:{i % 4}" for i in range(40)]
    device = pd.Categorical([devices[i] for i in rng.integers(0, 40, n)], categories=sorted(devices))
    device[rng.random(n) < 0.05] = np.nan
    steps = pd.DataFrame({"device": device, "step": rng.integers(-1, 300, n).astype(np.int32),
                          "start_ps": rng.integers(0, 10**12, n), "duration_ps": rng.integers(0, 10**9, n)})
    steps = pd.concat([steps, steps.iloc[:700]], ignore_index=True)        # repeated rows
    assert aggregate.step_times(steps).equals(_step_times_grouped(steps))
    cuts = np.sort(rng.choice(np.arange(1, len(steps)), size=6, replace=False))
    parts = [reduce_steps(steps.iloc[lo:hi]) for lo, hi in zip([0, *cuts], [*cuts, len(steps)])]
    assert aggregate.run_step_times(steps.iloc[:0], parts).equals(_step_times_grouped(steps))


def test_step_times_whose_sums_pass_float64_integers_are_exact():
    """Summed durations past 2^53: the mean of the exact integer sum, correctly rounded (a float sum would
    round at each row); the other columns as the grouped formulas give them."""
    steps = pd.DataFrame({"device": pd.Categorical(["a", "b"]), "step": np.array([0, 0], np.int32),
                          "start_ps": [0, 5], "duration_ps": [2**52 + 1, 2**52 + 4]})
    got, grouped = step_times(steps), _step_times_grouped(steps)
    assert got["device_mean_ps"].tolist() == [(2**53 + 5) / 2]
    assert got.drop(columns="device_mean_ps").equals(grouped.drop(columns="device_mean_ps"))


@pytest.mark.parametrize("per_device", [False, True])
def test_per_op_sums_are_added_as_chunks_are_measured_and_equal_one_pass(per_device, monkeypatch):
    """The passes whose per-chunk results are arrays over every op of the run (paired in-flight time, exposed
    collective time, self time per step) get them added as measured (a few sums back, not one per chunk: on
    a pod, chunks x ops), and equal the row-level functions over all rows."""
    from traceview.hostreduce.run_ops import RunOps

    hosts, raw = run_tables(5, steps=True, overlap=0.2)
    stats, rows = aggregate_ops(raw, per_device)
    run = merged(hosts, per_device)
    assert len(run._chunk_parts()) >= 3
    back: list[tuple[bool, int]] = []
    plain = RunOps.for_each

    def counted(self, task, full_only, op_index=None, fold=None):
        out = plain(self, task, full_only, op_index, fold)
        back.append((fold is not None, len(out)))
        return out
    monkeypatch.setattr(RunOps, "for_each", counted)
    ops = _same_measures(run, raw, stats, rows, 5, True)
    assert ops is not None
    summed = [n for folded, n in back if folded]
    assert len(summed) >= 3 and all(n <= 2 for n in summed)     # pairs, exposure, per step: one sum each here


def test_added_sums_whole_numbers_ors_flags_and_refuses_fractions():
    from traceview.runtime.forked import added

    a = (np.array([True, False]), np.array([[1, 2], [3, 4]], dtype=np.int64))
    b = (np.array([False, False]), np.array([[10, 20], [30, 40]], dtype=np.int64))
    got = added(added(None, a), b)
    np.testing.assert_array_equal(got[0], [True, False])
    np.testing.assert_array_equal(got[1], [[11, 22], [33, 44]])
    assert added(a, None) is a
    with pytest.raises(TypeError):
        added(np.ones(2), np.ones(2))
