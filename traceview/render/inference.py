"""``traceview inference``: the serving phases as JSON (the contract in DESIGN.md), a table or Markdown, and
the analyze report's "Inference" section."""

from __future__ import annotations

import math
from typing import Any

from traceview.inference.view import CriticalBatch, InferenceReport, Phase, ProjectedBatch, RanProgram
from traceview.render.escape import markdown_text, terminal_text
from traceview.render.tables import markdown_table, text_table
from traceview.units import counted, finite, fmt_bytes, fmt_pct, fmt_si, fmt_time_us


def phase_json(phase: Phase) -> dict[str, Any]:
    p = phase.program
    median = phase.step_time_us
    p10, p90 = phase.step_time(0.1), phase.step_time(0.9)
    reasons = dict(phase.reasons)
    if phase.phase == "prefill":
        reasons.setdefault("time_per_output_token_us", "prefill emits the first token of each sequence: its "
                                                       "step time is the time to first token")
    return {
        "phase": phase.phase, "module": phase.module, "program_id": p.program_id,
        "recognised_by": list(phase.recognised_by),
        "steps": phase.steps, "devices": phase.devices,
        "batch": phase.batch, "tokens_per_sequence": phase.tokens_per_sequence,
        "tokens_per_step": phase.tokens_per_step,
        "step_time_us": finite(median), "step_time_min_us": finite(phase.step_time(0.0)),
        "step_time_p10_us": finite(p10), "step_time_p90_us": finite(p90),
        "step_time_max_us": finite(phase.step_time(1.0)),
        "step_time_spread": finite((p90 - p10) / median) if median and p10 is not None and p90 is not None
        else None,
        "param_bytes": p.weight_bytes, "kv_cache_bytes": p.kv_cache_bytes,
        "kv_cache_parameters": [{"number": c.number, "name": c.name, "shape": c.shape_text, "bytes": c.bytes,
                                 "output": c.output, "donated": c.aliased,
                                 "writes": sorted({w.opcode for w in c.writes})} for c in p.caches],
        "token_input": None if p.tokens is None else {"number": p.tokens.number, "name": p.tokens.name,
                                                      "shape": p.tokens.shape_text},
        "max_sequence_length": p.max_sequence_length, "paged_cache": p.paged,
        "paging": None if p.paging is None else {
            "pages": p.paging.pages, "page_size": p.paging.page_size, "slots": p.paging.slots,
            "pages_per_sequence": p.paging.pages_per_sequence, "sequences": p.paging.sequences,
            "tokens_per_step": p.paging.tokens_per_step, "mixed": p.paging.mixed, "how": list(p.paging.how)},
        "loop": phase.loop,
        "kv_bytes_per_token": finite(phase.kv_bytes_per_token),
        "flops": finite(phase.flops), "peak_flops": finite(phase.peak_flops), "peak_dtype": phase.peak_dtype,
        "compute_time_us": finite(phase.compute_time_us), "memory_time_us": finite(phase.memory_time_us),
        "floor_us": finite(phase.floor_us), "floor_bound": phase.floor_bound,
        "efficiency": finite(phase.efficiency),
        "time_per_output_token_us": finite(phase.time_per_output_token_us),
        "time_to_first_token_us": finite(median) if phase.phase == "prefill" else None,
        "tokens_per_s_per_chip": finite(phase.tokens_per_s_per_chip),
        "reasons": reasons,
    }


def program_json(ran: RanProgram) -> dict[str, Any]:
    """A module the trace ran: its calls and what its HLO holds (``"hlo": false`` when none was found)."""
    record = {"module": ran.module, "calls_per_device": ran.calls_per_device, "devices": ran.devices,
              "parameters": ran.parameters, "weight_bytes": ran.weight_bytes, "kv_cache_bytes": ran.kv_cache_bytes,
              "kv_cache_parameters": list(ran.kv_cache_parameters), "token_input": ran.token_input}
    return record if ran.hlo else {**record, "hlo": False}


def critical_json(critical: CriticalBatch | None) -> dict[str, Any]:
    """The critical batch's inputs and the measured batch against it (``{}`` when there is none); ``verdict``
    only where the measured batch is known."""
    if critical is None:
        return {}
    record = {"peak_flops": finite(critical.peak_flops), "peak_dtype": critical.peak_dtype,
              "hbm_bandwidth": finite(critical.hbm_bandwidth), "bytes_per_weight": finite(critical.bytes_per_weight),
              "formula": critical.formula, "measured_batch": critical.measured_batch,
              "batch_over_critical": finite(critical.batch_over_critical),
              "with_kv_cache": finite(critical.with_kv_cache), "with_kv_cache_reason": critical.with_kv_cache_reason}
    return record if critical.verdict is None else {**record, "verdict": critical.verdict}


def projected_json(row: ProjectedBatch) -> dict[str, Any]:
    """One row of the batch projection."""
    return {"batch": row.batch, "floor_us": finite(row.floor_us), "floor_bound": row.floor_bound,
            "floor_tokens_per_s": finite(row.floor_tokens_per_s), "step_time_us": finite(row.step_time_us),
            "tokens_per_s_per_chip": finite(row.tokens_per_s_per_chip), "hbm_bytes": finite(row.hbm_bytes)}


def inference_json(report: InferenceReport) -> dict[str, Any]:
    """The ``traceview inference --format json`` record (DESIGN.md's contract, plus details)."""
    target = None
    if report.target is not None:
        target = {**report.target.target_fields(), "hbm_capacity": report.target.hbm_capacity,
                  "projected": report.projected}
    return {
        "phases": [phase_json(p) for p in report.phases],
        "critical_batch": finite(report.critical_batch),
        "critical_batch_detail": critical_json(report.critical),
        "kv_bytes_per_token": finite(report.kv_bytes_per_token),
        "max_sequences": report.max_sequences,
        "batch_projection": [projected_json(row) for row in report.projection],
        "programs": [program_json(p) for p in report.programs],
        "target": target,
        "reasons": dict(report.reasons),
        "warnings": list(report.warnings),
    }


def _n(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def inference_text(report: InferenceReport, markdown: bool = False) -> str:
    """The phases table, the critical batch and KV budget, the projection and warnings."""
    table = markdown_table if markdown else text_table
    esc = markdown_text if markdown else terminal_text
    head = (lambda s: f"## {s}") if markdown else (lambda s: s)
    out: list[str] = []
    chip = report.target
    if chip is not None:
        out += [f"Target: {esc(chip.name)}" + (" (the trace ran on another chip: floors are the target's, "
                                               "efficiencies are not judged)" if report.projected else ""), ""]
    if report.phases:
        out += [head("Serving phases"), ""]
        rows = [[p.phase, p.module, str(p.steps), _n(p.batch), _n(p.tokens_per_step),
                 fmt_time_us(p.step_time_us), fmt_bytes(p.program.weight_bytes),
                 fmt_bytes(p.program.kv_cache_bytes), fmt_si(p.flops), fmt_time_us(p.floor_us),
                 p.floor_bound or "-", fmt_pct(p.efficiency), fmt_time_us(p.time_per_output_token_us),
                 _n(p.tokens_per_s_per_chip)] for p in report.phases]
        out.append(table(["phase", "module", "steps", "batch", "tokens/step", "step (median)", "weights",
                          "KV cache", "FLOPs", "floor", "bound", "efficiency", "per output token",
                          "tokens/s/chip"], rows, "llrrrrrrrrlrrr"))
        for p in report.phases:
            out += ["", f"{p.phase} {esc(p.module)}, recognised by:"]
            out += [f"  - {esc(line)}" for line in p.recognised_by]
            if p.reasons:
                out.append("  notes:")
                out += [f"  - {key}: {esc(why)}" for key, why in p.reasons.items()]
        out.append("")
    out += _budget_lines(report, esc)
    if report.projection:
        out += ["", head("Decode at a larger batch (same model; step time at the measured efficiency)"), ""]
        # the critical batch as a whole batch (206.04 -> 207) and the most sequences HBM holds are rows of
        # their own: say which
        crit = finite(report.critical_batch)
        critical = math.ceil(crit) if crit is not None else None
        marks = {critical: " (critical)", report.max_sequences: " (fills HBM)"}
        rows = [[f"{r.batch}{marks.get(r.batch, '')}", fmt_time_us(r.floor_us),
                 r.floor_bound, fmt_time_us(r.step_time_us), _n(r.tokens_per_s_per_chip), _n(r.floor_tokens_per_s),
                 fmt_bytes(r.hbm_bytes)] for r in report.projection]
        out.append(table(["batch", "floor", "bound", "step time", "tokens/s/chip", "tokens/s at floor",
                          "weights + KV"], rows, "rrlrrrr"))
    if report.warnings:
        out += ["", head("Warnings"), ""]
        out += [f"- {esc(w)}" for w in report.warnings]
    return "\n".join(out).rstrip() + "\n"


def _budget_lines(report: InferenceReport, esc) -> list[str]:
    lines = []
    crit = report.critical
    if crit is not None:
        lines.append(f"Critical batch: {crit.batch:,.0f} sequences (peak {fmt_si(crit.peak_flops, 'FLOP/s')}"
                     f" x {crit.bytes_per_weight:g} bytes per weight / (2 x HBM {fmt_si(crit.hbm_bandwidth, 'B/s')}))")
        if crit.verdict:
            lines.append(f"  {esc(crit.verdict)}")
        lines.append(f"  counting the KV cache: {crit.with_kv_cache:,.0f} sequences" if crit.with_kv_cache is not None
                     else f"  counting the KV cache: {esc(crit.with_kv_cache_reason or 'unknown')}")
    else:
        lines.append(f"Critical batch: unknown ({esc(report.reasons.get('critical_batch', ''))})")
    lines.append(f"KV cache per token: {fmt_bytes(report.kv_bytes_per_token)}" if report.kv_bytes_per_token
                 is not None else f"KV cache per token: unknown ({esc(report.reasons.get('kv_bytes_per_token', ''))})")
    paging = next((p.program.paging for p in report.phases if p.program.paging is not None), None)
    if paging is not None and paging.slots:
        lines.append(f"Paged cache: {paging.slots:,} token slots"
                     + (f" in {paging.pages:,} pages of {paging.page_size}" if paging.pages else "")
                     + (f", {paging.sequences} sequences of up to {paging.pages_per_sequence} pages per step"
                        if paging.sequences else "")
                     + (f", {paging.tokens_per_step} tokens per step" if paging.tokens_per_step else ""))
    lines.append(f"Sequences that fit in HBM beside the weights: {report.max_sequences:,}" if report.max_sequences
                 is not None else f"Sequences that fit in HBM: unknown ({esc(report.reasons.get('max_sequences', ''))})")
    return lines


def section_lines(report: InferenceReport) -> list[str]:
    """The analyze report's "Inference" block (plain text; the analyze renderer escapes it)."""
    lines = []
    for p in report.phases:
        lines.append(f"{p.phase} {p.module}: {counted(p.steps, 'step')}, batch {_n(p.batch)}, "
                     f"{_n(p.tokens_per_step)} tokens/step, "
                     f"median {fmt_time_us(p.step_time_us)}, floor {fmt_time_us(p.floor_us)} "
                     f"({p.floor_bound or '-'}), efficiency {fmt_pct(p.efficiency)}, "
                     f"{_n(p.tokens_per_s_per_chip)} tokens/s/chip")
    lines += [line.strip() for line in _budget_lines(report, str)]
    return lines
