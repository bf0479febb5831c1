"""Serving phases of an analysis: prefill and decode, each against the book's inference roofline.

``inference_from_analysis(pipeline)`` reads every HLO module that ran as a serving program
(``programs``), finds its calls in the op table (``executions``), recognises the phases and judges
each against the target chip (``roofline``). docs/inference.md defines every number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traceview.analysis.build import PipelineResult
from traceview.hardware.chips import Chip
from traceview.inference import roofline
from traceview.inference.executions import module_calls
from traceview.inference.programs import Program, read_program

PROJECTED_BATCHES = 10      # rows of the batch projection at most


@dataclass
class Phase:
    """One serving program and its calls, judged on the target. Unknown numbers are None, with the reason
    in ``reasons`` under the field's name."""

    phase: str                      # "prefill" | "decode"
    program: Program
    calls: pd.DataFrame             # executions.COLUMNS, this program's rows
    recognised_by: list[str] = field(default_factory=list)
    flops: float | None = None
    peak_flops: float | None = None
    peak_dtype: str | None = None
    compute_time_us: float | None = None
    memory_time_us: float | None = None
    floor_us: float | None = None
    floor_bound: str | None = None
    efficiency: float | None = None
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def module(self) -> str:
        return self.program.module

    @property
    def steps(self) -> int:
        """Calls per device (the most any device ran)."""
        return int(self.calls.groupby("device").size().max()) if not self.calls.empty else 0

    @property
    def devices(self) -> int:
        return int(self.calls["device"].nunique()) if not self.calls.empty else 0

    @property
    def batch(self) -> int | None:
        return self.program.batch

    @property
    def tokens_per_sequence(self) -> int | None:
        return self.program.tokens_per_sequence

    @property
    def tokens_per_step(self) -> int | None:
        b, t = self.batch, self.tokens_per_sequence
        return b * t if b is not None and t is not None else None

    def step_time(self, q: float) -> float | None:
        """The ``q`` quantile of the call times (us)."""
        return float(np.quantile(self.calls["time_us"], q)) if not self.calls.empty else None

    @property
    def step_time_us(self) -> float | None:
        return self.step_time(0.5)

    @property
    def tokens_per_s_per_chip(self) -> float | None:
        t, step = self.tokens_per_step, self.step_time_us
        return t / (step * 1e-6) if t is not None and step else None

    @property
    def time_per_output_token_us(self) -> float | None:
        """Decode: the step time over the new tokens per sequence (each sequence gains that many per step)."""
        if self.phase != "decode" or not self.tokens_per_sequence or self.step_time_us is None:
            return None
        return self.step_time_us / self.tokens_per_sequence

    @property
    def kv_bytes_per_token(self) -> float | None:
        b, s = self.batch, self.program.max_sequence_length
        return self.program.kv_cache_bytes / (b * s) if b and s else None


@dataclass
class InferenceReport:
    """The serving phases of one trace, the critical batch and the KV-cache budget on the target."""

    phases: list[Phase]
    programs: list[dict[str, Any]]          # every module that ran: module, calls, role, why
    target: Chip | None
    projected: bool = False                 # the trace ran on another chip than the target
    critical_batch: float | None = None
    critical: dict[str, Any] = field(default_factory=dict)   # its inputs, the batch's verdict, with KV
    kv_bytes_per_token: float | None = None
    max_sequences: int | None = None
    projection: list[dict[str, Any]] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def serving(self) -> bool:
        """A serving pattern was found (at least one phase)."""
        return bool(self.phases)

    def phase(self, name: str) -> Phase | None:
        found = [p for p in self.phases if p.phase == name]
        return max(found, key=lambda p: p.steps) if found else None


def inference_from_analysis(pipeline: PipelineResult, ops: pd.DataFrame | None = None,
                            programs: list[Program] | None = None) -> InferenceReport:
    """``ops``: the op executions to find the module calls in (default: the profile's); ``programs``: the
    ran modules (``pipeline.ran_modules``) already read as serving programs, in that order (default: read
    here)."""
    calls = module_calls(pipeline.profile.ops if ops is None else ops)
    chip = pipeline.target
    report = InferenceReport([], [], chip, projected=bool(pipeline.projected))
    ran: list[tuple[Program, pd.DataFrame]] = []
    if programs is None:
        programs = [read_program(module) for module in pipeline.ran_modules]
    for module, program in zip(pipeline.ran_modules, programs):
        mine = calls[calls["module"] == module.name]
        if module.program_id is not None and not mine.empty and (mine["program_id"] == module.program_id).any():
            mine = mine[mine["program_id"] == module.program_id]
        report.programs.append(_program_record(program, mine))
        if not mine.empty:
            ran.append((program, mine))
    cached = [(program, mine) for program, mine in ran if program.caches]
    _recognise(report, cached)
    _cache_makers(report, ran)
    costs = pipeline.ran_costs
    for phase in report.phases:
        _judge(phase, costs, chip, report.projected, pipeline.capture_chip)
    _budget(report)
    if not report.phases:
        report.warnings.append(_no_serving_statement(report.programs))
    return report


def _program_record(program: Program, calls: pd.DataFrame) -> dict[str, Any]:
    per_device = calls.groupby("device").size() if not calls.empty else pd.Series(dtype=int)
    tokens = program.tokens
    return {"module": program.module, "calls_per_device": int(per_device.max()) if len(per_device) else 0,
            "devices": int(len(per_device)),
            "parameters": len(program.parameters),
            "weight_bytes": program.weight_bytes, "kv_cache_bytes": program.kv_cache_bytes,
            "kv_cache_parameters": [f"{p.number}: {p.name} {p.shape_text}" for p in program.caches],
            "token_input": f"{tokens.number}: {tokens.name} {tokens.shape_text}" if tokens else None}


def _recognise(report: InferenceReport, cached: list[tuple[Program, pd.DataFrame]]) -> None:
    """Decode: one new token per sequence per call; prefill: several (a prompt). When the token count is
    unknown, the program called most often is the decode step."""
    if not cached:
        return
    most = max(cached, key=lambda pc: pc[1].groupby("device").size().max())[0].module
    for program, mine in cached:
        t = program.tokens_per_sequence
        if t is not None:
            name = "decode" if t == 1 else "prefill"
        else:
            name = "decode" if program.module == most else "prefill"
        phase = Phase(name, program, mine.sort_values("start_us", kind="stable"))
        phase.recognised_by = _evidence(program, mine, t, name, most)
        report.phases.append(phase)
    first = {p.module: float(p.calls["start_us"].min()) for p in report.phases}
    decodes = [p for p in report.phases if p.phase == "decode"]
    for prefill in [p for p in report.phases if p.phase == "prefill"]:
        for decode in decodes:
            after = (decode.calls["start_us"].min() > prefill.calls["start_us"].min())
            order = "before" if after else "after"
            prefill.recognised_by.append(f"first call {abs(first[decode.module] - first[prefill.module]):.0f} us "
                                         f"{order} the first call of the decode step {decode.module}")
    report.phases.sort(key=lambda p: (p.phase != "prefill", first[p.module]))


def _cache_makers(report: InferenceReport, ran: list[tuple[Program, pd.DataFrame]]) -> None:
    """A prefill that creates the KV cache (returns it, takes none) and reads a prompt (several tokens per
    sequence), run before a decode step that takes that cache: the prefill phase of that decode."""
    decodes = [p for p in report.phases if p.phase == "decode"]
    known = {p.module for p in report.phases}
    for program, mine in ran:
        if program.caches or program.module in known or (program.tokens_per_sequence or 0) <= 1:
            continue
        for decode in decodes:
            outputs = program.makes_cache_of(decode.program)
            first_decode = float(decode.calls["start_us"].min())
            if not outputs or float(mine["start_us"].min()) > first_decode:
                continue
            shapes = {(p.shape.element_type, p.shape.dims) for p in decode.program.caches}
            for param in program.parameters:     # a cache passed in to be filled (zeros) is no weight
                if param.role == "weight" and (param.shape.element_type, param.shape.dims) in shapes:
                    param.role = "kv_cache"
            tok = program.tokens
            phase = Phase("prefill", program, mine.sort_values("start_us", kind="stable"))
            phase.recognised_by = [
                f"outputs {', '.join(map(str, outputs))} have the shape of {decode.module}'s KV cache parameters: "
                "it creates the cache the decode step updates",
                f"{program.tokens_per_sequence} tokens per sequence per call"
                + (f" (token input {tok.name} {tok.shape_text})" if tok else "") + ": a prompt, prefill",
                f"first call {first_decode - float(mine['start_us'].min()):.0f} us before the first call of the "
                f"decode step {decode.module}"]
            report.phases.insert(0, phase)
            known.add(program.module)
            break


def _evidence(program: Program, calls: pd.DataFrame, tokens: int | None, name: str, most: str) -> list[str]:
    caches = program.caches
    writes = sorted({w.opcode for p in caches for w in p.writes})
    aliased = [p for p in caches if p.aliased]
    shapes = ", ".join(f"{p.number} {p.name} {p.shape_text}" for p in caches)
    lines = [f"parameters {shapes} come back as outputs "
             f"{', '.join(str(p.output) for p in caches)} after {' and '.join(writes)}: a KV cache updated in place"
             + (f" ({len(aliased)} of {len(caches)} donated: input_output_alias)" if aliased else
                " (not donated: no input_output_alias)")]
    if program.paged:
        lines.append("the cache is written by scatter: a paged or ragged cache (positions are not one "
                     "contiguous slot per sequence)")
    tok = program.tokens
    if tokens is not None:
        where = f"token input {tok.name} {tok.shape_text}" if tok else "the cache writes' size along the sequence dim"
        lines.append(f"{tokens} new token{'s' if tokens != 1 else ''} per sequence per call ({where}): "
                     + ("one generated token per sequence, a decode step" if tokens == 1 else "a prompt, prefill"))
    else:
        lines.append(f"no token input and no sequence dim in the cache writes: called most often ({most})"
                     if name == "decode" else f"no token input: called less often than {most}")
    per_device = calls.groupby("device").size()
    lines.append(f"called {int(per_device.max())} times" + (f" on each of {len(per_device)} devices"
                                                            if len(per_device) > 1 else ""))
    return lines


def _judge(phase: Phase, costs: pd.DataFrame, chip: Chip | None, projected: bool, capture: Chip | None) -> None:
    program = phase.program
    rows = costs[costs["module"] == program.module] if not costs.empty else costs
    if program.program_id is not None and "program_id" in rows.columns:   # same name, other compilations
        same = rows["program_id"].astype(str) == str(program.program_id)
        rows = rows[same] if same.any() else rows
    if rows.empty:
        phase.reasons["flops"] = f"no HLO costs for {program.module}"
    else:
        phase.flops = float(rows["flops_per_step"].sum())
        if bool(rows["unknown"].any()):
            phase.reasons["flops"] = (f"{int(rows['unknown'].sum())} instruction(s) of {program.module} have no "
                                      "cost: FLOPs are a lower bound")
    if phase.batch is None:
        phase.reasons["batch"] = "no integer token input of rank 1 or 2: the batch is unknown"
    if chip is None:
        for key in ("floor_us", "efficiency"):
            phase.reasons[key] = "no target chip (give --target)"
        return
    dtype = _matmul_dtype(rows) or (program.weights[0].shape.element_type if program.weights else None)
    peak, note = chip.peak_flops_rule(dtype)
    phase.peak_dtype = dtype
    if note:
        phase.reasons["peak_flops"] = note
    if peak is None or not chip.hbm_bandwidth or phase.flops is None:
        missing = "peak FLOP/s for " + str(dtype) if peak is None else \
            "HBM bandwidth" if not chip.hbm_bandwidth else "the FLOPs"
        phase.reasons["floor_us"] = f"{chip.name}: no {missing}"
        phase.reasons["efficiency"] = phase.reasons["floor_us"]
        return
    phase.peak_flops = peak
    judge = roofline.decode_floor if phase.phase == "decode" else roofline.prefill_floor
    floor = judge(phase.flops, program.weight_bytes, program.kv_cache_bytes, peak, chip.hbm_bandwidth)
    phase.compute_time_us, phase.memory_time_us = floor.compute_s * 1e6, floor.memory_s * 1e6
    phase.floor_us, phase.floor_bound = floor.floor_s * 1e6, floor.bound
    if projected:
        ran = capture.name if capture is not None else "another chip"
        phase.reasons["efficiency"] = (f"the trace ran on {ran}, not on {chip.name}: its step times say "
                                       f"nothing about {chip.name}'s efficiency")
    elif phase.step_time_us:
        phase.efficiency = phase.floor_us / phase.step_time_us


def _matmul_dtype(rows: pd.DataFrame) -> str | None:
    """The dtype of the contractions (dots, convolutions) with the most FLOPs."""
    if rows.empty or "contraction" not in rows.columns:
        return None
    dots = rows[rows["contraction"].astype(bool) & (rows["flops_per_step"] > 0)]
    if dots.empty:
        return None
    return str(dots.groupby("dtype")["flops_per_step"].sum().idxmax())


def _budget(report: InferenceReport) -> None:
    """Critical batch, KV bytes per token, sequences fitting in HBM, and the batch projection."""
    decode = report.phase("decode")
    source = decode or report.phase("prefill")
    if source is None:
        for key in ("critical_batch", "kv_bytes_per_token", "max_sequences"):
            report.reasons[key] = "no serving phase recognised"
        return
    program = source.program
    report.kv_bytes_per_token = source.kv_bytes_per_token
    if report.kv_bytes_per_token is None:
        report.reasons["kv_bytes_per_token"] = ("a paged or ragged cache: its slots are not (sequence, position)"
                                                if program.paged else "the batch or the cache's sequence length "
                                                "is unknown")
    chip = report.target
    if decode is None:
        report.reasons["critical_batch"] = "no decode phase recognised"
    elif chip is None or decode.peak_flops is None or not chip.hbm_bandwidth:
        report.reasons["critical_batch"] = decode.reasons.get("floor_us", "no peak FLOP/s or HBM bandwidth")
    elif program.weight_elements == 0:
        report.reasons["critical_batch"] = "no weight parameters"
    else:
        _critical(report, decode, chip)
    _max_sequences(report, program, chip)
    if decode is not None and report.critical_batch is not None:
        report.projection = _projection(report, decode, chip)


def _critical(report: InferenceReport, decode: Phase, chip: Chip) -> None:
    program = decode.program
    peak, bw = float(decode.peak_flops or 0.0), float(chip.hbm_bandwidth or 0.0)
    per_weight = program.weight_bytes / program.weight_elements
    report.critical_batch = roofline.critical_batch(peak, bw, per_weight)
    detail: dict[str, Any] = {"peak_flops": peak, "peak_dtype": decode.peak_dtype, "hbm_bandwidth": bw,
                              "bytes_per_weight": per_weight,
                              "formula": "peak_flops * bytes_per_weight / (2 * hbm_bandwidth)",
                              "measured_batch": decode.batch, "batch_over_critical": None,
                              "with_kv_cache": None, "with_kv_cache_reason": None}
    if decode.batch:
        ratio = decode.batch / report.critical_batch
        detail["batch_over_critical"] = ratio
        detail["verdict"] = (f"batch {decode.batch} is {ratio:.1%} of the critical batch: each decode step is "
                             "bound by loading the weights; a larger batch costs little extra time per step"
                             if ratio < 1 else f"batch {decode.batch} is at or above the critical batch: the "
                             "weight matmuls are compute-bound")
        if decode.flops is not None:
            with_kv = roofline.critical_batch_with_kv(program.weight_bytes, decode.flops / decode.batch,
                                                      program.kv_cache_bytes / decode.batch, peak, bw)
            detail["with_kv_cache"] = with_kv
            if with_kv is None:
                detail["with_kv_cache_reason"] = ("reading one sequence's KV cache takes longer than its FLOPs: "
                                                  "decode stays memory-bound at any batch")
    report.critical = detail


def _max_sequences(report: InferenceReport, program: Program, chip: Chip | None) -> None:
    seq = program.max_sequence_length
    if chip is None or not chip.hbm_capacity:
        report.reasons["max_sequences"] = "the target's HBM capacity is unknown" if chip else "no target chip"
    elif report.kv_bytes_per_token is None or not seq:
        report.reasons["max_sequences"] = report.reasons.get("kv_bytes_per_token", "KV bytes per token unknown")
    elif program.weight_bytes >= chip.hbm_capacity:
        report.max_sequences = 0
        report.reasons["max_sequences"] = f"the weights alone fill {chip.name}'s HBM"
    else:
        per_sequence = report.kv_bytes_per_token * seq
        report.max_sequences = int((chip.hbm_capacity - program.weight_bytes) // per_sequence)


def _projection(report: InferenceReport, decode: Phase, chip: Chip | None) -> list[dict[str, Any]]:
    """The decode floor at larger batches (same model: FLOPs and KV bytes grow with the batch); the step time
    holds the measured efficiency."""
    batch = decode.batch
    if not batch or decode.flops is None or chip is None or not chip.hbm_bandwidth or decode.peak_flops is None:
        return []
    crit = report.critical_batch or 0.0
    limit = max(4 * crit, 2 * batch)
    if report.max_sequences is not None:
        limit = min(limit, max(report.max_sequences, batch))
    sizes = {batch}
    b = batch
    while b * 2 <= limit and len(sizes) < PROJECTED_BATCHES - 2:
        b *= 2
        sizes.add(b)
    sizes |= {n for n in (math.ceil(crit), report.max_sequences) if n and batch <= n <= limit}
    program = decode.program
    rows = []
    for n in sorted(sizes):
        f = roofline.projected_step(n, batch, decode.flops, program.weight_bytes, program.kv_cache_bytes,
                                    decode.peak_flops, chip.hbm_bandwidth)
        step = f.floor_s * 1e6 / decode.efficiency if decode.efficiency else None
        rows.append({"batch": n, "floor_us": f.floor_s * 1e6, "floor_bound": f.bound,
                     "floor_tokens_per_s": n / f.floor_s,
                     "step_time_us": step, "tokens_per_s_per_chip": n / (step * 1e-6) if step else None,
                     "hbm_bytes": program.weight_bytes + program.kv_cache_bytes * n / batch})
    return rows


def _no_serving_statement(programs: list[dict[str, Any]]) -> str:
    ran = "; ".join(f"{p['module']} (x{p['calls_per_device']} per device, {p['parameters']} parameters, "
                    f"token input: {p['token_input'] or 'none'})" for p in programs) or "none"
    return ("no serving pattern: no program that ran returns a parameter updated in place by "
            "dynamic-update-slice or scatter (a KV cache), so there is no prefill or decode step to judge. "
            f"Programs that ran: {ran}")


__all__ = ["InferenceReport", "Phase", "inference_from_analysis"]
