"""Serving phases of an analysis: prefill and decode, each against the book's inference roofline.

``inference_from_analysis(pipeline)`` reads every HLO module that ran as a serving program
(``programs``), finds its calls in the op table (``executions``), recognises the phases and judges
each against the target chip (``roofline``). docs/inference.md defines every number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from traceview.analysis.build import PipelineResult
from traceview.hardware.chips import Chip
from traceview.inference import roofline
from traceview.inference.executions import loop_iterations, module_calls
from traceview.inference.loops import DecodeLoop, decode_loops, entry_instructions
from traceview.inference.programs import Program, read_program
from traceview.units import counted

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
    own_flops: float | None = None  # FLOPs per step when the phase is part of a program (a loop, what precedes it)
    loop: str | None = None         # the while instruction of a decode loop inside the program

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
        return self.program.tokens_per_step

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
        if self.program.paging is not None:
            return self.program.paging.kv_bytes_per_token
        b, s = self.batch, self.program.max_sequence_length
        return self.program.kv_cache_bytes / (b * s) if b and s else None


@dataclass
class RanProgram:
    """A module the trace ran: its calls (the most any device made, on how many devices) and, when its HLO
    was found (``hlo``), its signature as read, before any phase was recognised in it: parameters, weight
    and KV-cache bytes, the KV-cache parameters and the token input ("number: name shape"). None (or
    empty) where the HLO was not found."""

    module: str
    calls_per_device: int
    devices: int
    hlo: bool = True
    parameters: int | None = None
    weight_bytes: int | None = None
    kv_cache_bytes: int | None = None
    kv_cache_parameters: list[str] = field(default_factory=list)
    token_input: str | None = None


@dataclass(frozen=True)
class CriticalBatch:
    """The decode batch at which the weight matmuls turn compute-bound (book part 7: each weight loaded per
    step serves one multiply-add per sequence), its inputs on the target, and the measured batch against it."""

    batch: float                            # peak_flops * bytes_per_weight / (2 * hbm_bandwidth), sequences
    peak_flops: float                       # the target's peak FLOP/s for the decode's matmul dtype
    peak_dtype: str | None                  # that dtype
    hbm_bandwidth: float                    # the target's HBM bytes/s
    bytes_per_weight: float                 # weight bytes over weight elements
    measured_batch: int | None              # the decode phase's batch (None: unknown)
    batch_over_critical: float | None = None    # measured / critical (None without a measured batch)
    verdict: str | None = None              # what that ratio means for a decode step (None without a batch)
    with_kv_cache: float | None = None      # the crossover counting each sequence's KV-cache reads
    with_kv_cache_reason: str | None = None     # why it is None when the batch and FLOPs are known

    @property
    def formula(self) -> str:
        """How ``batch`` is computed, in its inputs' names."""
        return "peak_flops * bytes_per_weight / (2 * hbm_bandwidth)"


@dataclass(frozen=True)
class ProjectedBatch:
    """The decode step at another batch, same model: FLOPs and KV-cache bytes grow with the batch, weights do
    not; the step time keeps the measured efficiency (None when the efficiency is not judged)."""

    batch: int                              # sequences per decode step
    floor_us: float                         # the decode floor at that batch
    floor_bound: str                        # "compute" | "memory"
    floor_tokens_per_s: float               # batch over the floor
    step_time_us: float | None              # the floor over the measured efficiency
    tokens_per_s_per_chip: float | None     # batch over that step time
    hbm_bytes: float                        # weights plus the KV cache of that many sequences


@dataclass
class InferenceReport:
    """The serving phases of one trace, the critical batch and the KV-cache budget on the target."""

    phases: list[Phase]
    programs: list[RanProgram]              # every module that ran, with or without its HLO
    target: Chip | None
    projected: bool = False                 # the trace ran on another chip than the target
    critical: CriticalBatch | None = None   # None with the reason in reasons["critical_batch"]
    kv_bytes_per_token: float | None = None
    max_sequences: int | None = None
    projection: list[ProjectedBatch] = field(default_factory=list)   # empty without a critical batch
    reasons: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def critical_batch(self) -> float | None:
        """Sequences per decode step at which the weight matmuls turn compute-bound (None: unknown)."""
        return self.critical.batch if self.critical is not None else None

    @property
    def serving(self) -> bool:
        """A serving pattern was found (at least one phase)."""
        return bool(self.phases)

    def phase(self, name: str) -> Phase | None:
        found = [p for p in self.phases if p.phase == name]
        return max(found, key=lambda p: p.steps) if found else None


def inference_from_analysis(pipeline: PipelineResult, ops: pd.DataFrame | None = None,
                            programs: list[Program] | None = None) -> InferenceReport:
    """``ops``: the op executions to find the module calls in (default: the profile's, read again when the
    reading did not keep them); ``programs``: the ran modules (``pipeline.hlo.ran``) already read as
    serving programs, in that order (default: read here)."""
    ops = pipeline.profile.op_executions() if ops is None else ops
    calls = module_calls(ops, {m.name: entry_instructions(m) for m in pipeline.hlo.ran})
    judged = pipeline.judged
    chip = judged.chip if judged else None
    measured_on = judged.measured_on if judged else None
    report = InferenceReport([], [], chip, projected=measured_on is not None)
    ran: list[tuple[Program, pd.DataFrame]] = []
    if programs is None:
        programs = [read_program(module) for module in pipeline.hlo.ran]
    for module, program in zip(pipeline.hlo.ran, programs):
        mine = calls[calls["module"] == module.name]
        if module.program_id is not None and not mine.empty and (mine["program_id"] == module.program_id).any():
            mine = mine[mine["program_id"] == module.program_id]
        report.programs.append(_ran(module.name, mine, program))
        if not mine.empty:
            ran.append((program, mine))
    with_hlo = {m.name for m in pipeline.hlo.ran}
    for name, mine in calls[~calls["module"].isin(with_hlo)].groupby("module", sort=True):
        report.programs.append(_ran(str(name), mine, None))
    cached = [(program, mine) for program, mine in ran if program.caches]
    _recognise(report, cached)
    _cache_makers(report, ran)
    _loop_phases(report, ran, pipeline.hlo.ran, ops)
    costs = pipeline.hlo.ran_costs
    for phase in report.phases:
        _judge(phase, costs, chip, report.projected, measured_on)
    _budget(report)
    if not report.phases:
        report.warnings.append(_no_serving_statement(report.programs))
    return report


def _ran(module: str, calls: pd.DataFrame, program: Program | None) -> RanProgram:
    """A module's calls and its signature (``program``: its HLO read as a serving program, None when not
    found), taken now: recognising the phases later adds to the programs."""
    per_device = calls.groupby("device").size() if not calls.empty else pd.Series(dtype=int)
    calls_per_device, devices = int(per_device.max()) if len(per_device) else 0, int(len(per_device))
    if program is None:
        return RanProgram(module, calls_per_device, devices, hlo=False)
    tokens = program.tokens
    return RanProgram(program.module, calls_per_device, devices, parameters=len(program.parameters),
                      weight_bytes=program.weight_bytes, kv_cache_bytes=program.kv_cache_bytes,
                      kv_cache_parameters=[f"{p.number}: {p.name} {p.shape_text}" for p in program.caches],
                      token_input=f"{tokens.number}: {tokens.name} {tokens.shape_text}" if tokens else None)


def _recognise(report: InferenceReport, cached: list[tuple[Program, pd.DataFrame]]) -> None:
    """Decode: one new token per sequence per call; prefill: several (a prompt). When the token count is
    unknown, the program called most often is the decode step."""
    if not cached:
        return
    most = max(cached, key=lambda pc: pc[1].groupby("device").size().max())[0].module
    for program, mine in cached:
        t = program.tokens_per_sequence
        if program.paging is not None and program.paging.mixed:
            name = "mixed"
        elif t is not None:
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


def _loop_phases(report: InferenceReport, ran: list[tuple[Program, pd.DataFrame]], modules: list,
                 ops: pd.DataFrame) -> None:
    """A program that generates inside itself (:mod:`loops`): its decode loop is a decode phase of trip count
    × calls steps, timed per iteration; what runs before the loop is its prefill."""
    known = {p.module for p in report.phases}
    by_name = {m.name: m for m in modules}
    for program, mine in ran:
        module = by_name.get(program.module)
        if program.module in known or module is None:
            continue
        for loop in decode_loops(module):
            iterations, how = _iterations(ops, program, mine, loop)
            decode = Phase("decode", loop.decode_program(program), iterations, own_flops=loop.loop_flops,
                           loop=loop.while_name)
            decode.recognised_by = loop.evidence + [how]
            prefill = Phase("prefill", loop.prefill_program(program), _before_loop(ops, program, mine, loop),
                            own_flops=loop.rest_flops)
            tok = program.tokens
            prefill.recognised_by = [
                f"what {program.module} runs before loop {loop.while_name}: the prefill"
                + (f" of its token input {tok.name} {tok.shape_text} ({program.tokens_per_sequence} tokens per "
                   "sequence)" if tok else ""),
                f"called {counted(int(mine.groupby('device').size().max()), 'time')}; its time runs from each call's start to "
                f"the start of {loop.while_name}"]
            report.phases[:0] = [prefill]
            report.phases.append(decode)
            known.add(program.module)
            break


def _iterations(ops: pd.DataFrame, program: Program, calls: pd.DataFrame,
                loop: DecodeLoop) -> tuple[pd.DataFrame, str]:
    """The loop's iterations on each device: from its body's ops when the trace has them, else each call's
    loop time over the trip count."""
    found = loop_iterations(ops, program.module, program.program_id, loop.body_ops - {loop.while_name})
    per_call = calls.groupby("device").size().max() if not calls.empty else 0
    if loop.trips and not found.empty and found.groupby("device").size().max() == loop.trips * per_call:
        return found, (f"{loop.trips} iterations x {per_call} call(s): each iteration timed from its body's ops "
                       "in the trace (first op start to last op end)")
    spans = _while_rows(ops, program, loop)
    if not loop.trips or spans.empty:
        return found, "the loop's iterations could not be timed: trip count or loop events missing"
    rows = spans.loc[spans.index.repeat(loop.trips)].assign(time_us=lambda f: f["time_us"] / loop.trips)
    rows["call"] = range(len(rows))
    return rows.reset_index(drop=True), (f"{loop.trips} iterations x {per_call} call(s): each call's loop time "
                                         "over its trip count")


def _while_rows(ops: pd.DataFrame, program: Program, loop: DecodeLoop) -> pd.DataFrame:
    """Each execution of the loop's while instruction (columns as ``executions.COLUMNS``)."""
    rows = ops[(ops["module"].astype(str) == program.module) & (ops["op"].astype(str) == loop.while_name)]
    return pd.DataFrame({"module": program.module, "program_id": rows["program_id"].to_numpy(),
                         "device": rows["device"].astype(str).to_numpy(), "call": 0,
                         "start_us": rows["start_ps"].to_numpy() / 1e6,
                         "time_us": rows["duration_ps"].to_numpy() / 1e6})


def _before_loop(ops: pd.DataFrame, program: Program, calls: pd.DataFrame, loop: DecodeLoop) -> pd.DataFrame:
    """Each call's time from its start to the start of its decode loop (the k-th loop run on a device is in
    its k-th call); the whole call when the loop's events are missing."""
    loops = _while_rows(ops, program, loop).sort_values("start_us", kind="stable")
    out = calls.sort_values(["device", "start_us"], kind="stable").copy()
    for device, mine in out.groupby("device"):
        starts = loops.loc[loops["device"] == str(device), "start_us"].to_numpy()
        if len(starts) == len(mine):
            out.loc[mine.index, "time_us"] = starts - mine["start_us"].to_numpy()
    return out


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
    if program.paging is not None:
        lines += program.paging.how
        if program.paging.mixed:
            lines.append(f"{program.paging.tokens_per_step} tokens of {program.paging.sequences} sequences per "
                         "step: a ragged batch mixing prefill and decode tokens")
    tok = program.tokens
    if program.ragged:
        if program.paging is not None and not program.paging.mixed:
            lines.append(f"{program.tokens_per_step} tokens for {program.batch} sequences per step: one new token "
                         "each, a decode step")
    elif tokens is not None:
        where = f"token input {tok.name} {tok.shape_text}" if tok else "the cache writes' size along the sequence dim"
        lines.append(f"{tokens} new token{'s' if tokens != 1 else ''} per sequence per call ({where}): "
                     + ("one generated token per sequence, a decode step" if tokens == 1 else "a prompt, prefill"))
    else:
        lines.append(f"no token input and no sequence dim in the cache writes: called most often ({most})"
                     if name == "decode" else f"no token input: called less often than {most}")
    per_device = calls.groupby("device").size()
    lines.append(f"called {counted(int(per_device.max()), 'time')}" + (f" on each of {len(per_device)} devices"
                                                            if len(per_device) > 1 else ""))
    return lines


def _judge(phase: Phase, costs: pd.DataFrame, chip: Chip | None, projected: bool, capture: Chip | None) -> None:
    program = phase.program
    rows = costs[costs["module"] == program.module] if not costs.empty else costs
    if program.program_id is not None and "program_id" in rows.columns:   # same name, other compilations
        same = rows["program_id"].astype(str) == str(program.program_id)
        rows = rows[same] if same.any() else rows
    if phase.own_flops is not None:
        phase.flops = phase.own_flops
    elif rows.empty:
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
    judge = roofline.prefill_floor if phase.phase == "prefill" else roofline.decode_floor
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
    source = decode or report.phase("mixed") or report.phase("prefill")
    if source is None:
        for key in ("critical_batch", "kv_bytes_per_token", "max_sequences"):
            report.reasons[key] = "no serving phase recognised"
        return
    program = source.program
    report.kv_bytes_per_token = source.kv_bytes_per_token
    if report.kv_bytes_per_token is None:
        report.reasons["kv_bytes_per_token"] = (
            "; ".join(program.paging.how) if program.paging is not None else
            "a cache written by scatter whose slots are not (sequence, position)" if program.paged else
            "the batch or the cache's sequence length is unknown")
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
    batch = roofline.critical_batch(peak, bw, per_weight)
    critical = CriticalBatch(batch, peak, decode.peak_dtype, bw, per_weight, decode.batch)
    if decode.batch:
        ratio = decode.batch / batch
        verdict = (f"batch {decode.batch} is {ratio:.1%} of the critical batch: each decode step is bound by "
                   "loading the weights; a larger batch costs little extra time per step" if ratio < 1 else
                   f"batch {decode.batch} is at or above the critical batch: the weight matmuls are compute-bound")
        with_kv, why = None, None
        if decode.flops is not None:
            with_kv = roofline.critical_batch_with_kv(program.weight_bytes, decode.flops / decode.batch,
                                                      program.kv_cache_bytes / decode.batch, peak, bw)
            if with_kv is None:
                why = ("reading one sequence's KV cache takes longer than its FLOPs: decode stays memory-bound "
                       "at any batch")
        critical = replace(critical, batch_over_critical=ratio, verdict=verdict, with_kv_cache=with_kv,
                           with_kv_cache_reason=why)
    report.critical = critical


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


def _projection(report: InferenceReport, decode: Phase, chip: Chip | None) -> list[ProjectedBatch]:
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
        rows.append(ProjectedBatch(n, f.floor_s * 1e6, f.bound, n / f.floor_s, step,
                                   n / (step * 1e-6) if step else None,
                                   program.weight_bytes + program.kv_cache_bytes * n / batch))
    return rows


def _no_serving_statement(programs: list[RanProgram]) -> str:
    """What was seen (every program the trace ran, with or without its HLO) and what was missing."""
    read = [p for p in programs if p.hlo]
    blind = [p for p in programs if not p.hlo]
    ran = "; ".join(f"{p.module} (x{p.calls_per_device} per device, {p.parameters} parameters, "
                    f"token input: {p.token_input or 'none'})" for p in read)
    unread = "; ".join(f"{p.module} (x{p.calls_per_device} per device)" for p in blind[:20]) + \
        (f" and {len(blind) - 20} more" if len(blind) > 20 else "")
    if not read and not blind:
        return ("no serving pattern: the trace shows no program that ran (no device op belongs to an HLO module), "
                "so there is no prefill or decode step to judge")
    text = "no serving pattern: " + (
        "no program whose HLO was read returns a parameter updated in place by dynamic-update-slice or scatter "
        f"(a KV cache), nor runs a decode loop. Programs that ran, HLO read: {ran}" if read else
        "no HLO was found for any program that ran, so none could be read for a KV cache or a token input")
    if blind:
        text += (f". Programs that ran without their HLO: {unread}: give --hlo DIR (an XLA dump: "
                 "--xla_dump_to) or the xplane.pb that holds their HLO")
    return text


__all__ = ["CriticalBatch", "InferenceReport", "Phase", "ProjectedBatch", "inference_from_analysis"]
