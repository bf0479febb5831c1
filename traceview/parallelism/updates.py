"""Which values of a training step's entry computation feed the update of its state: the gradients.

A collective's shape alone cannot always say whether it moves a gradient or an activation: with T tokens per
chip and a weight shard of T rows, a tensor-parallel activation [T, D] and the weight gradient [T, D] are the
same array type (T = D, T = F/Y, a gathered weight of T rows: common at real sizes, such as 4,096 tokens per
chip on a model of D = 4,096). The data flow can: a step's update reads each state parameter and its
gradient, element by element, and writes the new value as a result of the step (``p - lr * g``, or an
optimizer's fused update of the parameter and its moments). Walking back from the updates through such
element-wise work (copies, converts, element-wise fusions, the collectives themselves) reaches the gradients'
collectives and stops where a gradient is made (a dot, a reduction, a loop, a library call); an activation's
collective is not reached (it feeds dots).

Only the entry computation is walked: a collective inside a loop body or a called computation is not
judged here (None: the shape rule stands).
"""

from __future__ import annotations

from dataclasses import dataclass

from traceview.cost.shapes import leaves
from traceview.parallelism.memo import ModuleMemo
from traceview.parsers.hlo.model import Computation, HloModule, Instruction

# where a value is made rather than passed along: the walk back from an update stops here
MAKERS = frozenset({"dot", "convolution", "custom-call", "reduce", "reduce-window", "while", "call", "conditional",
                    "sort", "scatter", "gather", "fft", "triangular-solve", "cholesky", "rng", "select-and-scatter",
                    "dynamic-slice", "dynamic-update-slice", "parameter", "constant", "iota", "infeed", "recv",
                    "recv-done", "all-to-all", "collective-permute", "collective-permute-start",
                    "collective-permute-done"})
# values passed along unchanged in shape or layout (walked through in both directions of an update's chain)
THROUGH = frozenset({"get-tuple-element", "tuple", "bitcast", "copy", "copy-start", "copy-done", "convert",
                     "reshape", "transpose", "optimization-barrier", "all-reduce-done", "reduce-scatter-done",
                     "async-done", "async-start"})
WALK_LIMIT = 200_000     # instructions visited per module: a bound for hostile input


# what a weight passes through on its way from the state to a dot: gathered, sliced (a scanned layer's)
CARRY_WEIGHT = THROUGH | {"all-gather", "all-gather-start", "all-gather-done", "dynamic-slice", "slice"}


@dataclass(frozen=True)
class Updates:
    """The entry computation's state updates, the parameters they update, and the instructions whose values
    flow into them."""
    computation: str
    updates: frozenset[str]
    feeding: frozenset[str]
    state: frozenset[str] = frozenset()

    def feeds_update(self, computation: str, name: str) -> bool | None:
        """Whether instruction ``name`` of ``computation`` feeds an update; None outside the entry."""
        if computation != self.computation:
            return None
        return name in self.feeding


def _dims(inst: Instruction) -> tuple[int, ...] | None:
    arrays = leaves(inst.shape)
    return tuple(arrays[0].dims) if len(arrays) == 1 else None


def _fused_makes(module: HloModule, inst: Instruction) -> bool:
    """A fusion that makes a value (contains a maker): a matmul or reduction fusion, not an element-wise one."""
    for name in inst.called_computations:
        comp = module.computations.get(name)
        if comp is None:
            return True
        if any(i.opcode in MAKERS and i.opcode not in ("parameter", "constant", "iota") for i in comp.instructions):
            return True
    return False


def _writes_in_place(module: HloModule, inst: Instruction) -> bool:
    """A scatter or dynamic-update-slice (or a fusion of one): its result is its first operand, updated."""
    if inst.opcode in ("scatter", "dynamic-update-slice"):
        return True
    if inst.opcode != "fusion":
        return False
    return any(i.opcode in ("scatter", "dynamic-update-slice") for name in inst.called_computations
               if (comp := module.computations.get(name)) is not None for i in comp.instructions)


def _loop_init(inst: Instruction, by_name: dict[str, Instruction]) -> str | None:
    """For an element of a while loop's result, the same element of the tuple the loop started from."""
    if inst.opcode != "get-tuple-element" or not inst.operands:
        return None
    loop = by_name.get(inst.operands[0])
    if loop is None or loop.opcode != "while" or not loop.operands:
        return None
    init = by_name.get(loop.operands[0])
    index = inst.typed.index
    if init is None or init.opcode != "tuple" or not 0 <= index < len(init.operands):
        return None
    return init.operands[index]


def _outputs(entry: Computation, by_name: dict[str, Instruction]) -> list[Instruction]:
    """The instructions that produce the step's results (through tuples, copies and bitcasts)."""
    root = by_name.get(entry.root or "")
    out, stack, seen = [], [root] if root is not None else [], set()
    while stack:
        inst = stack.pop()
        if inst.name in seen:
            continue
        seen.add(inst.name)
        if inst.opcode in ("tuple", "bitcast", "copy", "copy-done", "optimization-barrier"):
            stack += [by_name[o] for o in inst.operands if o in by_name]
        else:
            out.append(inst)
    return out


def _find_updates(module: HloModule) -> Updates | None:
    """The updates of a training step (results computed element-wise from a parameter of the same shape) and
    what feeds them; None when the entry computation updates no state (an inference or a helper program)."""
    entry = module.entry_computation()
    if entry is None:
        return None
    by_name = entry.by_name()
    params = {i.name for i in entry.instructions if i.opcode == "parameter" and _dims(i)}
    updates, state = [], set()
    for out in _outputs(entry, by_name):
        dims = _dims(out)
        if dims is None or len(dims) < 2 or out.opcode in MAKERS:
            continue
        if out.opcode == "fusion" and _fused_makes(module, out):
            continue
        updated = [o for o in out.operands if o in params and _dims(by_name[o]) == dims]
        if updated:
            updates.append(out)
            state.update(updated)
    if not updates:
        return None
    feeding: set[str] = set()
    stack = [o for u in updates for o in u.operands if o not in params]
    while stack and len(feeding) < WALK_LIMIT:
        name = stack.pop()
        if name in feeding or name not in by_name:
            continue
        feeding.add(name)
        inst = by_name[name]
        carried = _loop_init(inst, by_name)
        if carried is not None:      # a loop's result: the buffer it started from has the gradient's size too
            stack.append(carried)
        if inst.opcode in MAKERS or (inst.opcode == "fusion" and _fused_makes(module, inst)):
            if _writes_in_place(module, inst):       # the buffer a scatter adds into is the gradient's too
                stack += [o for o in inst.operands if o in by_name and _dims(by_name[o]) == _dims(inst)]
            continue
        stack += inst.operands
    return Updates(entry.name, frozenset(u.name for u in updates), frozenset(feeding), frozenset(state))


def _weight_values(module: HloModule) -> frozenset[tuple[str, str]] | None:
    """(computation, instruction) of the values that are the state's weights: the updated parameters, followed
    through copies, gathers and slices, and into the fusions that read them (the fused parameter and what it
    passes through). What a dot reads from here is a weight, whatever its shape. None without updates."""
    found = find_updates(module)
    entry = module.computations.get(found.computation) if found is not None else None
    if found is None or entry is None:
        return None
    weights = set(found.state)
    by_name = entry.by_name()
    for _ in range(2):           # a second pass for instructions listed before their operands
        for inst in entry.instructions:
            if inst.name in weights or not inst.operands:
                continue
            if inst.opcode in CARRY_WEIGHT and inst.operands[0] in weights:
                weights.add(inst.name)
            elif inst.opcode == "fusion" and not _fused_makes(module, inst) and any(
                    o in weights and o in by_name and _dims(by_name[o]) == _dims(inst) for o in inst.operands):
                weights.add(inst.name)      # a fused convert or copy of a weight (or its update)
    out = {(entry.name, w) for w in weights}
    for inst in entry.instructions:
        if inst.opcode != "fusion" or not inst.called_computations:
            continue
        read = {i for i, o in enumerate(inst.operands) if o in weights}
        fused = module.computations.get(inst.called_computations[0])
        if not read or fused is None:
            continue
        inner = {i.name for i in fused.instructions if i.opcode == "parameter" and i.typed.parameter_number in read}
        for i in fused.instructions:
            if i.name not in inner and i.opcode in CARRY_WEIGHT and i.operands and i.operands[0] in inner:
                inner.add(i.name)
        out |= {(fused.name, n) for n in inner}
    return frozenset(out)


# the roles, the per-chip batch, the widths and the what-if baseline each ask about the same module
find_updates = ModuleMemo(_find_updates)
weight_values = ModuleMemo(_weight_values)
