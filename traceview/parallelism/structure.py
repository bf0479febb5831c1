"""The strategies only the program's structure tells apart: context, pipeline and expert parallelism.

A collective-permute is a K/V pass of ring attention when its loop computes
attention, a pipeline's activation pass when its loop does not; an
activation all-gather read by an attention dot gathers K/V along the
sequence; an all-to-all in a program with a router (a top-k) is an expert
layer's dispatch or combine (without one it reshards, and says nothing). This
module re-labels those collectives' patterns (so :mod:`roles` counts them
for the right strategy) and reads each strategy's figures: per-chip
sequence length (:mod:`context`), stages / microbatches / bubble (an SPMD
pipeline's loop), experts / top-k / capacity (:mod:`expert`).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from traceview.cost.shapes import byte_size
from traceview.parallelism.context import (
    AttentionShape,
    ContextFinding,
    arrays_of,
    attention_shape,
    block_of,
    element_bytes,
    gathered_kv_kernel,
    is_attention_dot,
    loop_computations,
)
from traceview.parallelism.dots import consuming_dot, weight_shapes
from traceview.parallelism.expert import ExpertFinding, capacity, expert_width, router, weight_width
from traceview.parallelism.kvflow import gather_group, kv_reader
from traceview.parallelism.loops import Loop, enclosing_loops
from traceview.parallelism.mpmd import MeasuredSchedule
from traceview.parallelism.p2p import partner, send_recv_note
from traceview.parallelism.ring import in_backward, ring_passes
from traceview.parallelism.roles import Classified
from traceview.parallelism.scans import LoopReading, read_loop, spmd_schedule
from traceview.parallelism.spmd_bubble import SpmdBubble
from traceview.parsers.hlo.model import HloModule, Shape

KV_PASS, KV_GATHER, STAGE_PASS, DISPATCH = "K/V ring pass", "K/V all-gather", "stage activation pass", \
    "expert all-to-all"
KV_SCATTER, KV_GRAD_PASS = "K/V gradient reduce-scatter", "K/V gradient ring pass"


@dataclass
class PipelineFinding:
    stages: int
    microbatches: int | None
    bubble_fraction: float | None
    how: str
    schedule: MeasuredSchedule | None = None    # a program per stage: the bubble measured in the trace
    schedule_name: str | None = None            # GPipe, 1F1B, interleaved; None: not read
    virtual_stages: int = 1                     # v: an interleaved schedule's model chunks per stage
    loop: tuple[str, str, int] | None = None    # an SPMD schedule's loop: (module, body, trips)
    measured: SpmdBubble | None = None          # an SPMD schedule's bubble measured from its ticks in the trace

    @property
    def formula_bubble_fraction(self) -> float | None:
        """The named schedule's bubble with equal stages and no gaps: (p - 1)/(v·m + p - 1) (v = 1 for GPipe
        and 1F1B); an SPMD schedule's bubble, a measured schedule's reference."""
        if not self.microbatches:
            return None
        return (self.stages - 1) / (self.virtual_stages * self.microbatches + self.stages - 1)


def measured_pipeline(schedule: MeasuredSchedule) -> PipelineFinding:
    """The finding of a pipeline whose stages run their own programs, as the trace measured it."""
    return PipelineFinding(schedule.p, schedule.microbatches, schedule.bubble_fraction, schedule.how(), schedule,
                           schedule.schedule_name, schedule.virtual_stages)


@dataclass
class Structures:
    context: dict[str, ContextFinding] = field(default_factory=dict)      # axis label -> finding
    pipeline: dict[str, PipelineFinding] = field(default_factory=dict)
    expert: dict[str, ExpertFinding] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)            # axis label -> evidence of no role


@dataclass
class _Reading:
    """What the walk over the collectives needs per module, and what it found so far."""
    modules: dict[str, HloModule]
    weights: dict[str, set[tuple[int, ...]]]
    state: dict[str, set[tuple[int, ...]]] = field(default_factory=dict)     # the state's weights only
    loops: dict[str, dict[str, Loop]] = field(default_factory=dict)
    routed: dict[str, bool] = field(default_factory=dict)
    pipeline_loops: dict[str, list[tuple[Loop, Classified, LoopReading]]] = field(default_factory=dict)
    kv_rows: dict[str, list[tuple[Classified, Loop | None, bool]]] = field(default_factory=dict)
    out: Structures = field(default_factory=Structures)

    def loops_of(self, module: HloModule) -> dict[str, Loop]:
        if module.name not in self.loops:
            self.loops[module.name] = enclosing_loops(module)
        return self.loops[module.name]


def read_structures(rows: list[Classified], modules: dict[str, HloModule], weights: dict[str, set[tuple[int, ...]]],
                    sizes: dict[str, int]) -> Structures:
    """Re-label the structural collectives of ``rows`` (in place) and read each strategy's figures per axis."""
    reading = _Reading(modules, weights)
    halves: list[tuple[Classified, str]] = []
    for row in rows:
        module = modules.get(row.attribution.site.module)
        if module is None or row.attribution.axes is None:
            continue
        sender = _sender(row, module)
        if row.pattern == "point-to-point" and sender is not None:
            halves.append((row, sender))         # a recv: read as its send is
        elif row.pattern == "point-to-point":
            _read_point_to_point(row, module, reading)
        elif row.attribution.site.kind == "all-gather" and row.attribution.site.instruction is not None:
            _read_gather(row, module, reading)
        elif row.pattern == "all-to-all" and _routes(module, reading.routed):
            row.pattern = DISPATCH
    out = reading.out
    patterns = {(r.attribution.site.module, r.attribution.site.name): r.pattern for r in rows}
    for row, sender in halves:
        row.pattern = patterns.get((row.attribution.site.module, sender), row.pattern)
    _kv_gradients(rows)
    for label, kv in reading.kv_rows.items():
        found_ctx = out.context.get(label)
        if found_ctx is not None:
            found_ctx.passes, found_ctx.bytes_per_pass, how = ring_passes(modules, kv)
            found_ctx.how = [found_ctx.how[0], how] if found_ctx.how else [how]
    for label, found in reading.pipeline_loops.items():
        found = [f for f in found if f[1].pattern == STAGE_PASS]
        if found:
            out.pipeline[label] = _pipeline(sizes.get(label, 1), found, modules)
    for label in {r.attribution.label for r in rows if r.pattern == STAGE_PASS} - set(out.pipeline):
        out.pipeline[label] = PipelineFinding(sizes.get(label, 1), None, None,
                                              "point-to-point outside any loop (a program per stage?): the bubble "
                                              "is each stage's idle time waiting on its neighbour, not read here")
    for label in {r.attribution.label for r in rows if r.pattern == DISPATCH}:
        mine = [r for r in rows if r.attribution.label == label and r.pattern == DISPATCH]
        out.expert[label] = _expert(modules, mine, weights)
    return out


def _kv_gradients(rows: list[Classified]) -> None:
    """The reduce-scatters that return gathered K/V's gradients (the backward of the gather, same array, same
    axes), and the backward pass's permutes of K/V-shaped gradients around the same ring: context
    parallelism's, not FSDP's nor unlabelled."""
    gathered = {(r.attribution.site.module, r.attribution.label, tuple(sorted(r.dims))) for r in rows
                if r.pattern == KV_GATHER}
    passed = {(r.attribution.site.module, r.attribution.label, tuple(sorted(r.dims))) for r in rows
              if r.pattern == KV_PASS}
    for r in rows:
        key = (r.attribution.site.module, r.attribution.label, tuple(sorted(r.dims)))
        if r.attribution.site.kind == "reduce-scatter" and key in gathered:
            r.pattern = KV_SCATTER
        elif r.pattern in ("point-to-point", STAGE_PASS) and key in passed and in_backward(r):
            r.pattern = KV_GRAD_PASS


def _sender(row: Classified, module: HloModule) -> str | None:
    """The send a recv receives from (the same channel, :func:`p2p.partner`), when the program holds it:
    the pair is one transfer, read once, from the send."""
    site = row.attribution.site
    if site.kind != "recv" or site.instruction is None:
        return None
    found = partner(module, site.computation, site.instruction)
    return found[1].name if found is not None else None


def _read_point_to_point(row: Classified, module: HloModule, reading: _Reading) -> None:
    """A K/V pass when what it delivers is read as the keys of an attention product (:mod:`kvflow`), whatever
    the loop around it; else, in a loop, a stage's activation pass (an SPMD schedule) unless the loop is a
    scan over layers (:mod:`scans`); a send/recv in a loop is read as the permute XLA split it from, outside
    any loop as programs per stage; else left unlabelled."""
    site = row.attribution.site
    loops = reading.loops_of(module)
    loop = loops.get(site.computation)
    block = block_of(_arrays(row))
    weights = reading.weights.get(module.name, set())
    attention, where = None, ""
    if block is not None:
        name = site.outer.name if site.outer is not None else site.name
        found = kv_reader(module, site.computation, name, block.dims[-1], 1, weights)
        if found is not None:
            attention, where = found
        elif loop is not None:          # a fused kernel reading blocks of its shape somewhere in the loop
            attention = attention_shape(module, loop_computations(module, loop, loops), block, weights)
            where = f"an attention product in loop {loop.name} reads blocks of its shape" if attention else ""
    if attention is not None:
        row.pattern = KV_PASS
        _add_context(reading.out, row.attribution.label, "ring", attention, row, loop, where)
        reading.kv_rows.setdefault(row.attribution.label, []).append((row, loop, _own_ring_loop(module, loop,
                                                                                                 loops, row)))
    elif loop is not None:
        read = read_loop(module, loop, loop_computations(module, loop, loops))
        scan = read.layer_scan()
        if scan is not None:
            reading.out.notes.setdefault(row.attribution.label, []).append(
                f"{site.name} runs inside loop {loop.name}, a scan over layers, not a pipeline: {scan.how}, "
                f"{scan.extent} layers, the loop runs {loop.trips} times")
            return
        row.pattern = STAGE_PASS
        reading.pipeline_loops.setdefault(row.attribution.label, []).append((loop, row, read))
    elif site.kind in ("send", "recv"):
        row.pattern = STAGE_PASS


def _activation(row: Classified) -> tuple[int, ...]:
    """The passed array's dimensions, unit dimensions dropped."""
    return tuple(d for d in row.dims if d != 1)


def _own_ring_loop(module: HloModule, loop: Loop | None, loops: dict[str, Loop], row: Classified) -> bool:
    """Whether the loop around a K/V pass is the ring's own (each iteration one more hop), not a layer scan
    the whole ring runs inside."""
    if loop is None:
        return False
    read = read_loop(module, loop, loop_computations(module, loop, loops))
    return read.layer_scan() is None


def _read_gather(row: Classified, module: HloModule, reading: _Reading) -> None:
    """K/V gathered along the sequence: the chip's queries against it. Judged against the state's weights
    only: every gathered array counts as a weight elsewhere."""
    site = row.attribution.site
    if module.name not in reading.state:
        reading.state[module.name] = weight_shapes(module, [])
    block = block_of(_arrays(row))
    found = kv_gather_reader(module, site.computation, site.name, block, reading.state[module.name])
    if found is None:
        return
    row.pattern = KV_GATHER
    _add_context(reading.out, row.attribution.label, "all-gather", found[0], row, None, found[1])


def kv_gather_reader(module: HloModule, computation: str, name: str, block: Shape | None,
                     weights: set[tuple[int, ...]] | None) -> tuple[AttentionShape, str] | None:
    """(the attention shape, where) when all-gather ``name``'s result is read as keys or values: followed
    through the program to an attention product (:func:`kvflow.kv_reader`), else by the dot that reads it
    (contracting the block's head dimension, its key side a whole number of blocks) or by a fused attention
    kernel (:func:`context.gathered_kv_kernel`); else None: the gather is then no K/V gather."""
    if block is None:
        return None
    flowed = kv_reader(module, computation, name, block.dims[-1] if block.dims else 0,
                       gather_group(module, computation, name), weights)
    if flowed is not None:
        return flowed
    dot = consuming_dot(module, computation, name)
    elements = math.prod(block.dims)
    if dot is not None and elements > 0 and is_attention_dot(dot, weights or set()) and dot.k == block.dims[-1] \
            and math.prod(dot.rhs) % elements == 0:
        return AttentionShape(dot.free("lhs"), dot.k, math.prod(dot.rhs) / elements), \
            f"{dot.name} contracts its head dimension against the chip's queries"
    kernel = gathered_kv_kernel(module, computation, name, block)
    return (kernel, "a fused attention kernel reads it as keys or values") if kernel is not None else None


def _routes(module: HloModule, seen: dict[str, bool]) -> bool:
    """Whether the module has a router (a top-k): without one an all-to-all reshards, it does not route."""
    if module.name not in seen:
        seen[module.name] = router(module).experts is not None
    return seen[module.name]


def _arrays(row: Classified) -> list[Shape]:
    """The array a collective moves (its first), as classified."""
    inst = row.attribution.site.instruction
    if row.dims:
        return [Shape(row.dtype, row.dims)]
    return arrays_of(inst.shape) if inst is not None else []


def _add_context(out: Structures, label: str, style: str, attention: AttentionShape, row: Classified,
                 loop: Loop | None, where: str = "") -> None:
    block = _arrays(row)[0]
    found = out.context.get(label)
    if found is None:
        out.context[label] = ContextFinding(style, attention, element_bytes(block), 0.0,
                                            loop.trips if loop is not None else None,
                                            [f"{row.attribution.site.name}: {where}"] if where else [])
        found = out.context[label]
    if found.style == style and (loop is None or found.passes == loop.trips) and not in_backward(row):
        found.bytes_per_pass += row.bytes       # the forward pass's K and V blocks


def _pipeline(stages: int, found: list[tuple[Loop, Classified, LoopReading]],
              modules: dict[str, HloModule]) -> PipelineFinding:
    trips = Counter(loop.trips for loop, _, _ in found if loop.trips)
    if not trips:
        return PipelineFinding(stages, None, None, "the loop passing activations to the next stage has no known "
                                                   "trip count: microbatches unknown")
    n, _ = trips.most_common(1)[0]
    loop, row, read = next(f for f in found if f[0].trips == n)
    if n < stages:
        return PipelineFinding(stages, None, None, f"loop {loop.name} runs {n} times, fewer than the {stages} "
                                                   "stages: not a v·m + p - 1 schedule")
    schedule = spmd_schedule(read, stages, _activation(row))
    m, v = schedule.microbatches, schedule.virtual_stages
    evidence = "; ".join(schedule.evidence)
    how = (f"SPMD pipeline, {schedule.name} schedule: loop {loop.name} runs n = {'v·' if v > 1 else ''}m + p - 1 "
           f"= {n} times, passing activations to the next stage each time; p = {stages} stages (the axis size)"
           + (f", v = {v} virtual stages per device (the stage's weights stacked [{v}, ...] and indexed per tick)"
              if v > 1 else "")
           + f", so m = {m} microbatches and the bubble {schedule.formula}" + (f" ({evidence})" if evidence else "")
           + send_recv_note(modules.get(row.attribution.site.module), loop,
                            [r.attribution.site.instruction for lp, r, _ in found if lp == loop], n - stages + 1))
    return PipelineFinding(stages, m, schedule.bubble_fraction, how, None, schedule.name, v,
                           (row.attribution.site.module, loop.body, n))


def _expert(modules: dict[str, HloModule], rows: list[Classified],
            weights: dict[str, set[tuple[int, ...]]]) -> ExpertFinding:
    module = modules[rows[0].attribution.site.module]
    routing = router(module)
    first = rows[0]
    arrays = _arrays(first) if first.dims else []
    d_model = arrays[0].dims[-1] if arrays and arrays[0].dims else None
    inst = first.attribution.site.instruction
    elements = sum(int(byte_size(a) / max(element_bytes(a), 1e-9)) for a in
                   (arrays_of(inst.shape) if inst is not None else []))
    ffn = None
    if d_model:
        for row in rows:
            ffn = expert_width(module, row.attribution.site.computation, row.attribution.site.name, d_model)
            if ffn:
                break
        ffn = ffn or weight_width(module, weights.get(module.name, set()), d_model, routing.experts)
    forward = [r for r in rows if not in_backward(r)]
    how = (f"{len(rows)} all-to-all(s) ({len(forward)} in the forward pass: dispatch and combine); "
           f"{routing.how}")
    return ExpertFinding(routing, d_model, capacity(elements, routing.experts, d_model), ffn,
                         element_bytes(arrays[0]) if arrays else 4.0,
                         float(sum(r.bytes for r in forward[:2])), how)
