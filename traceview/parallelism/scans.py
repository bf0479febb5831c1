"""What a loop carries and reads: a scan over layers, or a pipeline's schedule.

Both run a collective-permute inside a while loop; what tells them apart is what the loop indexes each
iteration. The body's ``dynamic-slice``/``gather`` of a loop-invariant carry element that came from an entry
parameter (the program's weights or inputs, through copies, bitcasts, gathers and outer loops) reads one
slice of a stacked buffer per iteration:

* a **layer scan** indexes stacked per-layer weights and runs once per layer: a stacked buffer whose
  extent equals the trip count;
* a **pipeline** passes a per-stage activation to the next stage each tick and runs n = v·m + p − 1 times:
  its stacked buffers are the microbatches (slices shaped as the passed activation, extent m) and, for an
  interleaved (circular) schedule, the stage's v virtual stages' weights (extent v, not the trip count).
  Without such weights the schedule is GPipe's (v = 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from traceview.parallelism.loops import Loop
from traceview.parsers.hlo.model import HloModule, Instruction

BACK = frozenset(("bitcast", "copy", "convert", "reshape", "get-tuple-element", "tuple", "all-gather",
                  "all-gather-done", "all-gather-start", "copy-start", "copy-done", "optimization-barrier",
                  "async-done", "async-start", "transpose"))
MAX_WALK = 4096


@dataclass
class Stacked:
    """A stacked buffer the loop indexes once per iteration."""
    element: int                     # the carry's tuple index
    dims: tuple[int, ...]            # the stacked buffer's dimensions
    extent: int                      # the indexed dimension's size
    slice_dims: tuple[int, ...]      # one slice, unit dimensions dropped
    how: str


@dataclass
class LoopReading:
    loop: Loop
    stacked: list[Stacked] = field(default_factory=list)

    def weights(self, activation: tuple[int, ...]) -> list[Stacked]:
        """Stacked buffers that are not microbatches (their slice is not shaped as the passed activation)."""
        return [s for s in self.stacked if s.slice_dims != activation]

    def microbatches(self, activation: tuple[int, ...]) -> list[Stacked]:
        return [s for s in self.stacked if s.slice_dims == activation]

    def layer_scan(self) -> Stacked | None:
        """The stacked per-layer buffer this loop runs once per layer over, if it is a layer scan: a pipeline's
        stacked buffers (m microbatches, v virtual stages) are always fewer than its v·m + p − 1 ticks."""
        trips = self.loop.trips
        return next((s for s in self.stacked if trips and s.extent == trips), None)


def _squeezed(dims) -> tuple[int, ...]:
    return tuple(d for d in dims if d != 1)


def read_loop(module: HloModule, loop: Loop, computations: set[str]) -> LoopReading:
    """The stacked, loop-invariant buffers that came from the entry's parameters and that the loop's body
    (``computations``: the body and what it calls, not nested loops) indexes per iteration."""
    reading = LoopReading(loop)
    body = module.computations.get(loop.body)
    caller = module.computations.get(loop.computation)
    if body is None or caller is None:
        return reading
    invariant = _invariant_elements(body)
    while_inst = caller.by_name().get(loop.name)
    init = caller.by_name().get(while_inst.operands[0]) if while_inst and while_inst.operands else None
    for name in computations:
        comp = module.computations.get(name)
        if comp is None:
            continue
        shapes = {i.name: i.shape for i in comp.instructions}
        for inst in comp.instructions:
            if inst.opcode not in ("dynamic-slice", "gather") or not inst.operands:
                continue
            operand = shapes.get(inst.operands[0])
            if operand is None or operand.is_tuple or len(operand.dims) < 2:
                continue
            cut = [i for i, (a, b) in enumerate(zip(operand.dims, inst.shape.dims)) if b == 1 and a > 1]
            if len(cut) != 1 or math.prod(inst.shape.dims) * operand.dims[cut[0]] != math.prod(operand.dims):
                continue
            element = _carry_element(module, comp.name, inst.operands[0], loop.body)
            if element is None or element not in invariant or init is None:
                continue
            if not _from_parameter(module, caller.name, init, (element,)):
                continue
            reading.stacked.append(Stacked(element, tuple(operand.dims), operand.dims[cut[0]],
                                           _squeezed(inst.shape.dims),
                                           f"{inst.name} in {comp.name} takes one slice of carry element {element} "
                                           f"{list(operand.dims)} per iteration"))
    return reading


def _invariant_elements(body) -> set[int]:
    """Carry elements the body passes on unchanged (root operand j is element j of the body's parameter)."""
    insts = body.by_name()
    root = insts.get(body.root or "")
    if root is None or root.opcode != "tuple":
        return set()
    out = set()
    for j, name in enumerate(root.operands):
        inst = insts.get(name)
        while inst is not None and inst.opcode in ("copy", "bitcast") and inst.operands:
            inst = insts.get(inst.operands[0])
        if inst is not None and inst.opcode == "get-tuple-element" and inst.typed.index == j \
                and inst.operands and insts.get(inst.operands[0]) is not None and \
                insts[inst.operands[0]].opcode == "parameter":
            out.add(j)
    return out


def _carry_element(module: HloModule, comp_name: str, name: str, body: str) -> int | None:
    """The loop carry element a value in the body (or in a fusion it calls) is, through views; None if none."""
    for _ in range(64):
        comp = module.computations.get(comp_name)
        if comp is None:
            return None
        inst = comp.by_name().get(name)
        if inst is None:
            return None
        if inst.opcode == "parameter":
            if comp_name == body:
                return None                       # the whole carry, not one element
            caller = _fusion_caller(module, comp_name)
            number = inst.typed.parameter_number
            if caller is None or not 0 <= number < len(caller[1].operands):
                return None
            comp_name, name = caller[0], caller[1].operands[number]
            continue
        if inst.opcode == "get-tuple-element" and comp_name == body and inst.operands:
            source = comp.by_name().get(inst.operands[0])
            if source is not None and source.opcode == "parameter":
                return inst.typed.index
        if inst.opcode in ("bitcast", "copy", "reshape", "convert", "get-tuple-element") and inst.operands:
            name = inst.operands[0]
            continue
        return None
    return None


def _fusion_caller(module: HloModule, comp_name: str) -> tuple[str, Instruction] | None:
    for comp in module.computations.values():
        for inst in comp.instructions:
            if inst.opcode in ("fusion", "call") and inst.called_computations[:1] == [comp_name]:
                return comp.name, inst
    return None


def _from_parameter(module: HloModule, comp_name: str, inst: Instruction, path: tuple[int, ...]) -> bool:
    """Whether the value at ``path`` of ``inst``'s result comes from an entry parameter (through views,
    tuples, gathers and the carries of enclosing loops)."""
    steps = 0
    while steps < MAX_WALK:
        steps += 1
        comp = module.computations.get(comp_name)
        if comp is None:
            return False
        names = comp.by_name()
        if inst.opcode == "parameter":
            if comp.is_entry:
                return True
            outer = _loop_caller(module, comp_name)          # a loop body's carry: the while's init
            if outer is None:
                return False
            comp_name, while_inst = outer
            init = module.computations[comp_name].by_name().get(while_inst.operands[0]) \
                if while_inst.operands else None
            if init is None:
                return False
            inst = init
            continue
        if inst.opcode == "tuple" and path:
            if not 0 <= path[0] < len(inst.operands) or inst.operands[path[0]] not in names:
                return False
            inst, path = names[inst.operands[path[0]]], path[1:]
            continue
        if inst.opcode == "get-tuple-element" and inst.operands and inst.operands[0] in names:
            path = (max(0, inst.typed.index),) + path
            inst = names[inst.operands[0]]
            continue
        if (inst.opcode in BACK or _copy_fusion(inst)) and inst.operands and inst.operands[0] in names and not path:
            inst = names[inst.operands[0]]
            continue
        return False
    return False


def _copy_fusion(inst: Instruction) -> bool:
    """A fusion of one operand that keeps its elements (XLA wraps a layout copy in one)."""
    return inst.opcode == "fusion" and len(inst.operands) == 1 and not inst.shape.is_tuple


def _loop_caller(module: HloModule, body: str) -> tuple[str, Instruction] | None:
    for comp in module.computations.values():
        for inst in comp.instructions:
            if inst.opcode == "while" and len(inst.called_computations) > 1 and inst.called_computations[1] == body:
                return comp.name, inst
    return None


@dataclass
class Schedule:
    """An SPMD pipeline's schedule read from its loop."""
    name: str                        # "GPipe" | "interleaved"
    microbatches: int | None
    virtual_stages: int
    bubble_fraction: float | None    # (p − 1)/(v·m + p − 1)
    formula: str
    evidence: list[str]


def spmd_schedule(reading: LoopReading, stages: int, activation: tuple[int, ...]) -> Schedule:
    """GPipe (n = m + p − 1) or interleaved (n = v·m + p − 1, the stage's weights stacked [v, ...] and indexed
    per tick), from the loop's trip count n and what it indexes."""
    n, p = reading.loop.trips, stages
    evidence = [s.how + f": {'microbatches' if s.slice_dims == activation else 'stage weights'}"
                for s in reading.stacked]
    if not n:
        return Schedule("unknown", None, 1, None, "", evidence + ["the loop's trip count is not known"])
    virtual = [s for s in reading.weights(activation) if 1 < s.extent != n and (n - p + 1) % s.extent == 0]
    v = virtual[0].extent if virtual else 1
    m = (n - p + 1) // v
    name = "interleaved" if v > 1 else "GPipe"
    formula = f"(p - 1)/(v·m + p - 1) = {p - 1}/({v}·{m} + {p - 1})" if v > 1 else \
        f"(p - 1)/(m + p - 1) = {p - 1}/({m} + {p - 1})"
    fed = reading.microbatches(activation)
    if fed and fed[0].extent != m:
        evidence.append(f"the microbatch buffer holds {fed[0].extent} microbatches, the trip count gives {m}")
    return Schedule(name, m if m >= 1 else None, v, (p - 1) / n if m >= 1 else None, formula, evidence)
