"""The parallelism report as JSON (the contract in docs/architecture.md), a terminal table and Markdown."""

from __future__ import annotations

from traceview.parallelism.mpmd import MeasuredSchedule
from traceview.parallelism.report import AxisReport, Parallelism
from traceview.parallelism.roles import ROLE_NAMES
from traceview.render.escape import markdown_text, terminal_text
from traceview.render.tables import markdown_table, text_table
from traceview.units import PS_PER_US, fmt_pct, fmt_si, fmt_time_us, json_scalar

# Names from traces: the project's escaping (render.escape) for each format.
plain = terminal_text
md = markdown_text


def _us(ps: float | None) -> float | None:
    return None if ps is None else json_scalar(ps / PS_PER_US)


def efficiency(axis: AxisReport) -> float | None:
    if axis.roofline_ps is None or not axis.time_ps:
        return None
    return axis.roofline_ps / axis.time_ps


def _verdict_fields(v) -> dict:
    return {"verdict": v.verdict, "rule": v.rule, "value": json_scalar(v.value), "value_what": v.value_what,
            "threshold": json_scalar(v.threshold), "threshold_how": v.threshold_how,
            "suggestions": v.suggestions, "reason": v.reason or None}


def _structures(axis: AxisReport) -> dict:
    """The figures a structural strategy was read with (null where the axis has none)."""
    pipe, ctx, exp = axis.pipeline, axis.context, axis.expert
    return {
        "pipeline": None if pipe is None else {
            "stages": pipe.stages, "microbatches": pipe.microbatches,
            "bubble_fraction": json_scalar(pipe.bubble_fraction), "how": pipe.how,
            "formula_bubble_fraction": json_scalar(pipe.formula_bubble_fraction),
            "schedule": pipe.schedule_name, "virtual_stages": pipe.virtual_stages,
            "measured_bubble_fraction": None if pipe.measured is None else json_scalar(pipe.measured.bubble_fraction),
            "measured_how": None if pipe.measured is None else pipe.measured.how,
            "measured_per_stage": None if pipe.measured is None else
            {str(k): json_scalar(v) for k, v in pipe.measured.per_stage.items()},
            "measured": None if pipe.schedule is None else _measured(pipe.schedule)},
        "context": None if ctx is None else {
            "style": ctx.style, "seq_per_chip": ctx.attention.seq_per_chip, "head_dim": ctx.attention.head_dim,
            "heads_per_kv_head": json_scalar(ctx.attention.heads_per_kv_head),
            "element_bytes": json_scalar(ctx.element_bytes), "bytes_per_pass": json_scalar(ctx.bytes_per_pass),
            "passes": ctx.passes, "bytes_per_step": json_scalar(axis.bytes_per_step), "how": ctx.how,
            "exposed_time_us": _us(axis.exposed_ps)},
        "expert": None if exp is None else {
            "experts": exp.routing.experts, "top_k": exp.routing.top_k, "capacity": json_scalar(exp.capacity),
            "d_model": exp.width, "ffn": exp.ffn, "element_bytes": json_scalar(exp.element_bytes),
            "bytes_per_layer": json_scalar(exp.bytes_per_layer), "how": exp.how},
    }


SCHEDULE_ROWS = 4096   # the drawn step's executions kept in the JSON at most


def _measured(schedule: MeasuredSchedule) -> dict:
    """A pipeline measured in the trace: each stage's idle time (means per step) and one step's executions
    (the step of median span, times from its start) to draw."""
    held, checked = schedule.in_sequence
    runs = schedule.executions
    step = schedule.drawn_step()
    shown = runs[runs["step"] == step].head(SCHEDULE_ROWS)
    origin = float(shown["start_ps"].min()) if not shown.empty else 0.0
    return {
        "steps": schedule.steps, "in_sequence": held, "pairs_checked": checked,
        "stages": [{"stage": st.stage, "devices": st.devices, "programs": st.programs,
                    "microbatches": st.microbatches, "busy_us": _us(st.busy_ps),
                    "idle_before_us": _us(st.idle_before_ps), "idle_after_us": _us(st.idle_after_ps),
                    "idle_between_us": _us(st.idle_between_ps), "span_us": _us(st.span_ps),
                    "bubble_fraction": json_scalar(st.bubble_fraction)} for st in schedule.stages],
        "schedule_step": step,
        "schedule": [{"stage": int(r.stage), "microbatch": int(r.microbatch),
                      "start_us": _us(r.start_ps - origin), "end_us": _us(r.end_ps - origin)}
                     for r in shown.itertuples(index=False)],
    }


def axis_record(axis: AxisReport) -> dict:
    v = axis.verdict
    return {
        "name": axis.name, "size": axis.size, "role": axis.role.role,
        "role_name": ROLE_NAMES.get(axis.role.role or "", None), "evidence": axis.role.evidence,
        "patterns": axis.role.patterns, "parameters": axis.parameters,
        "collectives": axis.collectives, "executions": axis.executions,
        "bytes": json_scalar(axis.bytes), "bytes_per_execution": json_scalar(axis.bytes_per_execution),
        "bytes_per_step": json_scalar(axis.bytes_per_step),
        "time_us": _us(axis.time_ps), "exposed_time_us": _us(axis.exposed_ps),
        "share_of_step": json_scalar(axis.share), "roofline_time_us": _us(axis.roofline_ps),
        "efficiency": json_scalar(efficiency(axis)),
        "link": None if axis.link is None else {"kind": axis.link.kind, "bandwidth": json_scalar(axis.link.bandwidth),
                                                "how": axis.link.how},
        **_verdict_fields(v), "measured": axis.measured or None,
        "roles": [{"role": r.role, "evidence": r.evidence, **_verdict_fields(r.verdict)} for r in axis.roles],
        **_structures(axis),
    }


def parallelism_json(report: Parallelism) -> dict:
    mesh = report.mesh
    return {
        "mesh": None if mesh is None else {
            "axes": [{"name": a.name, "size": a.size, "source": a.source} for a in mesh.axes],
            "device_count": mesh.device_count, "device_ids": mesh.device_ids, "source": mesh.source},
        "why_no_mesh": report.why_no_mesh or None,
        "target": None if report.target is None else {"name": report.target.name,
                                                      "source": report.target_source or "unknown",
                                                      "projected": report.projected,
                                                      "measured_on": report.measured_on},
        "has_trace": report.has_trace,
        "per_chip_tokens": None if report.per_chip_tokens is None else {
            "value": json_scalar(report.per_chip_tokens.value), "how": report.per_chip_tokens.how},
        "axes": [axis_record(a) for a in report.axes],
        "parameters": [{"module": p.module, "name": p.name, "label": p.label, "shape": p.shape,
                        "split": {str(dim): axes for dim, axes in p.axes.items()}} for p in report.parameters],
        "collectives": [{"module": c.attribution.site.module, "computation": c.attribution.site.computation,
                         "name": c.attribution.site.name, "kind": c.attribution.site.kind,
                         "axes": c.attribution.axes, "pattern": c.pattern,
                         "shape": f"{c.dtype}[{','.join(map(str, c.dims))}]", "bytes": c.bytes,
                         "group_mode": c.attribution.site.mode, "reason": c.attribution.reason or None}
                        for c in report.collectives],
        "warnings": report.warnings,
    }


def _roles(axis: AxisReport, none: str) -> str:
    """Every role of the axis, the main one first: "context parallel + FSDP"."""
    return " + ".join(ROLE_NAMES.get(r.role, r.role) for r in axis.roles) or ROLE_NAMES.get(axis.role.role or "",
                                                                                         none)


def _programs_per_stage(report: Parallelism) -> AxisReport | None:
    """The axis of a pipeline that runs a program per stage, when the trace measured one."""
    return next((a for a in report.axes if a.pipeline is not None and a.pipeline.schedule is not None), None)


def summary_line(report: Parallelism) -> str:
    """One line for `traceview analyze`'s summary."""
    staged = _programs_per_stage(report)
    if report.mesh is None and staged is None:
        return f"parallelism: no mesh ({report.why_no_mesh})"
    if report.mesh is None:
        mesh = f"none in the HLO, a program per stage: stage={staged.size}" if staged else ""
    else:
        mesh = " x ".join(f"{a.name}={a.size}" for a in report.mesh.axes if a.size > 1) or "one device"
    parts = []
    for axis in report.axes:
        role = _roles(axis, "no role")
        if axis.pipeline is not None and axis.pipeline.bubble_fraction is not None:
            role += f" (bubble {fmt_pct(axis.pipeline.bubble_fraction)})"
        exposed = f", exposed {fmt_pct(axis.share)}" if axis.share is not None else ""
        verdict = f", {axis.verdict.verdict}" if axis.verdict.verdict else ""
        parts.append(f"{axis.name}: {role}{exposed}{verdict}")
    return plain(f"mesh {mesh}" + (" (" + "; ".join(parts) + ")" if parts else "")
                 + " - `traceview parallelism` for details")


def fmt_value(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 10 else f"{value:.3g}"


HEADERS = ["axis", "size", "roles", "colls", "bytes", "in flight", "exposed", "share", "link", "eff.", "verdict",
           "value", "threshold"]
ALIGN = "lrlrrrrrlrlrr"


def _rows(report: Parallelism, esc) -> list[list[str]]:
    rows = []
    for a in report.axes:
        v = a.verdict
        rows.append([esc(a.name), str(a.size), _roles(a, "-"), str(a.collectives),
                     fmt_si(a.bytes if a.bytes is not None else a.bytes_per_step, "B"),
                     fmt_time_us(_us(a.time_ps)), fmt_time_us(_us(a.exposed_ps)), fmt_pct(a.share),
                     a.link.kind if a.link else "-", fmt_pct(efficiency(a)), v.verdict or "-",
                     fmt_value(v.value), fmt_value(v.threshold)])
    return rows


def _mesh_line(report: Parallelism, esc) -> str:
    staged = _programs_per_stage(report)
    if report.mesh is None and staged is not None:
        return (f"mesh: none in the HLO (no collective); the trace shows a pipeline of {staged.size} stages, "
                "each its own program")
    if report.mesh is None:
        return f"mesh: not determined ({report.why_no_mesh})"
    axes = ", ".join(f"{esc(a.name)}={a.size}" for a in report.mesh.axes)
    return f"mesh [{axes}] over {report.mesh.device_count} devices; names from {report.mesh.source}"


def _details(report: Parallelism, esc) -> list[str]:
    out = []
    if report.per_chip_tokens is not None:
        value = report.per_chip_tokens.value
        out.append(f"per-chip batch: {'-' if value is None else f'{value:,.0f} tokens'} "
                   f"({report.per_chip_tokens.how})")
    for a in report.axes:
        out.append(f"{esc(a.name)} ({a.size}): {_roles(a, 'no role')}; evidence: "
                   + ("; ".join(esc(e) for e in a.role.evidence) or "none"))
        out += _structure_lines(a, esc)
        for v in [r.verdict for r in a.roles] or [a.verdict]:
            judged = f"{v.value_what} {fmt_value(v.value)} vs {fmt_value(v.threshold)}" if v.value is not None \
                and v.threshold is not None else (v.reason or "")
            out.append(f"  rule {v.rule}: {judged}" + (f" [{v.threshold_how}]" if v.threshold_how else ""))
            out.extend(f"  suggestion ({s})" for s in v.suggestions)
        if a.measured:
            out.append(f"  measured: {a.measured}")
    return out


def _structure_lines(a: AxisReport, esc) -> list[str]:
    out = []
    if a.pipeline is not None:
        # a share of the step, as the stage lines below and analyze's summary write it
        bubble = fmt_pct(a.pipeline.bubble_fraction)
        if a.pipeline.measured is not None:
            bubble = f"{fmt_pct(a.pipeline.measured.bubble_fraction)} measured in the trace, {bubble} by the schedule"
        out.append(f"  pipeline ({a.pipeline.schedule_name or 'schedule not read'}): {a.pipeline.stages} stages, "
                   f"{a.pipeline.microbatches or '-'} microbatches, "
                   f"bubble {bubble} ({esc(a.pipeline.how)})")
        out += _stage_lines(a.pipeline.schedule, a.pipeline.formula_bubble_fraction, esc)
    if a.context is not None:
        c = a.context
        out.append(f"  context ({c.style}): {c.attention.seq_per_chip} tokens of sequence per chip, head dim "
                   f"{c.attention.head_dim}, {c.attention.heads_per_kv_head:g} query heads per K/V head, "
                   f"{fmt_si(c.bytes_per_pass, 'B')} of K/V per pass" + (f", {c.passes} passes per attention"
                                                                       if c.passes else ""))
        out.extend(f"    read: {esc(line)}" for line in c.how)
    if a.expert is not None:
        e = a.expert
        cap = "-" if e.capacity is None else f"{e.capacity:g}"
        out.append(f"  experts: E={e.routing.experts or '-'}, top-{e.routing.top_k or '-'}, capacity {cap}, "
                   f"D={e.width or '-'}, F={e.ffn or '-'} ({e.how})")
    return out


def _stage_lines(schedule: MeasuredSchedule | None, formula: float | None, esc) -> list[str]:
    """Each stage's measured idle time (means per step), then the measured bubble against the formula."""
    if schedule is None:
        return []
    out = [f"  stage {s.stage} ({esc(', '.join(s.programs))} on {esc(', '.join(s.devices))}): {s.microbatches} "
           f"microbatches, busy {fmt_time_us(_us(s.busy_ps))}, idle before its first "
           f"{fmt_time_us(_us(s.idle_before_ps))}, after its last {fmt_time_us(_us(s.idle_after_ps))}, "
           f"between {fmt_time_us(_us(s.idle_between_ps))} of a step span {fmt_time_us(_us(s.span_ps))}: "
           f"bubble {fmt_pct(s.bubble_fraction)}" for s in schedule.stages]
    out.append(f"  bubble measured {fmt_pct(schedule.bubble_fraction)} (mean of the stages), formula "
               f"(p-1)/(m+p-1) {fmt_pct(formula)}")
    return out


def _projection_line(report: Parallelism) -> list[str]:
    """The one line that says a report's verdicts are for another chip than the one measured."""
    if not report.projected or report.target is None:
        return []
    return [f"target {report.target.name}: PROJECTED from a trace measured on {report.measured_on}: the verdicts, "
            f"links and link efficiencies are for {report.target.name}; times and exposed shares as measured", ""]


def parallelism_text(report: Parallelism) -> str:
    out = [_mesh_line(report, plain), "", *(plain(line) for line in _projection_line(report))]
    if report.axes:
        out += [text_table(HEADERS, _rows(report, plain), ALIGN), ""]
        if not report.has_trace:
            out.append("(no trace: bytes per step and device, from the HLO cost model and loop trip counts; "
                       "no times)")
    out += _details(report, plain)
    out += [f"warning: {plain(w)}" for w in report.warnings]
    return "\n".join(out) + "\n"


def parallelism_markdown(report: Parallelism) -> str:
    out = ["## Parallelism", "", _mesh_line(report, md), "", *(md(line) for line in _projection_line(report))]
    if report.axes:
        out += [markdown_table(HEADERS, _rows(report, str), ALIGN), ""]   # the table escapes its cells
    out += [f"- {line.strip()}" for line in _details(report, md)]
    out += [f"- warning: {md(w)}" for w in report.warnings]
    return "\n".join(out) + "\n"
