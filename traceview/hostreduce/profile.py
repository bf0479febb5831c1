"""A run as read: what we know about it, one reduced part per host file, and a reader for the rest.

``traceview.trace.read.load_profile`` builds it from a PATH (hosts read one after another, in a pool or
on Dask, from the parsed-table cache or not); :meth:`Profile.from_tables` from tables in memory. Either
way the analysis reads the parts (``traceview.hostreduce.combine``) and nothing else of the executions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from traceview.hostreduce.part import HostPart, reduce_host
from traceview.hostreduce.reader import HostReader, TablesReader
from traceview.hostreduce.step_times import folded, step_times_of
from traceview.hostreduce.workers import PartWorkers
from traceview.parsers.profile import Device, Source
from traceview.timeline.lateness import SpanFold


@dataclass(frozen=True)
class KeptExecutions:
    """The op executions and host events the reading kept for the views that show executions
    (``ReadOptions.keep_ops``): every row of every host, hosts in order."""

    ops: pd.DataFrame                   # parsers.profile.OP_COLUMNS
    host_events: pd.DataFrame           # parsers.profile.HOST_EVENT_COLUMNS


@dataclass
class Profile:
    """One run: where it was read from, its devices, one :class:`HostPart` per host file read
    (``source.files``, same order), the step rows no part reduced, the run's step times (combined as its
    hosts arrived: hostreduce.step_times), the HLO protos the trace carries,
    the environment it records, reading warnings, and the :class:`HostReader` that reads the hosts again.

    ``kept`` holds the tables the reading kept for the views that show executions (``ReadOptions.keep_ops``),
    or None when it kept none: :meth:`op_executions` and :meth:`all_host_events` give them either way
    (read again when not kept).
    """

    source: Source
    devices: list[Device]
    parts: list[HostPart]
    reader: HostReader
    steps: pd.DataFrame                                         # parsers.profile.STEP_COLUMNS
    step_times: pd.DataFrame                                    # timeline.step_parts.STEP_TIME_COLUMNS
    kept: KeptExecutions | None                                 # None: the reading kept no execution
    hlo_protos: dict[str, bytes] = field(default_factory=dict)  # module name -> HloProto bytes
    environment: dict[str, str] = field(default_factory=dict)   # jax_version, ...
    warnings: list[str] = field(default_factory=list)
    # Processes the analysis of a run of many hosts may use for its per-host measures (runtime.forked): the
    # reading's (``--jobs``, one per core by default); 1 for a single host.
    jobs: int = 1
    # The stragglers' per-step sums of the hosts' step spans, folded as the hosts arrived (their own let go);
    # None: each part holds its own (hostreduce.activity.merge_activity folds them)
    span_fold: SpanFold | None = None
    # Where the parts are held besides here (a Dask cluster's workers that read them): the per-host passes
    # run there (hostreduce.workers); None: here, in ``jobs`` processes.
    workers: PartWorkers | None = None

    @classmethod
    def from_tables(cls, source: Source, ops: pd.DataFrame, host_events: pd.DataFrame, steps: pd.DataFrame,
                    devices: list[Device], **metadata) -> Profile:
        """A profile of tables held in memory (any number of hosts): one part, read again from the tables."""
        parts = [reduce_host(ops, host_events, steps)]
        return cls(source=source, devices=devices, parts=parts, reader=TablesReader(ops, host_events), steps=steps,
                   step_times=step_times_of(parts, steps, folded(parts)), kept=KeptExecutions(ops, host_events),
                   **metadata)

    def op_executions(self) -> pd.DataFrame:
        """Every op execution (the kept table, else read again from the files)."""
        return self.reader.op_executions()

    def all_host_events(self) -> pd.DataFrame:
        """Every host event (the kept table, else read again from the files)."""
        return self.reader.host_events()
