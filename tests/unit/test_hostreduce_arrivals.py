"""A pod's hosts folded as they arrive (hostreduce.arrivals): the stragglers from the running per-step sums equal
those of one pass over every row, whatever order the hosts arrive in, and what a host's arrival leaves in the
parent holds neither its per-step sums nor its step spans in memory (they wait in the spill file, read back
only where two hosts' spans name one device)."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from tests.unit.test_hostreduce_activity import _assert_same_stragglers, host_ops
from traceview.advice.stragglers import stragglers
from traceview.hostreduce.arrivals import Arrivals
from traceview.hostreduce.combine import run_activity
from traceview.hostreduce.part import reduce_host
from traceview.hostreduce.spill import RowSpill, spilled
from traceview.parsers.profile import HOST_EVENT_COLUMNS, OP_COLUMNS, STEP_COLUMNS, empty_frame
from traceview.timeline.packed_frame import PackedFrame


def _pod(rng: np.random.Generator, shared_device: bool) -> list[pd.DataFrame]:
    """Random hosts (1-3 devices, 20-200 rows each, steps -1..3); the last host's times copied from the first's
    (ties of the latest in every step); ``shared_device``: the last host also holds rows of host 0's device."""
    n_hosts = int(rng.integers(3, 8))
    hosts = [host_ops(rng, f"h{i}", [f"h{i}/TPU:{k}" for k in range(int(rng.integers(1, 4)))],
                      int(rng.integers(20, 200))) for i in range(n_hosts)]
    rows = min(len(hosts[0]), len(hosts[-1]))
    for column in ("start_ps", "duration_ps", "step"):
        hosts[-1].loc[: rows - 1, column] = hosts[0][column].to_numpy()[:rows]
    if shared_device:
        hosts[-1]["device"] = hosts[-1]["device"].astype(str)
        hosts[-1].loc[: rows // 2, "device"] = "h0/TPU:0"
    return [h.astype(dict(OP_COLUMNS)) for h in hosts]


def _arrived(hosts: list[pd.DataFrame], order: np.ndarray, spill: RowSpill):
    """Each host reduced and pickled (as from a reading worker), folded in ``order``, its arrays spilled."""
    parts = [pickle.loads(pickle.dumps(reduce_host(h, empty_frame(HOST_EVENT_COLUMNS), empty_frame(STEP_COLUMNS))))
             for h in hosts]
    fold = Arrivals()
    for i in order:
        fold.add(parts[i])
        spill.keep(parts[i].ops)
    return parts, fold


@pytest.mark.parametrize("seed", range(8))
def test_stragglers_folded_as_hosts_arrive_equal_one_pass(seed, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    rng = np.random.default_rng(4100 + seed)
    hosts = _pod(rng, shared_device=False)
    whole = pd.concat(hosts, ignore_index=True).astype(dict(OP_COLUMNS))
    spill = RowSpill()
    try:
        parts, fold = _arrived(hosts, rng.permutation(len(hosts)), spill)
        # what each arrival leaves: no per-step sums, and the step spans packed, their columns views of the
        # spill file (no DataFrame per host held)
        for part in parts:
            activity = part.ops.activity
            assert activity.span_summary is not None and activity.span_summary.sums is None
            spans = activity.step_spans
            assert isinstance(spans, PackedFrame)
            assert len(spans) and all(spilled(column) for column in spans.columns.values())
        assert fold.spans.hosts == len(hosts) and fold.spans.result(len(hosts)) is not None
        activity = run_activity(parts, fold.spans)
        assert activity.span_sums is not None           # the stragglers read the running sums, not the spans
        _assert_same_stragglers(stragglers(activity), stragglers(whole))
        # a fold that misses a host is not used: the spans are summed up again from the spill file
        short = Arrivals()
        for part in parts[1:]:
            short.spans.add(part.ops.activity.span_summary)
        partial = run_activity(parts, short.spans)
        assert partial.span_sums is None
        _assert_same_stragglers(stragglers(partial), stragglers(whole))
    finally:
        spill.close()


@pytest.mark.parametrize("seed", range(4))
def test_a_device_in_two_hosts_reads_the_spilled_spans_and_equals_one_pass(seed, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    rng = np.random.default_rng(4200 + seed)
    hosts = _pod(rng, shared_device=True)
    whole = pd.concat(hosts, ignore_index=True).astype(dict(OP_COLUMNS))
    spill = RowSpill()
    try:
        parts, fold = _arrived(hosts, rng.permutation(len(hosts)), spill)
        activity = run_activity(parts, fold.spans)
        assert activity.host_spans is None                # the spans of the shared device joined, from the file
        _assert_same_stragglers(stragglers(activity), stragglers(whole))
    finally:
        spill.close()


@pytest.mark.parametrize("seed", range(4))
def test_hosts_names_are_the_runs_copies_and_merge_as_their_own(seed, tmp_path, monkeypatch):
    """Each host arrives (pickled, as from a reading worker) with its own copies of the pod's names: folded in,
    an equal name is one object across the hosts, and the merged op table equals that of the parts left with
    their own copies."""
    from traceview.hostreduce.arrivals import Names
    from traceview.hostreduce.run_ops import merge_parts

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    rng = np.random.default_rng(4200 + seed)
    hosts = _pod(rng, shared_device=False)
    spill = RowSpill()
    try:
        parts, _ = _arrived(hosts, rng.permutation(len(hosts)), spill)
        own = [pickle.loads(pickle.dumps(reduce_host(h, empty_frame(HOST_EVENT_COLUMNS), empty_frame(STEP_COLUMNS))))
               for h in hosts]
        first: dict[str, object] = {}
        for part in parts:
            for name in part.ops.op_names + part.ops.modules:
                assert first.setdefault(name, name) is name          # one object per name across hosts
            for device in part.ops.activity.devices.values():
                for name in device.collective_names.tolist():
                    assert first.setdefault(name, name) is name
        names = [n for p in own for n in p.ops.op_names]
        assert len({id(n) for n in names}) > len(set(names))           # left alone, each host has its own
        for per_device in (False, True):
            a = merge_parts([p.ops for p in parts], per_device=per_device)
            b = merge_parts([p.ops for p in own], per_device=per_device)
            pd.testing.assert_frame_equal(a.stats, b.stats, check_exact=True)
    finally:
        spill.close()

    table = Names()
    values = np.array(["x" + str(k % 3) for k in range(9)], dtype=object)
    table._in_array(values)
    assert [id(v) for v in values[:3]] == [id(v) for v in values[3:6]]

