"""XLA's buffer assignment (HloProto field 3, ``BufferAssignmentProto``).

What the compiler decided about memory: logical buffers (size, defining
instruction, memory colour), buffer allocations (their flags: entry
parameter, constant, thread-local, maybe-live-out) and the heap simulator
traces (ALLOC / FREE / SHARE_WITH events in program order). The messages are
declared here, at run time, in a private descriptor pool (field names and
numbers follow xla/service/hlo.proto); ``HloProto`` is declared with only its
``buffer_assignment`` field, so the module itself is skipped by the decoder
(parsers.hlo.proto reads it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from traceview.errors import HloError

_PACKAGE = "traceview_xla_buffers"

# message -> [(field, number, type, repeated?)]
_SCHEMA: dict[str, list[tuple[str, int, str, bool]]] = {
    "HloProto": [("buffer_assignment", 3, "BufferAssignmentProto", False)],
    "BufferAssignmentProto": [
        ("logical_buffers", 1, "LogicalBufferProto", True),
        ("buffer_allocations", 3, "BufferAllocationProto", True),
        ("heap_simulator_traces", 4, "HeapSimulatorTrace", True),
    ],
    "Location": [("instruction_name", 2, "string", False), ("shape_index", 3, "int64", True),
                 ("instruction_id", 4, "int64", False)],
    "LogicalBufferProto": [("id", 1, "int64", False), ("size", 2, "int64", False),
                           ("defined_at", 3, "Location", False), ("color", 4, "int64", False)],
    "Assigned": [("logical_buffer_id", 1, "int64", False), ("offset", 2, "int64", False),
                 ("size", 3, "int64", False)],
    "BufferAllocationProto": [
        ("index", 1, "int64", False), ("size", 2, "int64", False), ("is_thread_local", 3, "bool", False),
        ("is_entry_computation_parameter", 5, "bool", False), ("parameter_number", 6, "int64", False),
        ("maybe_live_out", 7, "bool", False), ("color", 8, "int64", False),
        ("assigned", 9, "Assigned", True), ("is_tuple", 11, "bool", False), ("is_constant", 12, "bool", False),
    ],
    "HeapEvent": [("kind", 1, "int32", False), ("buffer_id", 2, "int64", False),
                  ("computation_name", 3, "string", False), ("instruction_name", 4, "string", False),
                  ("share_with_canonical_id", 5, "int64", False)],
    "HeapSimulatorTrace": [("events", 1, "HeapEvent", True), ("whole_module_simulation", 2, "bool", False),
                           ("buffer_allocation_index", 3, "int64", False)],
}

_SCALARS = {"string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
            "int32": descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
            "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
            "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL}

ALLOC, FREE, SHARE_WITH = 0, 1, 2
MAX_EVENTS = 50_000_000  # a bound on hostile input: more heap events than any real module has


@cache
def _message(name: str) -> Any:
    pool = descriptor_pool.DescriptorPool()
    fdp = descriptor_pb2.FileDescriptorProto(name="traceview_buffer_assignment.proto", package=_PACKAGE,
                                             syntax="proto3")
    F = descriptor_pb2.FieldDescriptorProto
    for msg_name, fields in _SCHEMA.items():
        msg = fdp.message_type.add(name=msg_name)
        for fname, number, ftype, repeated in fields:
            f = msg.field.add(name=fname, number=number, label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if ftype in _SCALARS:
                f.type = _SCALARS[ftype]
            else:
                f.type = F.TYPE_MESSAGE
                f.type_name = f".{_PACKAGE}.{ftype}"
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


@dataclass(frozen=True)
class LogicalBuffer:
    id: int
    size: int
    instruction_id: int | None
    instruction_name: str | None
    shape_index: tuple[int, ...]
    color: int


@dataclass(frozen=True)
class BufferAllocation:
    index: int
    size: int
    color: int
    is_thread_local: bool
    is_entry_parameter: bool
    is_constant: bool
    maybe_live_out: bool
    is_tuple: bool
    parameter_number: int
    assigned: tuple[tuple[int, int, int], ...]   # (logical buffer id, offset, size)

    @property
    def indefinite(self) -> bool:
        """Live for the whole program, outside the heap simulation."""
        return self.is_thread_local or self.is_entry_parameter or self.is_constant or self.maybe_live_out

    @property
    def kind(self) -> str:
        if self.is_entry_parameter:
            return "parameter"
        if self.maybe_live_out:
            return "output"
        if self.is_thread_local:
            return "thread-local"
        if self.is_constant:
            return "constant"
        return "temporary"


@dataclass(frozen=True)
class HeapEvent:
    kind: int                 # ALLOC, FREE or SHARE_WITH
    buffer_id: int
    instruction_name: str
    share_with: int


@dataclass
class BufferAssignment:
    logical_buffers: dict[int, LogicalBuffer] = field(default_factory=dict)
    allocations: list[BufferAllocation] = field(default_factory=list)
    heap_traces: list[list[HeapEvent]] = field(default_factory=list)


def parse_buffer_assignment(data: bytes, where: str = "<hlo proto>") -> BufferAssignment | None:
    """The buffer assignment in serialized HloProto bytes; None when the proto carries none.

    Raises HloError (naming `where`) for bytes that are not a protobuf.
    """
    try:
        proto = _message("HloProto").FromString(data)
    except DecodeError as exc:
        raise HloError(f"{where}: not an HloProto ({exc})") from None
    if not proto.HasField("buffer_assignment"):
        return None
    ba = proto.buffer_assignment
    out = BufferAssignment()
    for lb in ba.logical_buffers:
        loc = lb.defined_at
        out.logical_buffers[lb.id] = LogicalBuffer(
            id=lb.id, size=lb.size, instruction_id=loc.instruction_id if loc.instruction_id else None,
            instruction_name=loc.instruction_name or None, shape_index=tuple(loc.shape_index), color=lb.color)
    for a in ba.buffer_allocations:
        out.allocations.append(BufferAllocation(
            index=a.index, size=a.size, color=a.color, is_thread_local=a.is_thread_local,
            is_entry_parameter=a.is_entry_computation_parameter, is_constant=a.is_constant,
            maybe_live_out=a.maybe_live_out, is_tuple=a.is_tuple, parameter_number=a.parameter_number,
            assigned=tuple((x.logical_buffer_id, x.offset, x.size) for x in a.assigned)))
    total = 0
    for trace in ba.heap_simulator_traces:
        total += len(trace.events)
        if total > MAX_EVENTS:
            raise HloError(f"{where}: more than {MAX_EVENTS} heap simulator events")
        out.heap_traces.append([HeapEvent(e.kind, e.buffer_id, e.instruction_name, e.share_with_canonical_id)
                                for e in trace.events])
    return out
