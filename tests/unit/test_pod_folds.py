"""What a pod's caller holds across its hosts at once: each host's small results added to the run's as they
are read, never one array (or table) of every host's (hosts x what a host has), whatever the way of reading.

The figures stay those of one pass over everything; the bound on what is held at once is measured with
tracemalloc on generated hosts that share most of what they carry, as a pod's hosts do.
"""

from __future__ import annotations

import tracemalloc
from types import SimpleNamespace

import numpy as np
import pandas as pd

from traceview.hostreduce import run_ops


def _peak_while(fn) -> int:
    """Bytes allocated at most at once while ``fn()`` runs, above what was held when it began."""
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def test_the_runs_distinct_steps_are_added_host_by_host(monkeypatch):
    """The run's distinct steps (for the self time per step) are each host's distinct steps added in turn: the
    same steps as all of them at once, and at most a few hosts' worth held while they are added (a pod's
    hosts share their steps: one array of every host's, and its hash table, grew with hosts x steps)."""
    rng = np.random.default_rng(7)
    n_hosts, n_steps = 120, 4000
    parts = []
    for h in range(n_hosts):
        steps = rng.permutation(np.arange(-1, n_steps + h % 7, dtype=np.int32))    # mostly shared, a few not
        parts.append(SimpleNamespace(kept_steps=steps[rng.random(steps.size) < 0.97]))
    run = SimpleNamespace(parts=parts, for_each=lambda task, full_only, fold=None: [])
    seen: list[np.ndarray] = []
    monkeypatch.setattr(run_ops, "per_step_self_time_in_chunks",
                        lambda for_each, index, found: seen.append(found) or pd.Series([], dtype=object))
    held = _peak_while(lambda: run_ops.per_step_self_time(run, 0, pd.RangeIndex(0)))
    [found] = seen
    everything = np.concatenate([p.kept_steps for p in parts])
    np.testing.assert_array_equal(np.sort(pd.unique(found[found >= 0])),
                                  np.sort(pd.unique(everything[everything >= 0])))
    assert found.dtype == np.int32
    one_host = parts[0].kept_steps.nbytes
    assert held < 10 * one_host, (held, one_host, everything.nbytes)       # all at once: 120 hosts' worth


def test_a_pods_peak_details_wait_on_disk_as_its_hosts_arrive_and_read_back_the_same():
    """Each arriving host's packed allocator details (timelines, rows at the peak: only the memory view reads
    them) are written to the run's file as the host arrives, so the caller holds none of their bytes; each
    peak unpacks to the same timeline and rows, and pickles (to a forked or remote process) as its bytes."""
    import pickle

    from tests.unit.test_memory_peaks_packed import _events, _rows
    from traceview.hostreduce.memory_peaks import host_peaks
    from traceview.hostreduce.part import HostPart
    from traceview.trace.hosts import HostResult, _arrival

    rng = np.random.default_rng(3)
    held = [host_peaks(_events(rng, f"h{h}", 2, int(rng.integers(50, 2500)))) for h in range(6)]
    before = [_rows(p.peaks) for p in held]
    packed = [[p.detail for p in hp.peaks] for hp in held]
    spill = SimpleNamespace(keep=lambda ops: ops)          # a pod's spill: its rows' part is not what is tested
    arrived = _arrival(None, spill)
    for k, hp in enumerate(held):
        arrived(HostResult(f"h{k}", part=HostPart(file=f"h{k}", ops=None, memory=hp)))
    assert all(not isinstance(p.detail, (bytes, dict)) for hp in held for p in hp.peaks)   # none in memory
    assert [_rows(p.peaks) for p in held] == before
    for hp, details in zip(held, packed):
        for peak, detail in zip(hp.peaks, details):
            assert pickle.loads(pickle.dumps(peak)).detail == detail
    one_by_one = _arrival(None, None)                       # not a pod's: the details stay as they came
    alone = host_peaks(_events(rng, "h9", 1, 300))
    one_by_one(HostResult("h9", part=HostPart(file="h9", ops=None, memory=alone)))
    assert isinstance(alone.peaks[0].detail, bytes)
