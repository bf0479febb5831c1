"""The one typed intermediate of a run: each host file reduced, where it was read, to a :class:`HostPart`.

Every way of reading a host (this process, a pool's worker, a Dask worker, the parsed-table cache; an
``*.xplane.pb`` or a trace-event JSON file; one host or a pod's) ends in :func:`reduce_host`, so every
part is built alike; the parts of a run are then combined (:mod:`traceview.hostreduce.combine`) into what
the analysis reads. A table given in memory (one op table, any number of hosts) is one part.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from traceview.hostreduce.activity import with_host_threads
from traceview.hostreduce.host_ops import OpsPart, reduce_ops
from traceview.hostreduce.memory_peaks import HostPeaks
from traceview.timeline.step_parts import reduce_steps


@dataclass
class HostPart:
    """One host file as the analysis reads it.

    ``file``: the file it was read from, as the caller spelled it ("" for tables given in memory);
    ``ops``: its op table reduced (op groups' exact sums, per-device totals, the rows the merge needs,
    and its activity: device busy intervals, step spans, its host threads cut, its step table reduced);
    ``memory``: its allocator events reduced to their peaks where the reading was asked to (None: not
    read there; the profile's reader reads them when the memory view asks, :class:`HostReader`).
    """

    file: str
    ops: OpsPart
    memory: HostPeaks | None = None


def reduce_host(ops: pd.DataFrame, host_events: pd.DataFrame, steps: pd.DataFrame, file: str = "",
                memory: HostPeaks | None = None) -> HostPart:
    """One host's tables (``parsers.profile`` columns) reduced to its part: the op table, its activity with
    the host's threads cut and its step spans summed up, the step table reduced."""
    part = reduce_ops(ops)
    part.activity = with_host_threads(part.activity, host_events)
    part.activity.step_times = reduce_steps(steps)
    return HostPart(file=file, ops=part, memory=memory)
