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
from traceview.parallelism.loops import Loop, enclosing_loops
from traceview.parallelism.mpmd import MeasuredSchedule
from traceview.parallelism.roles import Classified
from traceview.parsers.hlo_model import HloModule, Shape

KV_PASS, KV_GATHER, STAGE_PASS, DISPATCH = "K/V ring pass", "K/V all-gather", "stage activation pass", \
    "expert all-to-all"


@dataclass
class PipelineFinding:
    stages: int
    microbatches: int | None
    bubble_fraction: float | None
    how: str
    schedule: MeasuredSchedule | None = None    # a program per stage: the bubble measured in the trace

    @property
    def formula_bubble_fraction(self) -> float | None:
        """(p - 1)/(m + p - 1): an SPMD schedule's bubble, a measured schedule's reference."""
        if not self.microbatches:
            return None
        return (self.stages - 1) / (self.microbatches + self.stages - 1)


def measured_pipeline(schedule: MeasuredSchedule) -> PipelineFinding:
    """The finding of a pipeline whose stages run their own programs, as the trace measured it."""
    return PipelineFinding(schedule.p, schedule.microbatches, schedule.bubble_fraction, schedule.how(), schedule)


@dataclass
class Structures:
    context: dict[str, ContextFinding] = field(default_factory=dict)      # axis label -> finding
    pipeline: dict[str, PipelineFinding] = field(default_factory=dict)
    expert: dict[str, ExpertFinding] = field(default_factory=dict)


@dataclass
class _Reading:
    """What the walk over the collectives needs per module, and what it found so far."""
    modules: dict[str, HloModule]
    weights: dict[str, set[tuple[int, ...]]]
    state: dict[str, set[tuple[int, ...]]] = field(default_factory=dict)     # the state's weights only
    loops: dict[str, dict[str, Loop]] = field(default_factory=dict)
    routed: dict[str, bool] = field(default_factory=dict)
    pipeline_loops: dict[str, list[tuple[Loop, Classified]]] = field(default_factory=dict)
    out: Structures = field(default_factory=Structures)


def read_structures(rows: list[Classified], modules: dict[str, HloModule], weights: dict[str, set[tuple[int, ...]]],
                    sizes: dict[str, int]) -> Structures:
    """Re-label the structural collectives of ``rows`` (in place) and read each strategy's figures per axis."""
    reading = _Reading(modules, weights)
    for row in rows:
        module = modules.get(row.attribution.site.module)
        if module is None or row.attribution.axes is None:
            continue
        if row.pattern == "point-to-point":
            _read_point_to_point(row, module, reading)
        elif row.attribution.site.kind == "all-gather" and row.attribution.site.instruction is not None:
            _read_gather(row, module, reading)
        elif row.pattern == "all-to-all" and _routes(module, reading.routed):
            row.pattern = DISPATCH
    out = reading.out
    for label, found in reading.pipeline_loops.items():
        out.pipeline[label] = _pipeline(sizes.get(label, 1), found)
    for label in {r.attribution.label for r in rows if r.pattern == STAGE_PASS} - set(out.pipeline):
        out.pipeline[label] = PipelineFinding(sizes.get(label, 1), None, None,
                                              "point-to-point outside any loop (a program per stage?): the bubble "
                                              "is each stage's idle time waiting on its neighbour, not read here")
    for label in {r.attribution.label for r in rows if r.pattern == DISPATCH}:
        mine = [r for r in rows if r.attribution.label == label and r.pattern == DISPATCH]
        out.expert[label] = _expert(modules, mine, weights)
    return out


def _read_point_to_point(row: Classified, module: HloModule, reading: _Reading) -> None:
    """A K/V pass when its loop computes attention on blocks of its shape, else a stage's activation pass
    (in a loop: an SPMD schedule; send/recv: programs per stage); else left unlabelled."""
    site = row.attribution.site
    if module.name not in reading.loops:
        reading.loops[module.name] = enclosing_loops(module)
    loops = reading.loops[module.name]
    loop = loops.get(site.computation)
    block = block_of(_arrays(row))
    attention = None
    if loop is not None and block is not None:
        attention = attention_shape(module, loop_computations(module, loop, loops), block,
                                    reading.weights.get(module.name, set()))
    if attention is not None:
        row.pattern = KV_PASS
        _add_context(reading.out, row.attribution.label, "ring", attention, row, loop)
    elif loop is not None or site.kind in ("send", "recv"):
        row.pattern = STAGE_PASS
        if loop is not None:
            reading.pipeline_loops.setdefault(row.attribution.label, []).append((loop, row))


def _read_gather(row: Classified, module: HloModule, reading: _Reading) -> None:
    """K/V gathered along the sequence: the chip's queries against it. Judged against the state's weights
    only: every gathered array counts as a weight elsewhere."""
    site = row.attribution.site
    if module.name not in reading.state:
        reading.state[module.name] = weight_shapes(module, [])
    block = block_of(_arrays(row))
    attention = kv_gather_reader(module, site.computation, site.name, block, reading.state[module.name])
    if attention is None:
        return
    row.pattern = KV_GATHER
    _add_context(reading.out, row.attribution.label, "all-gather", attention, row, None)


def kv_gather_reader(module: HloModule, computation: str, name: str, block: Shape | None,
                     weights: set[tuple[int, ...]] | None) -> AttentionShape | None:
    """The attention shape when all-gather ``name``'s result is read as keys: by an attention dot
    (contracting the block's head dimension, its key side a whole number of blocks: the chip's queries are
    the dot's query-side free extent) or by a fused attention kernel (:func:`context.gathered_kv_kernel`);
    else None: the gather is then no K/V gather."""
    if block is None:
        return None
    dot = consuming_dot(module, computation, name)
    elements = math.prod(block.dims)
    if dot is not None and elements > 0 and is_attention_dot(dot, weights or set()) and dot.k == block.dims[-1] \
            and math.prod(dot.rhs) % elements == 0:
        return AttentionShape(dot.free("lhs"), dot.k, math.prod(dot.rhs) / elements)
    return gathered_kv_kernel(module, computation, name, block)


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


def _in_backward(row: Classified) -> bool:
    """A collective of the backward pass (JAX names it ``transpose(jvp(...))``)."""
    inst = row.attribution.site.instruction
    return "transpose(" in (inst.metadata.get("op_name", "") if inst is not None else "")


def _add_context(out: Structures, label: str, style: str, attention: AttentionShape, row: Classified,
                 loop: Loop | None) -> None:
    block = _arrays(row)[0]
    found = out.context.get(label)
    if found is None:
        out.context[label] = ContextFinding(style, attention, element_bytes(block), 0.0,
                                            loop.trips if loop is not None else None)
        found = out.context[label]
    if found.style == style and (loop is None or found.passes == loop.trips) and not _in_backward(row):
        found.bytes_per_pass += row.bytes       # the forward pass's K and V blocks


def _pipeline(stages: int, found: list[tuple[Loop, Classified]]) -> PipelineFinding:
    trips = Counter(loop.trips for loop, _ in found if loop.trips)
    if not trips:
        return PipelineFinding(stages, None, None, "the loop passing activations to the next stage has no known "
                                                   "trip count: microbatches unknown")
    n, _ = trips.most_common(1)[0]
    loop = next(lp for lp, _ in found if lp.trips == n)
    m = n - stages + 1
    if m < 1:
        return PipelineFinding(stages, None, None, f"loop {loop.name} runs {n} times, fewer than the {stages} "
                                                   "stages: not an m + p - 1 schedule")
    return PipelineFinding(stages, m, (stages - 1) / n,
                           f"SPMD pipeline: loop {loop.name} runs n = m + p - 1 = {n} times, passing activations "
                           f"to the next stage each time; p = {stages} stages (the axis size), so m = {m} "
                           f"microbatches and the bubble (p - 1)/(m + p - 1) = {stages - 1}/{n}")


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
    forward = [r for r in rows if not _in_backward(r)]
    how = (f"{len(rows)} all-to-all(s) ({len(forward)} in the forward pass: dispatch and combine); "
           f"{routing.how}")
    return ExpertFinding(routing, d_model, capacity(elements, routing.experts, d_model), ffn,
                         element_bytes(arrays[0]) if arrays else 4.0,
                         float(sum(r.bytes for r in forward[:2])), how)
