"""The tables of one host, filled line by line by a trace reader and made DataFrames once.

Both readers (:mod:`traceview.parsers.xspace.reader`, :mod:`traceview.parsers.trace_json.reader`) turn
their lines into :class:`OpChunk` s of numpy columns, host event chunks, step rows and devices, then ask
for the tables: the op table (one row per op execution), the host event table and the steps, each op
given its step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceview.parsers.profile import HOST_EVENT_COLUMNS, OP_COLUMNS, STEP_COLUMNS, Device, as_declared, empty_frame
from traceview.parsers.tables.columns import joined, repeat_categories
from traceview.parsers.tables.gpu_kernels import GpuKernelRows
from traceview.parsers.tables.steps import step_of, step_rows_of, steps_table


@dataclass
class OpChunk:
    """Op rows of one line, before they become DataFrame columns."""

    device: str
    line: str | pd.Categorical   # one line, or each row's (trace JSON: many lines in one chunk)
    start: np.ndarray
    duration: np.ndarray
    self_ps: np.ndarray
    op: pd.Categorical
    module: pd.Categorical
    category: pd.Categorical
    program_id: np.ndarray
    flops: np.ndarray
    bytes_: np.ndarray
    extra: dict = field(default_factory=dict)  # run_id for CPU step detection


class TableBuilder:
    """One host's tables while a reader fills them: op row chunks, host event chunks (thread, start,
    duration, name), step rows (see :func:`~traceview.parsers.tables.steps.step_block`), devices, the TPU
    module executions per device (start, end, names, program ids), the GPU kernels' executions, the
    warnings, and the count of events dropped for impossible times (``dropped["events"]``) or device-clock
    times ignored (``dropped["device_times"]``)."""

    def __init__(self, host: str, path: str, warnings: list[str] | None = None) -> None:
        self.host, self.path = host, path
        self.warnings: list[str] = list(warnings or [])
        self.chunks: list[OpChunk] = []
        self.devices: list[Device] = []
        self.host_chunks: list[dict] = []
        self.step_rows: list[dict[str, np.ndarray]] = []
        self.module_execs: dict[str, tuple] = {}
        self.dropped: dict[str, int] = {"events": 0, "device_times": 0}
        self.kernels = GpuKernelRows(path)
        self.run_ids: np.ndarray | None = None  # per op row, its run id (CPU/GPU module executions); set by ops_frame

    def ops_frame(self) -> pd.DataFrame:
        self.chunks = [c for c in self.chunks if c.start.size]  # lines whose events were all dropped
        if not self.chunks:
            return empty_frame(OP_COLUMNS)
        from pandas.api.types import union_categoricals

        sizes = [c.start.size for c in self.chunks]
        frame = pd.DataFrame({
            "host": pd.Categorical.from_codes(np.zeros(sum(sizes), dtype=np.int8), [self.host]),
            "device": repeat_categories([c.device for c in self.chunks], sizes),
            "line": repeat_categories([c.line for c in self.chunks], sizes),
            "module": union_categoricals([c.module for c in self.chunks]),
            "program_id": joined([c.program_id for c in self.chunks], np.int64),
            "op": union_categoricals([c.op for c in self.chunks]),
            "category": union_categoricals([c.category for c in self.chunks]),
            "start_ps": joined([c.start for c in self.chunks], np.int64),
            "duration_ps": joined([c.duration for c in self.chunks], np.int64),
            "self_ps": joined([c.self_ps for c in self.chunks], np.int64),
            "step": np.full(sum(sizes), -1, dtype=np.int32),
            "trace_flops": joined([c.flops for c in self.chunks], np.float64),
            "trace_bytes": joined([c.bytes_ for c in self.chunks], np.float64),
            "executions": joined([c.extra.get("executions", np.ones(c.start.size, dtype=np.int8))
                                   for c in self.chunks], np.int8),
        }, copy=False)  # columns as they are: no copy into 2-D blocks
        with_runs = any("run_id" in c.extra for c in self.chunks)  # none: every run id is 0
        self.run_ids = np.concatenate([c.extra.get("run_id", np.zeros(c.start.size, dtype=np.int64))
                                        for c in self.chunks]) if with_runs else None
        return as_declared(frame, OP_COLUMNS)

    def host_frame(self) -> pd.DataFrame:
        chunks = [c for c in self.host_chunks if c["start"].size]
        if not chunks:
            return empty_frame(HOST_EVENT_COLUMNS)
        from pandas.api.types import union_categoricals

        sizes = [c["start"].size for c in chunks]
        frame = pd.DataFrame({
            "host": pd.Categorical.from_codes(np.zeros(sum(sizes), dtype=np.int8), [self.host]),
            "thread": repeat_categories([c["thread"] for c in chunks], sizes),
            "name": union_categoricals([c["name"] for c in chunks]),
            "start_ps": joined([c["start"] for c in chunks], np.int64),
            "duration_ps": joined([c["duration"] for c in chunks], np.int64),
        }, copy=False)
        return as_declared(frame, HOST_EVENT_COLUMNS)

    def assign_steps(self, ops: pd.DataFrame, annotations) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The steps table, and each op's step in ``ops["step"]`` (see :mod:`traceview.parsers.tables.steps`);
        ``annotations``: the host's step annotations as (start, end, step) arrays sorted by start, or None."""
        rows = step_rows_of(ops, self.step_rows, annotations, self.module_execs, self.run_ids)
        if not rows:
            if not ops.empty:
                self.warnings.append(f"{self.path}: no steps found (no Steps line, step annotation "
                                     "or repeated module execution); ops have step -1")
            return ops, empty_frame(STEP_COLUMNS)
        steps = steps_table(rows)
        if not ops.empty:
            ops["step"] = step_of(ops, steps, windows_to_next=(steps["source"] == "host_annotation").any())
        return ops, steps
