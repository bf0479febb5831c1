"""What every reader produces: the op, host-event and step tables (their columns), the devices, the source.

Every table is a pandas DataFrame with the columns documented here; times are
integer picoseconds (``*_ps``) as in the XSpace format, converted to
microseconds only at the report boundary. A run as read (one reduced part per
host file) is ``traceview.hostreduce.profile.Profile``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

# One row per device op execution, counted as XProf's HLO op stats count
# occurrences. String columns are pandas categoricals.
OP_COLUMNS: dict[str, str] = {
    "host": "category",         # host name (file stem of the .xplane.pb)
    "device": "category",       # "<host>/TPU:0", "<host>/GPU:1", "<host>/CPU"
    "line": "category",         # XLine name: "XLA Ops", "Stream #12(...)", thread name
    "module": "category",       # HLO module name, e.g. "jit_train_step"
    "program_id": "int64",      # XLA program id; -1 when the trace does not say
    "op": "category",           # HLO instruction name, e.g. "fusion.3"
    "category": "category",     # hlo_category when the trace has one, else ""
    "start_ps": "int64",        # absolute start (session clock)
    "duration_ps": "int64",     # device time of the op (device-clock stats preferred)
    "self_ps": "int64",         # duration minus time covered by nested child ops
    "step": "int32",            # step number, -1 when outside every step
    "trace_flops": "float64",   # flops the trace itself reports for the op (TPU), NaN if none
    "trace_bytes": "float64",   # bytes_accessed the trace reports (TPU), NaN if none
    # 1 where the row starts an execution of its op, 0 for a further kernel of the same execution (a
    # GPU op may launch several: a cuBLAS call's memset and GEMM); occurrences count executions,
    # rows count kernels (XProf's occurrences). Readers that cannot tell leave every row 1.
    "executions": "int8",
}
# Columns a reader may leave out, and the value every row then has.
OP_COLUMN_DEFAULTS: dict[str, int] = {"executions": 1}

# Host-side events: python, runtime and framework threads.
HOST_EVENT_COLUMNS: dict[str, str] = {
    "host": "category",
    "thread": "category",
    "name": "category",
    "start_ps": "int64",
    "duration_ps": "int64",
}

# One row per step per device.
STEP_COLUMNS: dict[str, str] = {
    "device": "category",
    "step": "int32",
    "start_ps": "int64",
    "duration_ps": "int64",
    "source": "category",       # "steps_line", "host_annotation", "module"
}


_EMPTY_FRAMES: dict[tuple[tuple[str, str], ...], pd.DataFrame] = {}


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    """An empty DataFrame with the given column dtypes: a copy of one built once per set of columns
    (building one costs far more than copying it, and every host file read needs a few)."""
    key = tuple(columns.items())
    template = _EMPTY_FRAMES.get(key)
    if template is None:
        template = _EMPTY_FRAMES[key] = pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in columns.items()})
    return template.copy()


def as_declared(frame: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """`frame` with the declared column dtypes, casting only the columns whose dtype differs.

    A whole-frame ``astype`` copies every column even when none changes, and
    readers build their columns typed already.
    """
    if columns is OP_COLUMNS and any(name not in frame.columns for name in OP_COLUMN_DEFAULTS):
        frame = frame.assign(**{name: value for name, value in OP_COLUMN_DEFAULTS.items() if name not in frame.columns})
    wrong = {name: dtype for name, dtype in columns.items() if not _has_dtype(frame[name], dtype)}
    return frame.astype(wrong) if wrong else frame


def _has_dtype(column: pd.Series, dtype: str) -> bool:
    if dtype == "category":
        return isinstance(column.dtype, pd.CategoricalDtype)
    return column.dtype == dtype


@dataclass
class Device:
    """One device plane. Unknown figures are None, never zero."""

    id: str                          # "<host>/TPU:0"
    host: str
    kind: str                        # "TPU", "GPU" or "CPU"
    model: str | None = None         # "TPU v6 Lite", "NVIDIA H100 80GB HBM3", ...
    vendor: str | None = None        # "Google", "NVIDIA", "AMD", ...
    peak_flops: float | None = None  # FLOP/s the trace itself states
    hbm_bandwidth: float | None = None  # bytes/s
    memory_bytes: int | None = None
    clock_hz: float | None = None
    core_count: int | None = None    # SMs / CUs / TensorCores
    compute_capability: str | None = None  # "9.0", "9.4"
    stats: dict = field(default_factory=dict)  # every plane stat, by name

    @classmethod
    def from_plane_stats(cls, id: str, host: str, kind: str, stats: dict) -> Device:
        """The figures a device plane states, by the profiler's stat names (the one place that reads them)."""
        dev = cls(id=id, host=host, kind=kind, stats=dict(stats))
        if kind == "TPU":
            dev.vendor = "Google"
            dev.model = _text(stats.get("device_type_string"))
            dev.peak_flops = _scaled(stats.get("peak_teraflops_per_second"), 1e12)
            dev.hbm_bandwidth = _scaled(stats.get("peak_hbm_bw_gigabytes_per_second"), 1e9)
        else:
            dev.vendor = _text(stats.get("device_vendor"))
            dev.model = _text(stats.get("device_name")) or _text(stats.get("device_description"))
            dev.clock_hz = _scaled(stats.get("clock_rate"), 1e3)  # the stat is in kHz
            cores = _scaled(stats.get("core_count"), 1)
            dev.core_count = int(cores) if cores else None
            dev.hbm_bandwidth = _scaled(stats.get("memory_bandwidth"), 1)
            memory = _scaled(stats.get("memory_size"), 1)
            dev.memory_bytes = int(memory) if memory else None
            major, minor = stats.get("compute_cap_major"), stats.get("compute_cap_minor")
            major_number = 0.0 if major == 0 else _scaled(major, 1)
            if major_number is not None:
                dev.compute_capability = f"{int(major_number)}.{int(_scaled(minor, 1) or 0)}"
        return dev


def _text(value) -> str | None:
    return value if isinstance(value, str) and value else None


def _scaled(value, factor: float) -> float | None:
    """A positive, finite numeric stat times `factor`; None for absent, zero, bytes or junk."""
    if value is None or isinstance(value, (bytes, bytearray)):
        return None
    try:
        out = float(value) * factor
    except (TypeError, ValueError):
        return None
    return out if out > 0 and math.isfinite(out) else None


@dataclass
class Source:
    """Where a profile was read from: the PATH given, the run chosen, its hosts and files."""

    path: str
    run: str | None
    hosts: list[str]
    files: list[str]
