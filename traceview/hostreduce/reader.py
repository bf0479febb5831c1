"""Reading a run's hosts again, for what their parts do not hold: one interface, :class:`HostReader`.

A part holds what the analysis reads (:mod:`traceview.hostreduce.part`); three things need the hosts
again: a merge that lacks rows (a device in several hosts' files, an async op whose name does not say
so) reduces some hosts again keeping them; a view that shows op executions or host events (the API's
``op_executions``, a dashboard's timeline) reads those tables; the memory view reads the allocator events
of a file whose part did not reduce them. The profile's reader does all three: from the tables it kept
(:class:`TablesReader`, which a profile built from tables in memory uses too), else from the files
(``traceview.trace.read.FilesReader``, through the table cache where the reading used it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
import pandas as pd

from traceview.hostreduce.host_ops import KeepRows, OpsPart, reduce_ops
from traceview.hostreduce.memory_peaks import HostPeaks


class HostReader(Protocol):
    """Reads a run's host files again (index ``i``: the profile's ``parts[i]``, ``source.files[i]``)."""

    def reduce_again(self, parts: Sequence[OpsPart], keep: Mapping[int, KeepRows]) -> dict[int, OpsPart]:
        """Those hosts' op tables reduced again keeping the rows ``keep`` asks for (``parts``: as they are)."""
        ...

    def op_executions(self) -> pd.DataFrame:
        """Every op execution of the run (``parsers.profile.OP_COLUMNS``), hosts in order."""
        ...

    def host_events(self) -> pd.DataFrame:
        """Every host event of the run (``parsers.profile.HOST_EVENT_COLUMNS``), hosts in order."""
        ...

    def host_peaks(self, index: int) -> HostPeaks | None:
        """File ``index``'s allocator events reduced to their peaks; None: a file that has none to read
        (a trace-event JSON file, or tables given in memory)."""
        ...


class TablesReader:
    """A run's tables held in memory: every host's op executions and host events, hosts in order."""

    def __init__(self, ops: pd.DataFrame, host_events: pd.DataFrame) -> None:
        self.ops = ops
        self.events = host_events

    def reduce_again(self, parts: Sequence[OpsPart], keep: Mapping[int, KeepRows]) -> dict[int, OpsPart]:
        """Each part's rows are the op table's next ``n_rows`` rows: those slices reduced again."""
        bounds = np.concatenate(([0], np.cumsum([p.n_rows for p in parts]))).astype(np.int64)
        return {i: reduce_ops(self.ops.iloc[bounds[i]:bounds[i + 1]], k) for i, k in keep.items()}

    def op_executions(self) -> pd.DataFrame:
        return self.ops

    def host_events(self) -> pd.DataFrame:
        return self.events

    def host_peaks(self, index: int) -> HostPeaks | None:
        return None
