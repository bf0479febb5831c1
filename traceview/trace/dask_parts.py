"""A pod's host parts left on the Dask workers that read them, and the analysis' passes run there.

Each read task's result is a pair on its worker: the host's result as the caller gets it, and the
worker's own copy of the part with its arrays (a memory map of the spill file it wrote, or the arrays
themselves where it sees no spill folder). Two small tasks split it (:func:`first`, :func:`second`): the
caller gathers the first, and keeps the futures of the second, the held parts (:class:`DaskParts`, a
``hostreduce.workers.PartWorkers``), with the Dask client open while the analysis runs, so that a worker
lets each pair, and the result in it, go once the caller has it; a pass submits a function of some parts with the merged context, Dask runs it on the worker that
holds them (no part travels), and only its result comes back. The futures are dropped, and the client
closed if the reading opened it, when the holder is no longer referenced.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceview.hostreduce.host_ops import OpsPart
    from traceview.hostreduce.part import HostPart


class DaskParts:
    """The read tasks' futures by file (see the module docstring); :meth:`for_files` gives the
    ``PartWorkers`` of a profile's parts."""

    def __init__(self, client: Any, futures: dict[str, Any], own: bool) -> None:
        self.client = client
        self.futures = futures            # file as the caller spelled it -> future of its held part
        self.order: list[str] = []        # the profile's files, in its parts' order
        self.devices_by_part: list[list[str]] = []
        if own:
            weakref.finalize(self, client.close)

    def for_files(self, files: Sequence[str], parts: Sequence[HostPart]) -> DaskParts | None:
        """This holder for the profile's parts (``files[i]`` read into ``parts[i]``); None where a part was
        not read on the cluster (found in the table cache) or lacks its copy there."""
        if any(f not in self.futures for f in files):
            return None
        self.order = list(files)
        self.devices_by_part = [list(p.ops.activity.devices) for p in parts]
        return self

    def map(self, fn: Callable[..., Any], groups: Sequence[Sequence[int]], *shared: Any,
            fold: Callable[[Any, Any], Any] | None = None) -> list[Any]:
        """``fn(group, held parts, *shared)`` per group, on the worker holding the group's parts: one task per
        worker, for all the groups whose first part it holds (a pod's hosts: few tasks, not one per host).
        ``fold``: each task adds up its groups' results as they are made, and the tasks' sums are added here
        as they finish (``hostreduce.workers.PartWorkers.map``): one sum per worker travels, and this process
        holds the running sum and one task's, not a pod's thousands of results."""
        if not groups:
            return []
        [context] = self.client.scatter([shared], hash=False)     # once, whatever the number of tasks
        held = [[self.futures[self.order[i]] for i in group] for group in groups]
        where = self.client.who_has([g[0] for g in held if g])
        by_worker: dict[str | None, list[int]] = {}
        for k, g in enumerate(held):
            places = sorted(where.get(g[0].key, ())) if g else []
            by_worker.setdefault(places[0] if places else None, []).append(k)
        tasks = [self.client.submit(_run_held, [list(groups[k]) for k in ks], [held[k] for k in ks], fn, context,
                                    fold, workers=[worker] if worker else None, allow_other_workers=True,
                                    pure=False)
                 for worker, ks in by_worker.items()]
        if fold is not None:
            return [_added_as_finished(tasks, fold)]
        out: list[Any] = [None] * len(groups)
        for ks, found in zip(by_worker.values(), self.client.gather(tasks)):
            for k, value in zip(ks, found):
                out[k] = value
        return out


def _run_held(groups: list[list[int]], parts: list[list[OpsPart | None]], fn: Callable[..., Any],
              context: tuple, fold: Callable[[Any, Any], Any] | None = None) -> Any:
    """On a worker: ``fn`` of the held parts of each group, the results in a list, or (``fold``) added up as
    they are made (one group's result held at a time besides the sum)."""
    found = (fn(group, held, *context) for group, held in zip(groups, parts))
    return list(found) if fold is None else functools.reduce(fold, found)


def _added_as_finished(tasks: list[Any], fold: Callable[[Any, Any], Any]) -> Any:
    """The tasks' results added up in the order they finish, each let go once added (the first error
    raised as it was)."""
    from distributed import as_completed

    total: Any = None
    for k, future in enumerate(as_completed(tasks)):
        value = future.result()
        total = value if k == 0 else fold(total, value)
        del value
    return total


def first(pair: tuple[Any, Any]) -> Any:
    """The result a read task's pair hands the caller (the held part stays on the worker)."""
    return pair[0]


def second(pair: tuple[Any, Any]) -> Any:
    """The part a read task's pair leaves on its worker: once the caller has the result, the pair (and the
    result with it) is let go there, and only this stays."""
    return pair[1]
