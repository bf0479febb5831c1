"""Processes elsewhere that still hold a run's host parts: the Dask workers that read them.

A pod read on a Dask cluster leaves each host's part (its kept rows, its activity's interval sets) on the
worker that read it, besides the copy sent to the caller. The analysis' per-host passes (the kept rows'
per-chunk measures, ``hostreduce.run_ops``; the idle causes per device, ``advice.idle``) then run there, as a
second round of tasks with the merged context (op labels, step windows, the run's busy union) that only
the caller knows once every host is in, and only their small results travel back: the caller's CPU stays
with the merge and the report. :class:`PartWorkers` is what those passes see; ``traceview.trace.dask_parts``
implements it. The results are the ones the passes compute from the caller's copy, byte for byte: the same
functions over the same arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol


class PartWorkers(Protocol):
    """Where a run's parts (``Profile.parts``, same indices) are held besides the caller."""

    # per part, the names of its devices in its activity's order (what the caller's copy holds): a pass can
    # tell whether a device's rows are in one part only, so that the part alone measures it
    devices_by_part: list[list[str]]

    def map(self, fn: Callable[..., Any], groups: Sequence[Sequence[int]], *shared: Any,
            fold: Callable[[Any, Any], Any] | None = None) -> list[Any]:
        """``[fn(group, [the held parts of group], *shared) for group in groups]``, each run where its parts
        are held (``shared`` sent once); the results in the groups' order, an error raised as it was.
        ``fold``: results that add up (``fold(sum, result)``, the same sum whatever the order and grouping
        they are added in): each place adds up its groups' results before they travel, and the caller adds
        those sums as they arrive, so it never holds every group's result; a list of the one sum then
        (empty: no group)."""
        ...
