"""Per-op and per-step aggregates of a profile's op table.

Ops aggregate over devices by (program_id, module, op), as XProf's HLO op
stats do; ``per_device=True`` keeps the device as part of the key.
"""

from __future__ import annotations

import pandas as pd

OP_KEY = ["program_id", "module", "op"]


def op_stats(ops: pd.DataFrame, per_device: bool = False) -> pd.DataFrame:
    """One row per distinct op: occurrences, total and self time, devices.

    Columns: [device,] program_id, module, op, category, occurrences,
    total_time_ps, self_time_ps, devices, trace_flops, trace_bytes.
    Sorted by self time, largest first.
    """
    key = (["device"] if per_device else []) + OP_KEY
    if ops.empty:
        return pd.DataFrame(columns=key + ["category", "occurrences", "total_time_ps",
                                           "self_time_ps", "devices", "trace_flops", "trace_bytes"])
    grouped = ops.groupby(key, observed=True, sort=False)
    stats = grouped.agg(
        category=("category", "first"),
        occurrences=("duration_ps", "size"),
        total_time_ps=("duration_ps", "sum"),
        self_time_ps=("self_ps", "sum"),
        devices=("device", "nunique"),
        trace_flops=("trace_flops", "sum"),
        trace_bytes=("trace_bytes", "sum"),
    )
    # A sum over all-NaN is 0: keep "the trace does not say" as NaN.
    has_flops = grouped["trace_flops"].count() > 0
    has_bytes = grouped["trace_bytes"].count() > 0
    stats["trace_flops"] = stats["trace_flops"].where(has_flops)
    stats["trace_bytes"] = stats["trace_bytes"].where(has_bytes)
    stats = stats.reset_index()
    for column in ("module", "op", "category") + (("device",) if per_device else ()):
        stats[column] = stats[column].astype(str)
    return stats.sort_values("self_time_ps", ascending=False, kind="stable").reset_index(drop=True)


def step_times(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step: wall time across devices (first start to last end) and per-device mean.

    Columns: step, start_ps, time_ps, device_mean_ps, devices.
    """
    if steps.empty:
        return pd.DataFrame(columns=["step", "start_ps", "time_ps", "device_mean_ps", "devices"])
    ends = steps["start_ps"] + steps["duration_ps"]
    frame = steps.assign(end_ps=ends)
    grouped = frame.groupby("step", sort=True)
    out = pd.DataFrame({
        "start_ps": grouped["start_ps"].min(),
        "time_ps": grouped["end_ps"].max() - grouped["start_ps"].min(),
        "device_mean_ps": grouped["duration_ps"].mean(),
        "devices": grouped["device"].nunique(),
    }).reset_index()
    return out
