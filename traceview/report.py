"""Render an Analysis as JSON (the DESIGN.md contract), CSV, Markdown or text."""

from __future__ import annotations

import dataclasses
import io
import math

import pandas as pd

from traceview import __version__
from traceview.analysis import Analysis
from traceview.tables import (colour, fmt_si, fmt_time_us, markdown_table, text_table,
                              use_colour)

PS_PER_US = 1e6

# Op-table column -> JSON field. `_ps` columns become `_us`.
OP_FIELDS = {
    "device": "device",
    "program_id": "program_id",
    "module": "module",
    "op": "name",
    "category": "category",
    "occurrences": "occurrences",
    "total_time_ps": "total_time_us",
    "self_time_ps": "self_time_us",
}


def _clean(value):
    """JSON-safe scalars: NaN -> None, numpy -> Python."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


def _op_records(ops: pd.DataFrame) -> list[dict]:
    records = []
    columns = [c for c in ops.columns if c in OP_FIELDS or c not in ("trace_flops", "trace_bytes")]
    for row in ops[columns].itertuples(index=False):
        record = {}
        for column, value in zip(columns, row):
            name = OP_FIELDS.get(column, column)
            if column.endswith("_ps"):
                name = name.replace("_ps", "_us") if name == column else name
                value = None if value is None or value != value else value / PS_PER_US
            record[name] = _clean(value)
        records.append(record)
    return records


def device_records(analysis: Analysis) -> list[dict]:
    out = []
    for device in analysis.profile.devices:
        record = {k: _clean(v) for k, v in dataclasses.asdict(device).items() if k != "stats"}
        out.append(record)
    return out


def analysis_json(analysis: Analysis) -> dict:
    profile = analysis.profile
    steps = [{"step": int(r.step), "time_us": r.time_ps / PS_PER_US}
             for r in analysis.steps.itertuples(index=False)]
    summary = {"device_time_us": analysis.device_time_ps / PS_PER_US, "steps": steps}
    summary.update(analysis.summary_extra)
    doc = {
        "traceview_version": __version__,
        "source": dataclasses.asdict(profile.source),
        "environment": dict(profile.environment),
        "devices": device_records(analysis),
        "summary": summary,
        "ops": _op_records(analysis.ops),
        "warnings": list(analysis.warnings),
    }
    if analysis.target is not None:
        doc["target"] = analysis.summary_extra.get("_target_json")
    return doc


def analysis_csv(analysis: Analysis) -> str:
    buffer = io.StringIO()
    frame = pd.DataFrame(_op_records(analysis.ops))
    frame.to_csv(buffer, index=False)
    return buffer.getvalue()


def _device_rows(analysis: Analysis) -> list[list[str]]:
    rows = []
    for d in analysis.profile.devices:
        peaks = []
        if d.peak_flops:
            peaks.append(fmt_si(d.peak_flops, "FLOP/s"))
        if d.hbm_bandwidth:
            peaks.append(fmt_si(d.hbm_bandwidth, "B/s"))
        rows.append([d.id, d.kind, d.model or d.vendor or "-", ", ".join(peaks) or "-"])
    return rows


def _step_rows(analysis: Analysis, limit: int = 20) -> list[list[str]]:
    rows = [[str(r.step), fmt_time_us(r.time_ps / PS_PER_US), str(r.devices)]
            for r in analysis.steps.head(limit).itertuples(index=False)]
    return rows


def _top_op_rows(analysis: Analysis, top: int) -> list[list[str]]:
    total = analysis.device_time_ps or 1
    rows = []
    for r in analysis.ops.head(top).itertuples(index=False):
        rows.append([
            r.module, r.op, r.category or "-", str(r.occurrences),
            fmt_time_us(r.total_time_ps / PS_PER_US), fmt_time_us(r.self_time_ps / PS_PER_US),
            f"{100 * r.self_time_ps / total:.1f}%",
        ])
    return rows


OP_HEADERS = ["module", "op", "category", "count", "total", "self", "% self"]
OP_ALIGN = "lllrrrr"


def analysis_text(analysis: Analysis, top: int = 20, colour_enabled: bool | None = None) -> str:
    on = use_colour() if colour_enabled is None else colour_enabled
    src = analysis.profile.source
    out = [colour(f"traceview {__version__}", "bold", on) + f"  {src.path}"
           + (f"  (run {src.run})" if src.run else "")]
    out.append("")
    out.append(colour("Devices", "bold", on))
    out.append(text_table(["device", "kind", "model", "peaks (from trace)"], _device_rows(analysis)))
    out.append("")
    out.append(colour("Steps", "bold", on))
    if analysis.steps.empty:
        out.append("  no steps found")
    else:
        out.append(text_table(["step", "time", "devices"], _step_rows(analysis), "lrr"))
        if len(analysis.steps) > 20:
            out.append(f"  ... {len(analysis.steps) - 20} more steps")
    out.append("")
    out.append(colour(f"Top {top} ops by self time", "bold", on)
               + f"  (device time {fmt_time_us(analysis.device_time_ps / PS_PER_US)})")
    out.append(text_table(OP_HEADERS, _top_op_rows(analysis, top), OP_ALIGN))
    for warning in analysis.warnings:
        out.append(colour(f"warning: {warning}", "yellow", on))
    return "\n".join(out) + "\n"


def analysis_markdown(analysis: Analysis, top: int = 20) -> str:
    src = analysis.profile.source
    out = [f"## traceview: `{src.path}`", ""]
    out.append(markdown_table(["device", "kind", "model", "peaks (from trace)"], _device_rows(analysis)))
    out.append("")
    if not analysis.steps.empty:
        out.append(markdown_table(["step", "time", "devices"], _step_rows(analysis), "lrr"))
        out.append("")
    out.append(f"### Top {top} ops by self time")
    out.append("")
    out.append(markdown_table(OP_HEADERS, _top_op_rows(analysis, top), OP_ALIGN))
    if analysis.warnings:
        out.append("")
        out.extend(f"- warning: {w}" for w in analysis.warnings)
    return "\n".join(out) + "\n"
