"""Kernels launched inside XLA command buffers (CUDA graphs), put back on the HLO instructions that launched them.

JAX on NVIDIA GPUs runs most of a program as command buffers: XLA records a
sequence of thunks once as a CUDA graph and replays it. The profiler then
labels every kernel of the graph with one pseudo-op, the command buffer thunk
(``hlo_op = command_buffer_1``), which is no HLO instruction, so nothing in the
trace can be costed. The kernels themselves are still there, one event each,
in the order the graph runs them, and the program's HLO lists the
instructions in the same (schedule) order. Two facts put them together:

* **XLA's own kernels are named after their instruction**: the fusion
  ``loop_broadcast_fusion.1`` launches ``loop_broadcast_fusion_1`` (``.`` and
  ``-`` become ``_``). Identical fusions share one compiled kernel, named
  after the first of them in the schedule, so a kernel name stands for every
  instruction of the same signature (name stem, fusion kind, result and
  operand shapes); which one ran is the next of them in schedule order.
* **Library kernels** (cuBLAS ``nvjet_*``/``sm90_xmma_*``, cuDNN, NCCL,
  memcpy and memset nodes) carry library names. They sit between two placed
  XLA kernels, so they belong to the instructions that are not XLA kernels
  (custom calls, copies, collectives, library fusions) between those two
  instructions, in order. A memset node belongs to the call it prepares (the
  next kernel's instruction). Several library kernels of one call (a GEMM and
  its split-K reduction) stay on one instruction; a second main GEMM,
  convolution or attention kernel, or a kernel name repeated, starts the next.

A kernel that cannot be placed keeps the command buffer's name, and the
caller reports how many kernels and how much time stayed unattributed, and
why. The placement is computed once per distinct kernel sequence: a step
replayed a thousand times costs one alignment.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from traceview.parsers.hlo.model import Computation, HloModule, Instruction

# Opcodes that launch nothing on the device (views, tuples, parameters, control markers).
_NO_KERNEL = frozenset({
    "parameter", "constant", "bitcast", "get-tuple-element", "tuple", "after-all", "add-dependency",
    "opt-barrier", "partition-id", "replica-id", "domain",
})
# Opcodes whose computations run as control flow (their instructions launch kernels of their own).
_CONTROL_FLOW = frozenset({"while", "conditional", "call", "async-start"})
# XLA's own fusion kinds: their kernel is named after the fusion.
_XLA_FUSION_KINDS = frozenset({"kLoop", "kInput", "kOutput"})
_COPY_OPCODES = frozenset({"copy", "copy-start", "copy-done"})
_MEMSET = re.compile(r"memset", re.I)
_MEMCPY = re.compile(r"memcpy", re.I)
# Kernels that do a library call's main work: a second one in a row starts the next call.
_MAIN_KERNEL = re.compile(r"nvjet|gemm|xmma|cutlass|cudnn|fmha|flash|sdpa|conv|wgrad|dgrad|nccl|cub::", re.I)
_SUFFIX = re.compile(r"_\d+$")


def kernel_key(name: str) -> str:
    """How XLA spells an instruction's name as a kernel name (``fusion.3`` -> ``fusion_3``)."""
    return name.replace(".", "_").replace("-", "_")


@dataclass(frozen=True)
class _Slot:
    """One kernel-launching instruction: its computation, its place there, its name."""

    computation: str
    index: int
    name: str
    library: bool          # launched by something other than an XLA-named kernel (library, copy, collective)
    copy: bool
    control: bool = False  # a while / conditional / call: its kernels are those of the computations it runs


@dataclass
class KernelSchedule:
    """The instructions of one HLO module that launch kernels, in schedule order, with the lookups a
    placement needs."""

    slots: dict[str, list[_Slot]] = field(default_factory=dict)      # computation -> its slots in order
    children: dict[str, frozenset[str]] = field(default_factory=dict)  # computation -> those it runs as control flow
    run_by: dict[str, _Slot] = field(default_factory=dict)            # computation -> the control-flow slot running it
    by_key: dict[str, _Slot] = field(default_factory=dict)          # kernel_key(name) -> slot
    same_kernel: dict[str, list[_Slot]] = field(default_factory=dict)  # instruction name -> slots sharing its kernel
    instructions: frozenset[str] = frozenset()                       # every instruction name of those computations

    @classmethod
    def of(cls, module: HloModule) -> KernelSchedule:
        schedule = cls()
        signatures: dict[tuple, list[_Slot]] = {}
        slot_signature: dict[str, tuple] = {}
        computations = _control_flow_computations(module)
        for comp in computations:
            shapes = {inst.name: inst.shape for inst in comp.instructions}
            slots: list[_Slot] = []
            for inst in comp.instructions:
                if inst.opcode in _NO_KERNEL:
                    continue
                if inst.opcode in _CONTROL_FLOW:
                    control = _Slot(comp.name, len(slots), inst.name, library=False, copy=False, control=True)
                    slots.append(control)
                    schedule.run_by.update({name: control for name in inst.called_computations})
                    continue
                xla_kernel = inst.opcode == "fusion" and (inst.fusion_kind in _XLA_FUSION_KINDS
                                                          or not _library_fusion(inst))
                slot = _Slot(comp.name, len(slots), inst.name, library=not xla_kernel,
                             copy=inst.opcode in _COPY_OPCODES)
                slots.append(slot)
                schedule.by_key.setdefault(kernel_key(inst.name), slot)
                signature = (_SUFFIX.sub("", kernel_key(inst.name)), inst.opcode, inst.fusion_kind, inst.shape,
                             tuple(shapes.get(op) for op in inst.operands))
                signatures.setdefault(signature, []).append(slot)
                slot_signature[inst.name] = signature
            schedule.slots[comp.name] = slots
            schedule.children[comp.name] = frozenset(
                c for inst in comp.instructions if inst.opcode in _CONTROL_FLOW for c in inst.called_computations)
        schedule.same_kernel = {name: signatures[sig] for name, sig in slot_signature.items()}
        schedule.instructions = frozenset(inst.name for comp in computations for inst in comp.instructions)
        return schedule

    def xla_slot(self, kernel: str) -> _Slot | None:
        """The instruction an XLA kernel name was made from, None for a library kernel."""
        slot = self.by_key.get(kernel)
        return slot if slot is not None and not slot.library and not slot.control else None

    def choices(self, candidates: list[_Slot], current: str | None, last: dict[str, int]) -> list[_Slot]:
        """Which of the instructions sharing one kernel may have run next, likeliest first: the next one in the
        computation running now; the first one in a computation it runs or a sibling (a loop's body after its
        condition), from its start; the next one in a computation it returns to; the first (a new start)."""
        found: list[_Slot] = []
        if current is not None:
            found += [c for c in candidates if c.computation == current and c.index > last.get(current, -1)][:1]
            near = self.children.get(current, frozenset()) | frozenset(
                sibling for kids in self.children.values() if current in kids for sibling in kids)
            found += [c for c in candidates if c.computation != current and c.computation in near][:1]
        found += [c for c in candidates if c.computation != current and c.index > last.get(c.computation, -1)][:1]
        found.append(candidates[0])
        return list(dict.fromkeys(found))

    def continues(self, slot: _Slot, kernel: str | None) -> bool:
        """Whether ``kernel`` (None: library kernels only) can run after ``slot`` in the same computation."""
        if kernel is None:
            return any(s.library for s in self.slots[slot.computation][slot.index + 1:])
        first = self.xla_slot(kernel)
        return first is not None and any(c.computation == slot.computation and c.index > slot.index
                                         for c in self.same_kernel.get(first.name, [first]))


def _library_fusion(inst: Instruction) -> bool:
    """A fusion XLA hands to a library (cuDNN ``__cudnn$fusion``, cuBLAS ``__cublas$...`` fusions): its
    kernels have library names. Triton fusions (``__triton*``) are XLA-named."""
    config = inst.backend_config or ""
    return inst.fusion_kind == "kCustom" and ("__cudnn" in config or "__cublas" in config)


def _control_flow_computations(module: HloModule) -> list[Computation]:
    """The entry and every computation run as control flow from it (loop bodies and conditions, branches,
    calls): the computations whose instructions launch kernels; fused computations are left out."""
    entry = module.entry_computation()
    if entry is None:
        return []
    seen: dict[str, Computation] = {}
    todo = [entry]
    while todo:
        comp = todo.pop()
        if comp.name in seen:
            continue
        seen[comp.name] = comp
        for inst in comp.instructions:
            if inst.opcode in _CONTROL_FLOW:
                todo.extend(c for name in inst.called_computations
                            if (c := module.computations.get(name)) is not None and c.name not in seen)
    return list(seen.values())


@dataclass(frozen=True)
class Placement:
    """Per kernel of one sequence: the instruction it was placed on (None: not placed) and how
    (``"name"``: an XLA kernel by its name, ``"order"``: a library kernel by its place in the sequence)."""

    ops: tuple[str | None, ...]
    how: tuple[str, ...]


def place_kernels(kernels: Sequence[str], schedule: KernelSchedule) -> Placement:
    """Place one command buffer execution's kernels (in the order they ran) on the module's instructions."""
    n = len(kernels)
    slots: list[_Slot | None] = [None] * n
    last: dict[str, int] = {}                       # computation -> index of the last slot placed there
    previous: _Slot | None = None                   # the last placed XLA kernel's instruction
    anchors: list[int] = []
    xla = [j for j, kernel in enumerate(kernels) if schedule.xla_slot(kernel) is not None]
    for pos, j in enumerate(xla):
        first = schedule.xla_slot(kernels[j])
        assert first is not None
        choices = schedule.choices(schedule.same_kernel.get(first.name, [first]),
                                   previous.computation if previous is not None else None, last)
        slot = choices[0]
        if len(choices) > 1:
            # Where the kernel alone cannot tell (a loop's condition is followed by its body, or by what comes
            # after the loop), the library kernels before it and the next XLA kernel do: the choice whose
            # library instructions since the last placed kernel fit the library kernels that ran, and that the
            # next XLA kernel can follow.
            gap = kernels[(anchors[-1] + 1 if anchors else 0):j]
            following = kernels[xla[pos + 1]] if pos + 1 < len(xla) else None
            more = j + 1 < n                        # anything after this kernel to follow it
            slot = min(choices, key=lambda c: (_misfit(gap, _library_slots(schedule, previous, c)),
                                               more and not schedule.continues(c, following),
                                               choices.index(c)))
        slots[j] = slot
        last[slot.computation] = slot.index
        previous = slot
        anchors.append(j)
    bounds = [-1] + anchors + [n]
    for left, right in zip(bounds, bounds[1:]):
        if right - left > 1:
            gap_slots = _library_slots(schedule, slots[left] if left >= 0 else None, slots[right] if right < n else None)
            _place_gap(kernels, slots, range(left + 1, right), gap_slots)
    by_name = set(anchors)
    return Placement(ops=tuple(s.name if s else None for s in slots),
                     how=tuple(("name" if j in by_name else "order") if s else "" for j, s in enumerate(slots)))


def _misfit(kernels: Sequence[str], slots: list[_Slot]) -> int:
    """How badly library kernels fit the library instructions between two placed kernels: calls (a main
    kernel or a memcpy each) with no instruction, plus instructions that launched nothing."""
    calls = sum(1 for k in kernels if _MAIN_KERNEL.search(k) or _MEMCPY.search(k))
    if kernels and not calls and not all(_MEMSET.search(k) for k in kernels):
        calls = 1
    return abs(calls - len(slots))


def _library_slots(schedule: KernelSchedule, left: _Slot | None, right: _Slot | None) -> list[_Slot]:
    """The library instructions between two placed XLA kernels (either end may be open). A gap that crosses
    into or out of a loop runs up to the control-flow instruction on each side; one that leaves a loop's
    computation for the computation around it runs on there after the loop."""
    if left is not None and right is not None and left.computation == right.computation and left.index < right.index:
        between = schedule.slots[left.computation][left.index + 1:right.index]
    elif left is None and right is None:
        between = [s for slots in schedule.slots.values() for s in slots]
    else:
        between = []
        if left is not None:
            between += _until_control(schedule.slots[left.computation][left.index + 1:])
            loop = schedule.run_by.get(left.computation)
            if loop is not None and (right is None or right.computation == loop.computation):
                outer = schedule.slots[loop.computation][loop.index + 1:right.index if right is not None else None]
                return [s for s in between + _until_control(outer) if s.library]
        if right is not None:
            before = schedule.slots[right.computation][:right.index]
            start = max((i + 1 for i, s in enumerate(before) if s.control), default=0)
            between += before[start:]
    return [s for s in between if s.library]


def _until_control(slots: list[_Slot]) -> list[_Slot]:
    stop = next((i for i, s in enumerate(slots) if s.control), len(slots))
    return slots[:stop]


def _place_gap(kernels: Sequence[str], slots: list[_Slot | None], rows: range, gap: list[_Slot]) -> None:
    """Library kernels between two placed XLA kernels onto the library instructions between them, in order."""
    if not gap:
        return
    work = [j for j in rows if not _MEMSET.search(kernels[j])]
    current: int | None = None                       # index into gap
    group: set[str] = set()
    has_main = False
    for pos, j in enumerate(work):
        kernel = kernels[j]
        is_main = bool(_MAIN_KERNEL.search(kernel))
        wanted_copy = bool(_MEMCPY.search(kernel))
        left_after = len(work) - pos                 # this kernel and the ones after it
        advance = (current is None or kernel in group or (is_main and has_main)
                   or gap[current].copy != wanted_copy          # a GEMM never runs as a copy, nor a memcpy as a GEMM
                   or left_after <= len(gap) - current - 1)
        if advance:
            nxt = _next_slot(gap, -1 if current is None else current, wanted_copy)
            if nxt is not None:
                current, group, has_main = nxt, set(), False
        if current is None:
            continue
        slots[j] = gap[current]
        group.add(kernel)
        has_main = has_main or is_main
    # A memset belongs to the call it prepares: the next kernel's instruction (the previous one at the end).
    for j in rows:
        if _MEMSET.search(kernels[j]):
            later = next((slots[i] for i in range(j + 1, rows.stop) if slots[i] is not None), None)
            earlier = next((slots[i] for i in range(j - 1, rows.start - 1, -1) if slots[i] is not None), None)
            slots[j] = later or earlier or (gap[0] if len(gap) == 1 else None)


def _next_slot(gap: list[_Slot], after: int, wanted_copy: bool) -> int | None:
    """The next library instruction after ``after``: a copy for a memcpy kernel where there is one."""
    rest = range(after + 1, len(gap))
    if wanted_copy:
        found = next((i for i in rest if gap[i].copy), None)
        if found is not None:
            return found
    found = next((i for i in rest if not gap[i].copy), None)
    return found if found is not None else next(iter(rest), None)
