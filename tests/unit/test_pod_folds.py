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
    run = SimpleNamespace(parts=parts, for_each=None)
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
