"""`traceview analyze` for people and spreadsheets: terminal text, Markdown and CSV (the JSON record is
`traceview.render.record`)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceview.analysis.build import PipelineResult
from traceview.analysis.public import op_rows, shared_module_names
from traceview.analysis.roofline import GAIN_DEFINITION
from traceview.hardware.detect import device_model_name
from traceview.parsers.tables.conventions import as_uint64
from traceview.render.escape import markdown_code, markdown_text, terminal_lines
from traceview.render.record import us_from_ps
from traceview.render.tables import colour, markdown_table, text_table, use_colour
from traceview.timeline.overlap import Overlap
from traceview.units import PS_PER_US, fmt_pct, fmt_share, fmt_si, fmt_time_us
from traceview.version import __version__
from traceview.vocabulary import BOUNDS

BOUND_COLOURS = {"compute": "green", "memory": "blue", "communication": "magenta", "unknown": "grey",
                 "idle": "yellow"}


def integral_columns_as_int(frame: pd.DataFrame) -> pd.DataFrame:
    """Counts stay counts in CSV: a numeric column whose values are all whole numbers (source
    lines, occurrences, FLOPs, bytes) is written as integers ("90", not "90.0"); blanks stay blank."""
    out = frame.copy()
    for column in out.columns:
        values = pd.to_numeric(out[column], errors="coerce")
        present = out[column].notna()
        if not present.any() or values[present].isna().any() or out[column].map(type).eq(bool).any():
            continue
        finite = values[present]
        if np.isfinite(finite).all() and (finite == np.round(finite)).all() and (finite.abs() < 2**63).all():
            out[column] = values.astype("Int64")
    return out


def analysis_csv(pipeline: PipelineResult) -> str:
    buffer = io.StringIO()
    frame = pd.DataFrame(op_rows(pipeline.ops)).drop(columns=["step_times_us"], errors="ignore")
    integral_columns_as_int(frame).to_csv(buffer, index=False)
    return buffer.getvalue()


# ---------------------------------------------------------------- for people


@dataclass(frozen=True)
class Section:
    """A block a view adds to the analyze report (what to fix first, where in the model, serving):
    a title and plain-text lines, escaped for the terminal or Markdown by the renderer."""

    title: str
    lines: tuple[str, ...]


def _section_text(section: Section, on: bool) -> list[str]:
    return [colour(section.title, "bold", on), *("  " + line for line in section.lines), ""]


def _section_markdown(section: Section) -> list[str]:
    """A block as a list; its indented lines (an item's evidence and fix) nested under the line above."""
    items = [f"  - {markdown_text(line.strip())}" if line[:1].isspace() and i else f"- {markdown_text(line)}"
             for i, line in enumerate(section.lines)]
    return [f"### {markdown_text(section.title)}", "", *items, ""]

def _device_rows(pipeline: PipelineResult) -> list[list[str]]:
    rows = []
    for d in pipeline.profile.devices:
        peaks = [fmt_si(d.peak_flops, "FLOP/s") if d.peak_flops else "",
                 fmt_si(d.hbm_bandwidth, "B/s") if d.hbm_bandwidth else ""]
        rows.append([d.id, d.kind, device_model_name(d), ", ".join(p for p in peaks if p) or "-"])
    return rows


def projected_label(pipeline: PipelineResult) -> str:
    """" (projected onto CHIP)" for figures judged against a target the trace did not run on, else ""."""
    judged = pipeline.judged
    return f" (projected onto {judged.chip.name})" if judged is not None and judged.projected else ""


def _proj(pipeline: PipelineResult, header: str) -> str:
    """A column header, marked "proj." when its figures are a projection."""
    return f"proj. {header}" if pipeline.judged is not None and pipeline.judged.projected else header


def _bound_cells(row: dict, total_ps: float) -> list[str]:
    return [fmt_pct(row.get(f"{b}_ps", 0) / total_ps) if total_ps else "-" for b in (*BOUNDS, "idle")]


def _step_rows(pipeline: PipelineResult, limit: int = 20) -> tuple[list[str], list[list[str]], str]:
    """Per step: wall time and, per device, the share of it in each bound and idle (they add up to 100%)."""
    headers, align = ["step", "time", "devices"], "lrr"
    has_bounds = "compute_ps" in pipeline.steps.columns
    projected = "projected_time_ps" in pipeline.steps.columns
    if projected:
        headers.append("projected")
        align += "r"
    if has_bounds:
        headers += [_proj(pipeline, b) for b in BOUNDS] + ["idle"]
        align += "r" * (len(BOUNDS) + 1)
    rows = []
    for row in pipeline.steps.head(limit).to_dict("records"):
        cells = [str(row["step"]), fmt_time_us(row["time_ps"] / PS_PER_US), str(row["devices"])]
        if projected:
            cells.append(fmt_time_us(row["projected_time_ps"] / PS_PER_US))
        if has_bounds:
            cells += _bound_cells(row, row["time_ps"])
        rows.append(cells)
    return headers, rows, align


def overlap_of(pipeline: PipelineResult) -> Overlap:
    """The devices' op time against their busy time (timeline.overlap)."""
    return Overlap(float(pipeline.op_time_ps), float(pipeline.device_time_ps))


def _ranked_by_gain(pipeline: PipelineResult) -> bool:
    """Whether the op table is ranked by gain: judged, and at least one op has a known gain (a trace with
    no cost model for any op is ranked by self time)."""
    return "gain_ps" in pipeline.ops.columns and bool(pipeline.ops["gain_ps"].notna().any())


def _op_table(pipeline: PipelineResult, top: int, on: bool) -> tuple[list[str], list[list[str]], str]:
    ops = pipeline.ops.head(top)
    device_total = pipeline.op_time_ps or 1
    judged = "bound" in ops.columns
    per_device = pipeline.per_device and "device" in ops.columns
    overlap = overlap_of(pipeline)
    wall = judged and overlap.overlapped
    headers = (["device"] if per_device else []) + ["module", "op", "category", "count", "self", "% op time"]
    align = ("l" if per_device else "") + "lllrrr"
    if judged:
        projected = "projected_time_ps" in ops.columns
        headers += [_proj(pipeline, "bound"), "judged"] + (["projected"] if projected else []) + [
            _proj(pipeline, h) for h in ("roofline", "eff.", "gap", "gain", *(("wall gain",) if wall else ()))] + [
            "FLOPs", "bytes", "dtype"]
        align += "lr" + ("r" if projected else "") + "rrrr" + ("r" if wall else "") + "rrl"
    # A module name several programs share (jit_dot compiled for each shape) is told apart as XProf does,
    # "jit_dot(49)", on every row of those programs: a bare "jit_dot" beside "jit_dot(49)" would read as a
    # program of its own.
    shared = shared_module_names(pipeline.ops)
    rows = []
    for r in ops.to_dict("records"):
        module = f"{r['module']}({as_uint64(int(r['program_id']))})" if str(r["module"]) in shared \
            and r["program_id"] != -1 else str(r["module"])
        cells = ([str(r["device"])] if per_device else []) + [
                 module, str(r["op"]), str(r.get("category") or "-"), str(r["occurrences"]),
                 fmt_time_us(r["self_time_ps"] / PS_PER_US), f"{100 * r['self_time_ps'] / device_total:.1f}%"]
        if judged:
            bound = str(r.get("bound") or "unknown")
            judged_time = r.get("judged_time_ps")
            cells += [colour(bound, BOUND_COLOURS.get(bound), on),
                      fmt_time_us(us_from_ps(judged_time)) if judged_time == judged_time else f"w/ {r.get('paired_start')}"]
            if projected:
                cells.append(fmt_time_us(us_from_ps(r.get("projected_time_ps"))))
            # a kernel costed by its shapes alone: its roofline is the memory time, a lower bound
            lower = r.get("cost_lower_bound")
            floor = ">= " if isinstance(lower, (bool, np.bool_)) and lower and r.get("roofline_time_ps") == r.get(
                "roofline_time_ps") else ""
            gain = r.get("gain_ps")
            cells += [floor + fmt_time_us(us_from_ps(r.get("roofline_time_ps"))), fmt_pct(r.get("efficiency")),
                      fmt_time_us(us_from_ps(r.get("gap_ps"))), fmt_time_us(us_from_ps(gain))]
            if wall:
                cells.append(fmt_time_us(us_from_ps(overlap.wall(gain) if gain == gain and gain is not None
                                                    else None)))
            cells += [fmt_si(r.get("flops")), fmt_si(r.get("bytes_accessed"), "B"),
                      r["dtype"] if isinstance(r.get("dtype"), str) and r["dtype"] else "-"]
        rows.append(cells)
    return _without_empty_columns(headers, rows, align)


# Op table columns left out when no row has a value (a TensorFlow trace: no module, no cost for any op).
OPTIONAL_COLUMNS = ("module", "category", "roofline", "eff.", "gap", "gain", "wall gain", "FLOPs", "bytes", "dtype")


def _without_empty_columns(headers: list[str], rows: list[list[str]], align: str
                           ) -> tuple[list[str], list[list[str]], str]:
    """The table without the OPTIONAL_COLUMNS that are empty ("" or "-") on every row."""
    if not rows:
        return headers, rows, align
    keep = [i for i, h in enumerate(headers) if h.removeprefix("proj. ") not in OPTIONAL_COLUMNS
            or any(row[i] not in ("", "-") for row in rows)]
    return [headers[i] for i in keep], [[row[i] for i in keep] for row in rows], "".join(align[i] for i in keep)


def _summary_lines(pipeline: PipelineResult, mesh_line: str | None) -> list[str]:
    n_active = len(pipeline.device_times)
    total = pipeline.span_ps
    idle_share = pipeline.idle_ps / total if total else None
    lines = [f"{n_active} active device{'s' if n_active != 1 else ''}: busy {fmt_time_us(us_from_ps(pipeline.device_time_ps))} + idle "
             f"{fmt_time_us(us_from_ps(pipeline.idle_ps))} ({fmt_pct(idle_share)}) = "
             f"{fmt_time_us(us_from_ps(total))} (span {fmt_time_us(us_from_ps(total / n_active if n_active else None))} "
             f"x {n_active})"]
    overlap = overlap_of(pipeline)
    if overlap.overlapped:
        lines.append(overlap.describe())
    inactive = pipeline.inactive_devices
    if inactive:
        lines.append(f"{len(inactive)} devices ran no op and are left out: " + ", ".join(inactive[:8])
                     + (" ..." if len(inactive) > 8 else ""))
    judged = pipeline.judged
    if judged is not None:
        chip, s, measured_on = judged.chip, judged.summary, judged.measured_on
        how = target_how(judged.source)
        if measured_on is not None:
            lines.append(f"target {chip.name} ({how}): PROJECTION from times measured on "
                         f"{measured_on.name}; projected device time "
                         f"{fmt_time_us(us_from_ps(s.get('projected_time_ps')))} vs measured {fmt_time_us(us_from_ps(total))}")
        else:
            lines.append(f"target {chip.name} ({how})")
        by_bound = s["time_by_bound_ps"]
        denominator = sum(by_bound.values()) or 1
        what = (f"share of busy + idle measured on {measured_on.name}, bounds projected onto {chip.name}"
                if measured_on is not None else "share of busy + idle, measured")
        lines.append(f"time by bound ({what}): " + ", ".join(
            f"{name} {fmt_pct(value / denominator)}" for name, value in by_bound.items()))
        label = "projected MFU" if judged.projected else "MFU"
        if s.get("mfu") is not None:
            peak = s.get("mfu_peak_dtype")
            used = f"{peak} peak" + (f", used for {s['mfu_dtype']} FLOPs" if s.get("mfu_dtype") and
                                     s["mfu_dtype"] != peak else "") if peak else "no FLOPs"
            mfu = f"{label} {fmt_share(s['mfu'])} ({used})"
        else:
            mfu = f"{label} unknown ({s.get('mfu_reason') or 'no FLOP count'})"
        eff_label = "projected roofline efficiency" if judged.projected else "roofline efficiency"
        if s.get("efficiency") is not None:
            eff = f"{eff_label} {fmt_share(s['efficiency'])} (program level: max(FLOPs/peak, bytes/HBM) " \
                  "/ busy + idle)"
        else:
            eff = f"{eff_label} unknown ({s.get('efficiency_reason')})"
        lines.append(f"{mfu}; {eff}")
        seen = None if judged.projected else _seen_line(s, "memory" if chip.kind == "CPU" else "HBM")
        if seen:
            lines.append(seen)
    if mesh_line:
        lines.append(mesh_line)
    return lines


def _seen_line(summary: dict, memory: str) -> str | None:
    """What the chip reached in this trace beside its datasheet peaks (the roofline keeps the datasheet)."""
    parts = []
    for key, unit, what in (("seen_flops", "FLOP/s", "{dtype}"), ("seen_bandwidth", "B/s", memory)):
        seen = summary.get(key)
        if not seen:
            continue
        share = f"{fmt_share(seen['share_of_peak'])} of the datasheet peak, " if seen.get("share_of_peak") else ""
        label = what.format(dtype=seen.get("peak_dtype") or "")
        parts.append(f"{fmt_si(seen['value'], unit)} {label} ({share}by {seen['op']})")
    return "seen in this trace: " + ", ".join(parts) if parts else None


def target_how(source: str | None) -> str:
    """How the target was chosen, in words (Judgement.source)."""
    if source == "--target" or source is None:
        return "given with --target"
    if source == "trace":
        return "detected from the trace"
    return f"from the {source.removeprefix('dump: ')} of the XLA dump" if source.startswith("dump: ") else source


def analysis_text(pipeline: PipelineResult, top: int = 20, colour_enabled: bool | None = None,
                  mesh_line: str | None = None, sections: Sequence[Section] = ()) -> str:
    """The terminal report; ``mesh_line``: the mesh's one-line summary (``traceview.Analysis.mesh_summary``);
    ``sections``: the views' blocks, printed after the summary (``traceview.Analysis.report_sections``)."""
    on = use_colour() if colour_enabled is None else colour_enabled
    src = pipeline.profile.source
    out = [colour(f"traceview {__version__}", "bold", on) + f"  {src.path}"
           + (f"  (run {src.run})" if src.run else ""), ""]
    out += [colour("Devices", "bold", on),
            text_table(["device", "kind", "model", "peaks (from trace)"], _device_rows(pipeline)), ""]
    out += [colour("Summary", "bold", on), *("  " + line for line in _summary_lines(pipeline, mesh_line)), ""]
    for section in sections:
        out += _section_text(section, on)
    out.append(colour("Steps", "bold", on) + projected_label(pipeline))
    if pipeline.steps.empty:
        out.append("  no steps found")
    else:
        headers, rows, align = _step_rows(pipeline)
        out.append(text_table(headers, rows, align))
        if len(pipeline.steps) > 20:
            out.append(f"  ... {len(pipeline.steps) - 20} more steps")
    out.append("")
    if _ranked_by_gain(pipeline):
        out.append(colour(f"Top {top} ops by gain{projected_label(pipeline)}", "bold", on) + f"  ({GAIN_DEFINITION}; gap = judged - "
                   "roofline time, the op's own distance from its roofline; judged = self time, or in-flight "
                   "time for an async start)")
    else:
        out.append(colour(f"Top {top} ops by self time", "bold", on)
                   + ("  (no op has a roofline time: no gain to rank by)" if "gain_ps" in pipeline.ops.columns
                      else ""))
    headers, rows, align = _op_table(pipeline, top, on)
    out.append(text_table(headers, rows, align))
    for warning in pipeline.warnings:
        out.append(colour(f"warning: {warning}", "yellow", on))
    return terminal_lines("\n".join(out)) + "\n"


def analysis_markdown(pipeline: PipelineResult, top: int = 20, mesh_line: str | None = None,
                      sections: Sequence[Section] = ()) -> str:
    src = pipeline.profile.source
    out = [f"## traceview: {markdown_code(src.path)}", ""]
    out += [f"- {markdown_text(line)}" for line in _summary_lines(pipeline, mesh_line)] + [""]
    for section in sections:
        out += _section_markdown(section)
    out += ["### Devices", "", markdown_table(["device", "kind", "model", "peaks (from trace)"],
                                              _device_rows(pipeline)), ""]
    if not pipeline.steps.empty:
        headers, rows, align = _step_rows(pipeline)
        out += [f"### Steps{markdown_text(projected_label(pipeline))}", "", markdown_table(headers, rows, align), ""]
        if len(pipeline.steps) > 20:
            out += [f"_... {len(pipeline.steps) - 20} more steps_", ""]
    if _ranked_by_gain(pipeline):
        out += [f"### Top {top} ops by gain{markdown_text(projected_label(pipeline))}", "",
                f"_{GAIN_DEFINITION}; gap = judged - roofline time._", ""]
    else:
        out += [f"### Top {top} ops by self time", "",
                *(["_No op has a roofline time: no gain to rank by._", ""] if "gain_ps" in pipeline.ops.columns
                  else [])]
    headers, rows, align = _op_table(pipeline, top, False)
    out.append(markdown_table(headers, rows, align))
    if pipeline.warnings:
        out.append("")
        out.extend(f"- warning: {markdown_text(w)}" for w in pipeline.warnings)
    return "\n".join(out) + "\n"
