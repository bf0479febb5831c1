"""The in-memory result of reading a trace: tables plus what we know about the run.

Every table is a pandas DataFrame with the columns documented here; times are
integer picoseconds (``*_ps``) as in the XSpace format, converted to
microseconds only at the report boundary.
"""

from __future__ import annotations

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
}

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


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    """An empty DataFrame with the given column dtypes."""
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in columns.items()})


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


@dataclass
class Source:
    path: str
    run: str | None
    hosts: list[str]
    files: list[str]


@dataclass
class Profile:
    source: Source
    ops: pd.DataFrame
    host_events: pd.DataFrame
    steps: pd.DataFrame
    devices: list[Device]
    hlo_protos: dict[str, bytes] = field(default_factory=dict)  # module name -> HloProto bytes
    environment: dict[str, str] = field(default_factory=dict)    # jax_version, ...
    warnings: list[str] = field(default_factory=list)
