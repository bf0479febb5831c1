"""A run's device activity (hostreduce.activity), reduced per host and merged, equals one pass over all rows,
and the idle causes and stragglers computed from it equal those computed from the op executions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceview.advice.idle import CAUSES, idle_causes
from traceview.advice.stragglers import stragglers
from traceview.hostreduce.activity import merge_activity, names_apart, reduce_activity, with_host_threads
from traceview.parsers.profile import HOST_EVENT_COLUMNS, OP_COLUMNS
from traceview.timeline.lateness import distinct as _distinct
from traceview.timeline.lateness import names_in as _names_in
from traceview.timeline.lateness import summarize

_MISSING = None     # a row with no name

NAMES = ["fusion.1", "all-reduce.2", "all-gather-start.3", "copy.4", "nccl_AllReduce"]


def host_ops(rng: np.random.Generator, host: str, devices: list[str], rows: int) -> pd.DataFrame:
    frames = []
    for device in devices:
        dur = rng.integers(0, 80, rows)
        start = np.cumsum(rng.integers(0, 60, rows) + dur) - dur
        start[rng.random(rows) < 0.1] -= 30                           # some overlap the op before
        start[rng.random(rows) < 0.05] = start[0]                    # ties at one start (collectives too)
        frames.append(pd.DataFrame({
            "host": host, "device": device, "line": rng.choice(["XLA Ops", "Stream #1"], rows),
            "module": "m", "program_id": 1, "op": rng.choice(NAMES, rows), "category": "",
            "start_ps": start, "duration_ps": dur, "self_ps": dur, "step": rng.integers(-1, 4, rows),
            "trace_flops": np.nan, "trace_bytes": np.nan, "executions": 1}))
    return pd.concat(frames, ignore_index=True).astype(dict(OP_COLUMNS))


def _same(a, b) -> None:
    assert a.n_rows == b.n_rows and list(a.devices) == list(b.devices)
    for name, x in a.devices.items():
        y = b.devices[name]
        assert (x.first_ps, x.last_ps, x.host) == (y.first_ps, y.last_ps, y.host)
        for u, v in zip(x.busy + (x.collective_starts, x.collective_names),
                        y.busy + (y.collective_starts, y.collective_names)):
            np.testing.assert_array_equal(u, v)
    assert set(a.op_lines) == set(b.op_lines)
    for u, v in zip(a.busy_union, b.busy_union):
        np.testing.assert_array_equal(u, v)
    assert a.busy_union[0].size > 0
    key = ["step", "device", "host"]
    pd.testing.assert_frame_equal(a.step_spans.sort_values(key).reset_index(drop=True),
                                  b.step_spans.sort_values(key).reset_index(drop=True), check_dtype=False)


@pytest.mark.parametrize("seed", range(4))
def test_hosts_merged_equal_one_pass(seed):
    rng = np.random.default_rng(seed)
    # host h1 also holds rows of h0's second device (a device in two hosts' files)
    hosts = [host_ops(rng, "h0", ["h0/GPU:0", "h0/GPU:1"], 200), host_ops(rng, "h1", ["h1/GPU:0", "h0/GPU:1"], 150),
             host_ops(rng, "h2", ["h2/GPU:0"], 100)]
    whole = pd.concat(hosts, ignore_index=True).astype(dict(OP_COLUMNS))
    one_pass = reduce_activity(whole)
    merged = merge_activity([reduce_activity(h) for h in hosts])
    _same(merged, one_pass)
    assert len(merged.devices) == 4 and len(merged.step_spans)
    # the views computed from either agree exactly
    events = pd.DataFrame({"host": ["h0", "h0", "h1"], "thread": ["main", "main", "main"],
                           "name": ["PjitFunction(f)", "block_until_ready", "PjitFunction(g)"],
                           "start_ps": [0, 500, 100], "duration_ps": [400, 3000, 2000]})
    events = events.astype({k: v for k, v in HOST_EVENT_COLUMNS.items() if k in events.columns})
    a, b = idle_causes(merged, events), idle_causes(whole, events)
    assert a.causes == b.causes and a.evidence == b.evidence and sum(a.causes[c] for c in CAUSES) == a.idle_ps > 0
    pd.testing.assert_frame_equal(a.per_device, b.per_device)
    sa, sb = stragglers(merged), stragglers(whole)
    pd.testing.assert_frame_equal(sa.steps, sb.steps)
    pd.testing.assert_frame_equal(sa.host_steps, sb.host_steps)
    assert (sa.device, sa.host, sa.most_often_last) == (sb.device, sb.host, sb.most_often_last)


@pytest.mark.parametrize("seed", range(3))
def test_stragglers_summed_host_by_host_equal_one_pass(seed):
    """Hosts whose devices are their own: each host's step spans are summed up alone and merged step by step
    (no table of every (step, device)); the same tables and names as one pass, ties of the latest included."""
    rng = np.random.default_rng(seed)
    hosts = [host_ops(rng, f"h{i}", [f"h{i}/GPU:0", f"h{i}/GPU:1"], 120) for i in range(4)]
    hosts[3]["start_ps"] = hosts[1]["start_ps"].to_numpy()     # h3 a copy of h1's times: ties at every step
    hosts[3]["duration_ps"] = hosts[1]["duration_ps"].to_numpy()
    hosts[3]["step"] = hosts[1]["step"].to_numpy()
    whole = pd.concat(hosts, ignore_index=True).astype(dict(OP_COLUMNS))
    merged = merge_activity([reduce_activity(h) for h in hosts])
    assert merged.host_spans is not None and len(merged.host_spans) == 4 and merged.step_spans.empty
    _assert_same_stragglers(stragglers(merged), stragglers(whole))


@pytest.mark.parametrize("seed", range(4))
def test_stragglers_with_names_found_where_each_host_is_read_equal_one_pass(seed):
    """The names each host's step spans hold found where it is read (``span_summary``, pickled as from a
    worker), its per-step sums merged in one vectorized pass: the same tables and names as one pass over every
    row, with random host and step counts, hosts of one device or several, and ties of the latest."""
    import dataclasses
    import pickle

    rng = np.random.default_rng(100 + seed)
    n_hosts = int(rng.integers(2, 7))
    hosts = [host_ops(rng, f"h{i}", [f"h{i}/TPU:{k}" for k in range(int(rng.integers(1, 4)))],
                      int(rng.integers(20, 200))) for i in range(n_hosts)]
    hosts[-1]["start_ps"] = hosts[0]["start_ps"].to_numpy()[: len(hosts[-1])] if len(hosts[0]) >= len(hosts[-1]) \
        else hosts[-1]["start_ps"]
    whole = pd.concat(hosts, ignore_index=True).astype(dict(OP_COLUMNS))
    parts = []
    for h in hosts:
        activity = reduce_activity(h)
        parts.append(pickle.loads(pickle.dumps(dataclasses.replace(activity,
                                                                   span_summary=summarize(activity.step_spans)))))
    merged = merge_activity(parts)
    assert merged.host_summaries is not None and len(merged.host_summaries) == len(merged.host_spans or [])
    _assert_same_stragglers(stragglers(merged), stragglers(whole))


def test_threads_cut_per_host_equal_the_run_cut_whole_and_a_host_in_two_files_is_cut_whole():
    rng = np.random.default_rng(9)
    hosts = [host_ops(rng, "h0", ["h0/GPU:0"], 200), host_ops(rng, "h1", ["h1/GPU:0"], 150)]
    events = [pd.DataFrame({"host": h, "thread": ["main", "main", "io"], "start_ps": [0, 500, 100],
                            "name": ["PjitFunction(f)", "block_until_ready", "BufferFromHostBuffer"],
                            "duration_ps": [400, 3000, 2000]}) for h in ("h0", "h1")]
    events = [e.astype({k: v for k, v in HOST_EVENT_COLUMNS.items() if k in e.columns}) for e in events]
    both = pd.concat(events, ignore_index=True)
    cut = merge_activity([with_host_threads(reduce_activity(h), e) for h, e in zip(hosts, events)])
    assert cut.hosts is not None and set(cut.hosts) == {"h0", "h1"}
    whole = merge_activity([reduce_activity(h) for h in hosts])
    assert whole.hosts is None                          # not cut where read: the idle causes cut the events
    a, b = idle_causes(cut, both), idle_causes(whole, both)
    assert a.causes == b.causes and a.evidence == b.evidence and a.feeding_threads == b.feeding_threads
    assert a.causes["transfer"] > 0 and a.causes["host"] + a.causes["launch"] > 0
    pd.testing.assert_frame_equal(a.per_device, b.per_device)
    # the second file also names host h0: its threads must be cut together with the first file's
    renamed = events[1].assign(host="h0").astype({"host": "category"})
    twice = merge_activity([with_host_threads(reduce_activity(hosts[0]), events[0]),
                            with_host_threads(reduce_activity(hosts[1]), renamed)])
    assert twice.hosts is None


def test_an_empty_table_has_no_activity():
    empty = pd.DataFrame({k: pd.Series(dtype=v) for k, v in OP_COLUMNS.items()})
    act = reduce_activity(empty)
    assert act.n_rows == 0 and not act.devices and act.step_spans.empty
    assert idle_causes(act, pd.DataFrame()).reason == "the trace has no device op executions"


def test_stragglers_of_a_host_in_two_files_with_devices_apart_equal_one_pass():
    """Devices apart, a host's name in two files: devices summed host by host, hosts from the joined spans."""
    rng = np.random.default_rng(5)
    hosts = [host_ops(rng, "h0", ["h0/GPU:0"], 150), host_ops(rng, "h1", ["h1/GPU:0"], 150),
             host_ops(rng, "h0", ["h0/GPU:1"], 150)]
    whole = pd.concat(hosts, ignore_index=True).astype(dict(OP_COLUMNS))
    merged = merge_activity([reduce_activity(h) for h in hosts])
    assert merged.host_spans is not None
    _assert_same_stragglers(stragglers(merged), stragglers(whole))


def _assert_same_stragglers(a, b) -> None:
    """The stragglers found from merged activities equal those of one pass: tables, names and counts."""
    assert len(a.steps) and len(a.host_steps)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    pd.testing.assert_frame_equal(a.host_steps, b.host_steps)
    assert (a.device, a.host, a.most_often_last, a.host_most_often_last) == \
        (b.device, b.host, b.most_often_last, b.host_most_often_last)
    assert a.device_late_steps == b.device_late_steps and a.host_late_steps == b.host_late_steps


@pytest.mark.parametrize("categorical", [True, False])
def test_the_names_a_span_table_holds_with_rows_that_have_none(categorical):
    """stragglers counts devices and hosts, and tells whether hosts share names, from each table's names:
    a categorical's from the codes it uses (unused categories are not names it holds); a row with no name is
    one marker, the same in every table, and no name to count."""
    def column(values, unused=()):
        if categorical:
            return pd.Series(pd.Categorical(values, categories=sorted({v for v in values if v} | set(unused))))
        return pd.Series(values, dtype=object)

    a = _names_in(column(["d0", None, "d1", "d0"], unused=["never"]))
    b = _names_in(column([None, "d2"]))
    c = _names_in(column(["d3"]))
    assert a == {"d0", "d1", _MISSING} and b == {"d2", _MISSING} and c == {"d3"}
    assert _distinct([a, b, c]) == 4
    assert not names_apart([a, b]) and names_apart([a, c])


@pytest.mark.parametrize("count", [0, 1, 2, 3, 7, 16, 37])
def test_union_of_unions_folded_as_a_binary_counter_equals_one_union(count):
    """Any number of interval sets (each a union: disjoint, sorted; some empty) united a few partial unions at a
    time equal the union of all their intervals at once."""
    from traceview.hostreduce.activity import _union_of_unions
    from traceview.timeline.intervals import union

    rng = np.random.default_rng(count)
    sets = []
    for _ in range(count):
        starts = np.sort(rng.integers(0, 10_000, int(rng.integers(0, 30))))
        sets.append(union(starts, starts + rng.integers(0, 400, starts.size)))
    got = _union_of_unions(sets)
    every = [s for s in sets if s[0].size]
    want = union(np.concatenate([s[0] for s in every]), np.concatenate([s[1] for s in every])) if every \
        else (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
