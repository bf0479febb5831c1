"""The JSON record of one analysis: the `traceview analyze --format json` contract (docs/architecture.md).

Built from the pipeline's tables (picoseconds, internal column names) into the
contract's fields and units (microseconds, bytes, FLOPs); the public
`traceview.Analysis` derives its DataFrames from it and the renderers print it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from traceview.analysis.build import PipelineResult
from traceview.analysis.roofline import GAIN_DEFINITION
from traceview.hardware.detect import device_model_name
from traceview.parsers.profile import Device
from traceview.parsers.xspace.reader import as_uint64
from traceview.units import PS_PER_US, json_scalar
from traceview.version import __version__
from traceview.vocabulary import BOUNDS

# Op-frame column -> output field, in output order. `*_ps` columns are
# converted to microseconds. Flops/bytes are totals over the occurrences.
OP_FIELDS = {
    "device": "device",
    "program_id": "program_id",
    "module": "module",
    "op": "name",
    "category": "category",
    "opcode": "opcode",
    "occurrences": "occurrences",
    "kernels": "kernels",
    "total_time_ps": "total_time_us",
    "self_time_ps": "self_time_us",
    "judged_time_ps": "judged_time_us",
    "paired_start": "paired_start",
    "flops": "flops",
    "transcendentals": "transcendentals",
    "bytes_accessed": "bytes_accessed",
    "payload_bytes": "collective_bytes",
    "collective_kind": "collective_kind",
    "group_size": "group_size",
    "ring_directions": "ring_directions",
    "execution_thread": "execution_thread",
    "dtype": "dtype",
    "bound": "bound",
    "unknown_reason": "unknown_reason",
    "t_compute_ps": "t_compute_us",
    "t_memory_ps": "t_memory_us",
    "t_comm_ps": "t_comm_us",
    "roofline_time_ps": "roofline_time_us",
    "efficiency": "efficiency",
    "above_roofline_reason": "above_roofline_reason",
    "gap_ps": "gap_us",
    "gain_ps": "gain_us",
    "projected_time_ps": "projected_time_us",
    "exposed_time_ps": "exposed_time_us",
    "achieved_flops": "achieved_flops",
    "achieved_bandwidth": "achieved_bandwidth",
    "intensity": "intensity",
    "has_cost": "has_cost",
    "contraction": "contraction",
    "cost_lower_bound": "cost_lower_bound",
    "shape": "shape",
    "source_file": "source_file",
    "source_line": "source_line",
    "op_name": "op_name",
    "step_times_ps": "step_times_us",
    "fingerprint": "fingerprint",
}

def op_records(ops: pd.DataFrame) -> list[dict]:
    """The `ops` list of the JSON contract (also the CSV rows)."""
    columns = [c for c in OP_FIELDS if c in ops.columns]
    frame = ops[columns].copy()
    if "program_id" in frame.columns:  # uint64 in XLA, held bit for bit in int64
        frame["program_id"] = pd.Series([None if p == -1 else as_uint64(int(p)) for p in frame["program_id"]],
                                        index=frame.index, dtype=object)
    for column in columns:
        if column == "step_times_ps":
            frame[column] = [[t / PS_PER_US for t in v] if isinstance(v, list) else None for v in frame[column]]
        elif column.endswith("_ps"):
            frame[column] = pd.to_numeric(frame[column], errors="coerce") / PS_PER_US
    frame = frame.rename(columns=OP_FIELDS).astype(object)
    return [{k: json_scalar(v) for k, v in row.items()} for row in frame.to_dict("records")]


def _device_records(analysis: PipelineResult) -> list[dict]:
    # the fields one by one: dataclasses.asdict would deep-copy each device's stats only to drop them
    names = [f.name for f in dataclasses.fields(Device) if f.name != "stats"]
    return [{**{k: json_scalar(getattr(d, k)) for k in names}, "model_name": device_model_name(d)}
            for d in analysis.profile.devices]


def us_from_ps(ps) -> float | None:
    return None if ps is None else json_scalar(ps / PS_PER_US)


def _us_column(column: pd.Series) -> list[float | None]:
    """A column of ps as :func:`_us` turns each value: microseconds, None where not finite (columnar)."""
    values = column.to_numpy(dtype="float64", na_value=np.nan) / PS_PER_US
    out: list[float | None] = values.tolist()
    for i in np.flatnonzero(~np.isfinite(values)):
        out[i] = None
    return out


def _step_records(analysis: PipelineResult) -> list[dict]:
    """The JSON ``steps``: built column by column (a long run has tens of thousands of steps)."""
    steps = analysis.steps
    if steps.empty:
        return []
    n = len(steps)
    columns: dict[str, list] = {"step": steps["step"].to_numpy(dtype=np.int64).tolist(),
                                "time_us": _us_column(steps["time_ps"]),
                                "devices": steps["devices"].to_numpy(dtype=np.int64).tolist()
                                if "devices" in steps.columns else [None] * n}
    if "compute_ps" in steps.columns:   # per device: the mean over the step's active devices
        bounds = [b for b in (*BOUNDS, "idle") if f"{b}_ps" in steps.columns]
        parts = zip(*[_us_column(steps[f"{b}_ps"]) for b in bounds])
        columns["time_by_bound_us"] = [dict(zip(bounds, values)) for values in parts]
    if "projected_time_ps" in steps.columns:
        columns["projected_time_us"] = _us_column(steps["projected_time_ps"])
    names = list(columns)
    return [dict(zip(names, values)) for values in zip(*columns.values())]


def summary_record(analysis: PipelineResult) -> dict:
    active = analysis.device_times
    n_active = len(active)
    summary: dict[str, Any] = {
        # device_time_us + idle_us = span_us x active_devices (span_us: the active devices' mean span)
        "device_time_us": us_from_ps(analysis.device_time_ps),
        "span_us": us_from_ps(analysis.span_ps / n_active) if n_active else None,
        "idle_us": us_from_ps(analysis.idle_ps),
        "total_span_us": us_from_ps(analysis.span_ps),
        "active_devices": n_active,
        "op_time_us": us_from_ps(analysis.op_time_ps),
        "devices": [{"id": r.device, "busy_us": us_from_ps(r.busy_ps), "idle_us": us_from_ps(r.idle_ps), "span_us": us_from_ps(r.span_ps)}
                    for r in active.itertuples()],
        "inactive_devices": analysis.inactive_devices,
        "steps": _step_records(analysis)}
    s = analysis.summary
    if s:
        summary["time_by_bound_us"] = {k: us_from_ps(v) for k, v in s["time_by_bound_ps"].items()}
        for key in ("mfu", "mfu_reason", "mfu_dtype", "mfu_peak_dtype", "mfu_peak_flops", "flops", "flops_reason",
                    "achieved_flops", "bytes_accessed", "efficiency", "efficiency_reason", "efficiency_definition",
                    "projected", "projection_model"):
            if key in s:
                summary[key] = json_scalar(s.get(key)) if not isinstance(s.get(key), str) else s[key]
        for key in ("seen_flops", "seen_bandwidth"):   # what the chip the trace ran on reached: not another's
            seen = None if analysis.projected else s.get(key)
            summary[key] = {k: json_scalar(v) if not isinstance(v, str) else v for k, v in seen.items()} \
                if seen else None
        summary["roofline_time_us"] = us_from_ps(s.get("roofline_time_ps"))
        if "projected_time_ps" in s:
            summary["projected_time_us"] = us_from_ps(s["projected_time_ps"])
        summary["gain_definition"] = GAIN_DEFINITION
    return summary


def target_record(analysis: PipelineResult) -> dict | None:
    if analysis.target is None:
        return None
    capture = analysis.capture_chip
    return {"detected": analysis.target_detected, "source": analysis.target_source,
            **analysis.target.target_fields(),
            "projected": analysis.projected, "measured_on": capture.name if capture is not None else None}


def analysis_json(analysis: PipelineResult) -> dict:
    return {
        "traceview_version": __version__,
        "source": dataclasses.asdict(analysis.profile.source),
        "environment": dict(analysis.profile.environment),
        "devices": _device_records(analysis),
        "target": target_record(analysis),
        "summary": summary_record(analysis),
        "ops": op_records(analysis.ops),
        "warnings": list(analysis.warnings),
    }
