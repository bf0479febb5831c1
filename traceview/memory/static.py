"""Static memory of one compiled HLO module: its peak from XLA's buffer assignment.

The definition follows XProf's memory viewer (hlo_proto_to_memory_visualization_utils):

* one heap simulator trace is walked for memory colour 0 (device HBM): the one
  belonging to the first non-indefinite allocation of that colour, else the
  trace with the most events of that colour;
* ALLOC adds the buffer's size; FREE removes the canonical buffer when its
  last reference goes; SHARE_WITH makes a buffer an alias of a canonical one
  (adding the canonical size when it was not live);
* the heap peak is the first maximum of that walk, and the buffers live there
  are the buffers "at the peak";
* allocations outside the simulation (entry parameters, constants,
  maybe-live-out: "indefinite") are live throughout and add their size to the
  peak; each is represented by its largest logical buffer;
* thread-local allocations (per-thread scratch, not device memory) are left
  out, as XProf leaves them out.

``total_allocation_bytes`` is the sum of the colour-0 allocations' sizes
(thread-local aside), what XProf's ``get_peak_allocations`` reports as
``total_hbm_mib``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traceview.cost.shapes import shape_text
from traceview.parsers.hlo.buffer_assignment import ALLOC, FREE, SHARE_WITH, BufferAllocation, BufferAssignment
from traceview.parsers.hlo.model import HloModule, Instruction, Shape

HBM_COLOR = 0


@dataclass
class StaticBuffer:
    instruction: str
    shape: str | None
    size_bytes: int
    kind: str                    # parameter | output | temporary | constant | thread-local
    source: str | None           # "file.py:12" from the instruction's metadata
    opcode: str | None = None
    op_name: str | None = None   # the framework op (metadata op_name)


@dataclass
class StaticPeak:
    name: str
    program_id: int | None
    peak_bytes: int                      # heap peak + indefinite
    heap_peak_bytes: int
    indefinite_bytes: int
    total_allocation_bytes: int
    buffers: list[StaticBuffer]          # live at the peak, largest first
    heap_timeline: list[int] = field(default_factory=list)   # heap + indefinite after each event
    peak_position: int = 0               # index into heap_timeline
    peak_instruction: str | None = None  # the instruction whose event made the peak
    bytes_by_kind: dict[str, int] = field(default_factory=dict)
    exact: bool = True                   # False: no heap simulator trace, the temporaries' allocations counted whole
    warnings: list[str] = field(default_factory=list)


class _Buf:
    """Reference counting of one logical buffer, as the heap walk needs it."""

    __slots__ = ("id", "size", "refs", "canonical")

    def __init__(self, id: int, size: int) -> None:
        self.id, self.size, self.refs = id, size, 0
        self.canonical: _Buf | None = None

    def root(self) -> _Buf:
        node = self
        for _ in range(10_000):  # bounded: a hostile cycle of SHARE_WITH cannot hang us
            if node.canonical is None:
                return node
            node = node.canonical
        return node


def _owner_allocation(ba: BufferAssignment) -> dict[int, BufferAllocation]:
    owner = {}
    for alloc in ba.allocations:
        for lb_id, _, _ in alloc.assigned:
            owner[lb_id] = alloc
    return owner


def _choose_trace(ba: BufferAssignment, owner: dict[int, BufferAllocation], color: int) -> int | None:
    trace_of: dict[int, int] = {}
    for i, events in enumerate(ba.heap_traces):
        if events and events[0].buffer_id in owner:
            trace_of[owner[events[0].buffer_id].index] = i
    for alloc in sorted(ba.allocations, key=lambda a: a.index):
        if alloc.color == color and not alloc.indefinite and alloc.index in trace_of:
            return trace_of[alloc.index]
    best, best_count = None, 0
    for i, events in enumerate(ba.heap_traces):
        count = sum(1 for e in events
                    if e.buffer_id in ba.logical_buffers and ba.logical_buffers[e.buffer_id].color == color)
        if count > best_count:
            best, best_count = i, count
    return best


def _walk(events, ba: BufferAssignment, warnings: list[str]) -> tuple[int, int, list[int], list[int], str | None]:
    """(peak heap bytes, peak position, live buffer ids at the peak, heap after each event, peak instruction)."""
    bufs: dict[int, _Buf] = {}

    def get(i: int) -> _Buf | None:
        if i not in bufs:
            lb = ba.logical_buffers.get(i)
            if lb is None:
                return None
            bufs[i] = _Buf(i, lb.size)
        return bufs[i]

    heap, peak, position, peak_inst = 0, 0, 0, None
    live: dict[int, None] = {}   # insertion-ordered set of canonical ids
    peak_live: list[int] = []
    timeline: list[int] = []
    for event in events:
        timeline.append(heap)
        buf = get(event.buffer_id)
        if buf is None:
            continue
        grew = False
        if event.kind == ALLOC:
            buf.root().refs += 1
            heap += buf.size
            live[buf.id] = None
            grew = True
        elif event.kind == FREE:
            root = buf.root()
            root.refs -= 1
            if root.refs < 0:
                warnings.append(f"buffer {buf.id} is freed more often than allocated; heap walk stopped")
                break
            if root.refs == 0:
                heap -= root.size
                live.pop(root.id, None)
        elif event.kind == SHARE_WITH:
            canonical = get(event.share_with)
            if canonical is None:
                continue
            buf.canonical = canonical
            root = canonical.root()
            root.refs += 1
            if root.refs == 1:
                heap += root.size
                live[root.id] = None
                grew = True
        if grew and heap > peak:
            peak, position, peak_live, peak_inst = heap, len(timeline) - 1, list(live), event.instruction_name or None
    timeline.append(heap)
    return peak, position, peak_live, timeline, peak_inst


def _instruction_index(module: HloModule | None) -> tuple[dict[int, Instruction], dict[str, Instruction]]:
    by_id: dict[int, Instruction] = {}
    by_name: dict[str, Instruction] = {}
    if module is None:
        return by_id, by_name
    for comp in module.computations.values():
        for inst in comp.instructions:
            if inst.id is not None:
                by_id[inst.id] = inst
            by_name[inst.name] = inst
    return by_id, by_name


def _subshape(shape: Shape, index: tuple[int, ...]) -> Shape:
    for i in index:
        if not shape.is_tuple or i >= len(shape.tuple_shapes):
            break
        shape = shape.tuple_shapes[i]
    return shape


def _source(inst: Instruction | None) -> str | None:
    if inst is None:
        return None
    file, line = inst.metadata.get("source_file"), inst.metadata.get("source_line")
    if not file:
        return None
    return f"{file}:{line}" if line else file


def static_peak(ba: BufferAssignment, module: HloModule | None, name: str | None = None,
                program_id: int | None = None, color: int = HBM_COLOR) -> StaticPeak:
    """The module's static peak and the buffers live there (see the module docstring)."""
    warnings: list[str] = []
    owner = _owner_allocation(ba)
    by_id, by_name = _instruction_index(module)

    def describe(lb_id: int, size: int, kind: str) -> StaticBuffer:
        lb = ba.logical_buffers.get(lb_id)
        inst = None
        if lb is not None:
            inst = by_id.get(lb.instruction_id) if lb.instruction_id is not None else None
            if inst is None and lb.instruction_name:
                inst = by_name.get(lb.instruction_name)
        label = inst.name if inst else (lb.instruction_name if lb and lb.instruction_name else f"buffer {lb_id}")
        if lb is not None and lb.shape_index:
            label += "{" + ",".join(map(str, lb.shape_index)) + "}"
        shape = shape_text(_subshape(inst.shape, lb.shape_index if lb else ())) if inst else None
        return StaticBuffer(instruction=label, shape=shape, size_bytes=size, kind=kind, source=_source(inst),
                            opcode=inst.opcode if inst else None,
                            op_name=inst.metadata.get("op_name") if inst else None)

    buffers: list[StaticBuffer] = []
    indefinite = 0
    for alloc in ba.allocations:
        if alloc.color != color or not alloc.indefinite or alloc.is_thread_local:
            continue
        indefinite += alloc.size
        candidates = [(ba.logical_buffers[i].size, i) for i, _, _ in alloc.assigned if i in ba.logical_buffers]
        if candidates:
            # the largest logical buffer stands for the allocation (first one on ties)
            best = max(candidates, key=lambda c: c[0])
            buffers.append(describe(best[1], best[0], alloc.kind))
    heap_peak, position, peak_inst = 0, 0, None
    live: list[int] = []
    timeline: list[int] = []
    trace = _choose_trace(ba, owner, color)
    if trace is not None:
        heap_peak, position, live, timeline, peak_inst = _walk(ba.heap_traces[trace], ba, warnings)
    exact = True
    if trace is None:
        # No heap simulation (a text dump): the temporaries' allocations, packed by XLA, counted whole.
        for alloc in ba.allocations:
            if alloc.color != color or alloc.indefinite or alloc.is_thread_local or not alloc.assigned:
                continue
            exact = False
            heap_peak += alloc.size
            biggest = max(alloc.assigned, key=lambda a: a[2])
            buf = describe(biggest[0], alloc.size, "temporary")
            if len(alloc.assigned) > 1:
                buf.instruction = f"temporaries of {len(alloc.assigned)} values (largest {buf.instruction})"
                buf.shape = None
            buffers.append(buf)
        if not exact:
            warnings.append("no heap simulator trace: the peak counts the temporaries' allocations whole "
                            "(an upper bound; dump with --xla_dump_hlo_as_proto for the exact peak)")
    for lb_id in live:
        lb = ba.logical_buffers[lb_id]
        alloc = owner.get(lb_id)
        buffers.append(describe(lb_id, lb.size, alloc.kind if alloc else "temporary"))
    buffers.sort(key=lambda b: -b.size_bytes)
    by_kind: dict[str, int] = {}
    for b in buffers:
        by_kind[b.kind] = by_kind.get(b.kind, 0) + b.size_bytes
    total = sum(a.size for a in ba.allocations if a.color == color and not a.is_thread_local)
    return StaticPeak(name=name or (module.name if module else "?"), program_id=program_id,
                      peak_bytes=heap_peak + indefinite, heap_peak_bytes=heap_peak, indefinite_bytes=indefinite,
                      total_allocation_bytes=total, buffers=buffers,
                      heap_timeline=[h + indefinite for h in timeline], peak_position=position,
                      peak_instruction=peak_inst, bytes_by_kind=by_kind, exact=exact, warnings=warnings)
