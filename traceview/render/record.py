"""The JSON record of one analysis: the `traceview analyze --format json` contract (docs/architecture.md).

Built from the pipeline's tables (picoseconds, internal column names) into the contract's fields and
units (microseconds, bytes, FLOPs); the ops in the public fields of ``pipeline.public``, which
``traceview.Analysis.ops`` holds as a DataFrame. The views' fields (advice, scopes, serving) are added by
``render.analyze_views``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from traceview.analysis.build import PipelineResult
from traceview.analysis.public import device_rows, op_rows
from traceview.analysis.roofline import GAIN_DEFINITION
from traceview.units import PS_PER_US, json_scalar
from traceview.version import __version__
from traceview.vocabulary import BOUNDS


def us_from_ps(ps) -> float | None:
    return None if ps is None else json_scalar(ps / PS_PER_US)


def _us_column(column: pd.Series) -> list[float | None]:
    """A column of ps as :func:`_us` turns each value: microseconds, None where not finite (columnar)."""
    values = column.to_numpy(dtype="float64", na_value=np.nan) / PS_PER_US
    out: list[float | None] = values.tolist()
    for i in np.flatnonzero(~np.isfinite(values)):
        out[i] = None
    return out


def _step_records(pipeline: PipelineResult) -> list[dict]:
    """The JSON ``steps``: built column by column (a long run has tens of thousands of steps)."""
    steps = pipeline.steps
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


def summary_record(pipeline: PipelineResult) -> dict:
    active = pipeline.device_times
    n_active = len(active)
    summary: dict[str, Any] = {
        # device_time_us + idle_us = span_us x active_devices (span_us: the active devices' mean span)
        "device_time_us": us_from_ps(pipeline.device_time_ps),
        "span_us": us_from_ps(pipeline.span_ps / n_active) if n_active else None,
        "idle_us": us_from_ps(pipeline.idle_ps),
        "total_span_us": us_from_ps(pipeline.span_ps),
        "active_devices": n_active,
        "op_time_us": us_from_ps(pipeline.op_time_ps),
        "devices": [{"id": r.device, "busy_us": us_from_ps(r.busy_ps), "idle_us": us_from_ps(r.idle_ps), "span_us": us_from_ps(r.span_ps)}
                    for r in active.itertuples()],
        "inactive_devices": pipeline.inactive_devices,
        "steps": _step_records(pipeline)}
    judged = pipeline.judged
    if judged is not None:
        s = judged.summary
        summary["time_by_bound_us"] = {k: us_from_ps(v) for k, v in s["time_by_bound_ps"].items()}
        for key in ("mfu", "mfu_reason", "mfu_dtype", "mfu_peak_dtype", "mfu_peak_flops", "flops", "flops_reason",
                    "achieved_flops", "bytes_accessed", "efficiency", "efficiency_reason", "efficiency_definition",
                    "projected", "projection_model"):
            if key in s:
                summary[key] = json_scalar(s.get(key)) if not isinstance(s.get(key), str) else s[key]
        for key in ("seen_flops", "seen_bandwidth"):   # what the chip the trace ran on reached: not another's
            seen = None if judged.projected else s.get(key)
            summary[key] = {k: json_scalar(v) if not isinstance(v, str) else v for k, v in seen.items()} \
                if seen else None
        summary["roofline_time_us"] = us_from_ps(s.get("roofline_time_ps"))
        if "projected_time_ps" in s:
            summary["projected_time_us"] = us_from_ps(s["projected_time_ps"])
        summary["gain_definition"] = GAIN_DEFINITION
    return summary


def target_record(pipeline: PipelineResult) -> dict | None:
    judged = pipeline.judged
    if judged is None:
        return None
    capture = pipeline.capture_chip     # the chip the trace ran on, projected from or not
    return {"detected": judged.detected, "source": judged.source, **judged.chip.target_fields(),
            "projected": judged.projected, "measured_on": capture.name if capture is not None else None}


def analysis_json(pipeline: PipelineResult) -> dict:
    return {
        "traceview_version": __version__,
        "source": dataclasses.asdict(pipeline.profile.source),
        "environment": dict(pipeline.profile.environment),
        "devices": device_rows(pipeline.profile.devices),
        "target": target_record(pipeline),
        "summary": summary_record(pipeline),
        "ops": op_rows(pipeline.ops),
        "warnings": list(pipeline.warnings),
    }
