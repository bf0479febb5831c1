"""The parallelism report as JSON (the contract in docs/architecture.md), a terminal table and Markdown."""

from __future__ import annotations

from traceview.parallelism.diagnose import AxisReport, Parallelism
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
        "verdict": v.verdict, "rule": v.rule, "value": json_scalar(v.value), "value_what": v.value_what,
        "threshold": json_scalar(v.threshold), "threshold_how": v.threshold_how,
        "suggestions": v.suggestions, "reason": v.reason or None, "measured": axis.measured or None,
    }


def parallelism_json(report: Parallelism) -> dict:
    mesh = report.mesh
    return {
        "mesh": None if mesh is None else {
            "axes": [{"name": a.name, "size": a.size, "source": a.source} for a in mesh.axes],
            "device_count": mesh.device_count, "device_ids": mesh.device_ids, "source": mesh.source},
        "why_no_mesh": report.why_no_mesh or None,
        "target": None if report.target is None else report.target.name,
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


def summary_line(report: Parallelism) -> str:
    """One line for `traceview analyze`'s summary."""
    if report.mesh is None:
        return f"parallelism: no mesh ({report.why_no_mesh})"
    mesh = " x ".join(f"{a.name}={a.size}" for a in report.mesh.axes if a.size > 1) or "one device"
    parts = []
    for axis in report.axes:
        role = ROLE_NAMES.get(axis.role.role or "", "no role")
        exposed = f", exposed {fmt_pct(axis.share)}" if axis.share is not None else ""
        verdict = f", {axis.verdict.verdict}" if axis.verdict.verdict else ""
        parts.append(f"{axis.name}: {role}{exposed}{verdict}")
    return plain(f"mesh {mesh}" + (" (" + "; ".join(parts) + ")" if parts else "")
                 + " - `traceview parallelism` for details")


def fmt_value(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 10 else f"{value:.3g}"


HEADERS = ["axis", "size", "role", "colls", "bytes", "in flight", "exposed", "share", "link", "eff.", "verdict",
           "value", "threshold"]
ALIGN = "lrlrrrrrlrlrr"


def _rows(report: Parallelism, esc) -> list[list[str]]:
    rows = []
    for a in report.axes:
        v = a.verdict
        rows.append([esc(a.name), str(a.size), ROLE_NAMES.get(a.role.role or "", "-"), str(a.collectives),
                     fmt_si(a.bytes if a.bytes is not None else a.bytes_per_step, "B"),
                     fmt_time_us(_us(a.time_ps)), fmt_time_us(_us(a.exposed_ps)), fmt_pct(a.share),
                     a.link.kind if a.link else "-", fmt_pct(efficiency(a)), v.verdict or "-",
                     fmt_value(v.value), fmt_value(v.threshold)])
    return rows


def _mesh_line(report: Parallelism, esc) -> str:
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
        v = a.verdict
        out.append(f"{esc(a.name)} ({a.size}): {ROLE_NAMES.get(a.role.role or '', 'no role')}; evidence: "
                   + ("; ".join(esc(e) for e in a.role.evidence) or "none"))
        judged = f"{v.value_what} {fmt_value(v.value)} vs {fmt_value(v.threshold)}" if v.value is not None and \
            v.threshold is not None else (v.reason or "")
        out.append(f"  rule {v.rule}: {judged}" + (f" [{v.threshold_how}]" if v.threshold_how else ""))
        if a.measured:
            out.append(f"  measured: {a.measured}")
        out.extend(f"  suggestion ({s})" for s in v.suggestions)
    return out


def parallelism_text(report: Parallelism) -> str:
    out = [_mesh_line(report, plain), ""]
    if report.axes:
        out += [text_table(HEADERS, _rows(report, plain), ALIGN), ""]
        if not report.has_trace:
            out.append("(no trace: bytes per step and device, from the HLO cost model and loop trip counts; "
                       "no times)")
    out += _details(report, plain)
    out += [f"warning: {plain(w)}" for w in report.warnings]
    return "\n".join(out) + "\n"


def parallelism_markdown(report: Parallelism) -> str:
    out = ["## Parallelism", "", _mesh_line(report, md), ""]
    if report.axes:
        out += [markdown_table(HEADERS, _rows(report, str), ALIGN), ""]   # the table escapes its cells
    out += [f"- {line.strip()}" for line in _details(report, md)]
    out += [f"- warning: {md(w)}" for w in report.warnings]
    return "\n".join(out) + "\n"
