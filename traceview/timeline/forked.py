"""A pod's merged analysis spread over the cores: per host (or device) work run in forked processes.

Once a pod's hosts are merged, what is left is measured host by host or device by device (the kept rows'
overlaps and steps, the idle causes, the stragglers: ``timeline.run_ops``, ``advice``), in the parent, after
the last host was read, on one core. :func:`fork_map` runs those pieces in ``jobs`` processes forked from the
parent: they inherit everything it holds (the merged parts, and the spilled arrays' memory maps, whose files
are already unlinked), so only an index goes to each and only its small result comes back. The results come
in the items' order and the callers combine them as they would one by one: the output is the same byte for
byte whatever ``jobs`` is.

Forked only where forking is safe: Linux, no other Python thread running but the main one and at most one
helper (the table cache's writer, a progress bar), and where there are at least two items and two jobs; else
one by one, here. A process that ran JAX forks too (its threads are native ones the children never call into,
as for the reading pool: traceview.trace.hosts), without JAX's warning about it. ``TRACEVIEW_NO_FORK=1``:
never.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

_TASK: Callable[[int], Any] | None = None


def fork_map(task: Callable[[int], Any], count: int, jobs: int) -> list[Any]:
    """``[task(i) for i in range(count)]``, computed by ``jobs`` forked processes when it can be."""
    if jobs <= 1 or count < 2 or not _can_fork():
        return [task(i) for i in range(count)]
    import multiprocessing

    global _TASK
    _TASK = task
    try:
        with warnings.catch_warnings():
            # JAX warns at every fork of a process that ran it; the children never call into JAX
            warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
            pool = multiprocessing.get_context("fork").Pool(min(jobs, count))
        with pool:
            return pool.map(_run, range(count), chunksize=max(1, count // (4 * jobs)))
    finally:
        _TASK = None


def fork_map_items(task: Callable[[Any], Any], items: Sequence[Any], jobs: int) -> list[Any]:
    """:func:`fork_map` over a sequence's items."""
    return fork_map(lambda i: task(items[i]), len(items), jobs)


def _run(index: int) -> Any:
    assert _TASK is not None
    return _TASK(index)


def _can_fork() -> bool:
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() <= 2
            and not os.environ.get("TRACEVIEW_NO_FORK"))


# A run's kept rows come in chunks, each holding whole devices (a host, or the hosts sharing a device): a
# ``ForEach`` applies a function of one chunk (its raw rows, and per row its op row or label) to every chunk
# and returns the results in chunk order (timeline.run_ops.RunOps.for_each: in forked processes).
ForEach = Callable[[Callable[[Any, Any], Any]], list[Any]]


def one_chunk(raw: Any, rows: Any) -> ForEach:
    """The ``ForEach`` of a single table (the row-level functions: every row in one chunk)."""
    return lambda task: [task(raw, rows)]


def batches(count: int, jobs: int) -> list[range]:
    """``range(count)`` cut into at most ``4 * jobs`` contiguous runs (one forked task each, whose results
    it merges before they travel: a pod's per-host results never all held at once)."""
    parts = max(1, min(count, 4 * max(jobs, 1)))
    bounds = [count * k // parts for k in range(parts + 1)]
    return [range(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
