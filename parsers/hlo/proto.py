"""Decode HloProto / HloModuleProto bytes into :class:`HloModule`.

The typed attributes the cost model reads (``Instruction.typed``) are decoded
straight from the instruction's fields (:mod:`traceview.parsers.hlo.proto_typed`);
the attribute text HLO would print is written as well
(:mod:`traceview.parsers.hlo.proto_attributes`), for display and for the views
that read attribute text. Inputs: the bytes of a trace's ``/host:metadata`` HLO protos,
``*.hlo_proto.pb`` files written beside traces, and XLA dump files
``*.hlo.pb`` (optionally ``.xz``/``.gz``).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping
from pathlib import Path

from google.protobuf.message import DecodeError

from traceview.errors import HloError
from traceview.parsers.hlo.attributes import Attributes
from traceview.parsers.hlo.checks import check_module
from traceview.parsers.hlo.files import read_bytes
from traceview.parsers.hlo.model import Computation, HloModule, Instruction, Shape, source_name
from traceview.parsers.hlo.proto_attributes import (
    ProtoOp,
    attributes_of,
    called_roles,
    metadata_of,
    metadata_text,
    quote,
)
from traceview.parsers.hlo.proto_typed import typed_values
from traceview.parsers.hlo.schema import (
    PRIMITIVE_TYPES,
    message_class,
)
from traceview.parsers.hlo.text import apply_stack_frames

__all__ = ["parse_hlo_proto", "read_hlo_proto", "modules_from_trace_protos", "shape_from_proto", "shape_to_text"]

UNKNOWN_TYPE_PREFIX = "unknown_type_"  # element types newer than this schema: "unknown_type_35"
_KEY_RE = re.compile(r"^(?P<name>.*?)\((?P<id>\d+)\)$")


def parse_hlo_proto(data: bytes, file: str | None = None) -> HloModule:
    """Decode serialized ``HloProto`` (or a bare ``HloModuleProto``) bytes.

    ``file`` names the source in errors and warnings.
    """
    where = file or "<hlo proto>"
    module_proto = _module_proto(data, where)
    try:
        module = _convert_module(module_proto, file)
    except (ValueError, KeyError, IndexError, OverflowError, TypeError, RecursionError, struct.error) as exc:
        # Every field XLA writes is handled; anything else that trips the conversion is a corrupt proto.
        raise HloError(f"{where}: malformed HLO proto ({type(exc).__name__}: {str(exc)[:120]})") from None
    check_module(module, where)
    return module


def _module_proto(data: bytes, where: str):
    """The HloModuleProto the bytes hold: an HloProto's module, else the bytes as a bare module."""
    try:
        hlo = message_class("HloProto").FromString(data)
        if hlo.hlo_module.computations:
            return hlo.hlo_module
    except DecodeError:
        pass
    try:
        bare = message_class("HloModuleProto").FromString(data)
    except DecodeError as exc:
        raise HloError(f"{where}: not an HloProto or HloModuleProto ({exc})") from None
    if not bare.computations:
        raise HloError(f"{where}: no HLO computations in this protobuf (empty or not an HLO proto)")
    return bare


def proto_module_name(data: bytes) -> str | None:
    """The name of the module HLO proto bytes hold (protobuf's decode only, none of the conversion
    parse_hlo_proto does); None when the bytes are not an HLO module or name none."""
    try:
        return _module_proto(data, "").name or None
    except HloError:
        return None


def read_hlo_proto(path: str | Path) -> HloModule:
    """Read an HLO proto file (``*.hlo.pb``, ``*.hlo_proto.pb``, ``*.pb.xz``, ...)."""
    p = Path(path)
    return parse_hlo_proto(read_bytes(p), str(p))


def proto_key(key: str) -> tuple[str, int | None]:
    """(module name, program id) of a trace's HloProto key ``"<module>(<program id>)"``; no id: None."""
    m = _KEY_RE.match(key)
    return (m.group("name"), int(m.group("id"))) if m else (key, None)


def modules_from_trace_protos(protos: Mapping[str, bytes], source: str | None = None,
                              keep: Callable[[str, int | None], bool] | None = None,
                              converted: dict | None = None) -> tuple[list[HloModule], list[str]]:
    """Modules from a trace's HloProtos, keyed ``"<module>(<program id>)"`` as XProf keys them.

    ``program_id`` comes from the key (on TPU it is a 64-bit fingerprint, not
    the module's id). A proto that cannot be decoded becomes a warning: the
    rest of the trace stays usable. ``keep(name, program_id)``: convert only
    the protos it accepts (the others are not decoded at all). ``converted``: modules converted by an
    earlier call on the same protos, by key; reused, and this call's conversions added.
    """
    modules: list[HloModule] = []
    warnings: list[str] = []
    for key, data in protos.items():
        name, program_id = proto_key(key)
        if keep is not None and not keep(name, program_id):
            continue
        module = converted.get(("proto", key)) if converted is not None else None
        if module is None:
            module = _trace_module(key, data, source, program_id, warnings)
            if module is None:
                continue
            if converted is not None:
                converted["proto", key] = module
        modules.append(module)
        warnings.extend(module.warnings)
    return modules, warnings


def _trace_module(key: str, data: bytes, source: str | None, program_id: int | None,
                  warnings: list[str]) -> HloModule | None:
    """One trace HloProto converted; None, with a warning, when it cannot be."""
    where = source or "trace"
    try:
        module = parse_hlo_proto(data, f"{where}: HLO proto {key}")
    except HloError as exc:
        warnings.append(f"{exc}; its ops get no HLO costs")
        return None
    except Exception as exc:  # noqa: BLE001 - one bad module never costs the rest of the trace
        warnings.append(f"{where}: HLO proto {key}: unreadable ({type(exc).__name__}: {str(exc)[:120]}); "
                        "its ops get no HLO costs")
        return None
    module.file = source
    module.stage = "after"
    if program_id is not None:
        module.program_id = program_id
    return module


# ---------------------------------------------------------------------------
# shapes

def _layout_text(layout, rank: int) -> str | None:
    extras = ""
    if layout.tiles:
        extras += "".join("T(" + ",".join("*" if d == -2**63 else str(d) for d in t.dimensions) + ")"
                          for t in layout.tiles)
    if layout.tail_padding_alignment_in_elements > 1:
        extras += f"L({layout.tail_padding_alignment_in_elements})"
    if layout.element_size_in_bits:
        extras += f"E({layout.element_size_in_bits})"
    if layout.memory_space:
        extras += f"S({layout.memory_space})"
    if layout.dynamic_shape_metadata_prefix_bytes:
        extras += f"M({layout.dynamic_shape_metadata_prefix_bytes})"
    m2m = ",".join(map(str, layout.minor_to_major))
    if extras:
        return "{" + m2m + ":" + extras + "}"
    if rank == 0:
        return None  # HLO text prints no layout on scalars without extras
    return "{" + m2m + "}"


def shape_from_proto(sp) -> Shape:
    """A ShapeProto message -> :class:`Shape` (layout rendered as text)."""
    etype = PRIMITIVE_TYPES.get(sp.element_type, f"{UNKNOWN_TYPE_PREFIX}{sp.element_type}")
    if etype == "tuple":
        return Shape("tuple", (), tuple(shape_from_proto(t) for t in sp.tuple_shapes))
    dims = tuple(sp.dimensions)
    layout = _layout_text(sp.layout, len(dims)) if sp.HasField("layout") else None
    dyn = tuple(sp.is_dynamic_dimension)
    dynamic = dyn if any(dyn) else ()
    return Shape(etype, dims, (), layout, dynamic)


def _has_unknown_type(shape: Shape) -> bool:
    if shape.is_tuple:
        return any(_has_unknown_type(s) for s in shape.tuple_shapes)
    return shape.element_type.startswith(UNKNOWN_TYPE_PREFIX)


def shape_to_text(shape: Shape) -> str:
    """Render a :class:`Shape` as HLO text prints it (``f32[2,<=3]{1,0}``, tuples in parens)."""
    if shape.is_tuple:
        return "(" + ", ".join(shape_to_text(s) for s in shape.tuple_shapes) + ")"
    if shape.element_type in ("token", "opaque") and not shape.dims:
        return shape.element_type + "[]"
    dyn = shape.dynamic or (False,) * len(shape.dims)
    dims = ",".join(("<=" if d else "") + str(n) for n, d in zip(shape.dims, dyn))
    return f"{shape.element_type}[{dims}]{shape.layout or ''}"




# ---------------------------------------------------------------------------
# module

class _ModuleConversion:
    """The state one HloModuleProto's conversion shares across its computations."""

    def __init__(self, mp, file: str | None):
        self.mp = mp
        self.where = file or "<hlo proto>"
        self.computation_names = {c.id: c.name for c in mp.computations}
        self.warnings: list[str] = []
        self.unknown_types: set[str] = set()   # instructions whose shape has an element type this reader lacks
        self._shapes: dict[bytes, Shape] = {}  # few distinct shapes in a module: decode each once

    def shapes(self, cp) -> dict[int, Shape]:
        """Every instruction's shape by id, all first: XLA allows operands defined later in the list."""
        shapes: dict[int, Shape] = {}
        for ip in cp.instructions:
            key = ip.shape.SerializeToString()
            shape = self._shapes.get(key)
            if shape is None:
                shape = self._shapes[key] = shape_from_proto(ip.shape)
                if _has_unknown_type(shape):
                    self.unknown_types.add(ip.name)
            shapes[ip.id] = shape
        return shapes

    def computation(self, cp) -> Computation:
        mp = self.mp
        names = {ip.id: ip.name for ip in cp.instructions}
        shapes = self.shapes(cp)
        insts = _in_schedule_order(mp, cp, [self.instruction(ip, cp, names, shapes) for ip in cp.instructions])
        root = names.get(cp.root_id)
        if root is None and insts:
            self.warnings.append(f"{self.where}: computation {cp.name!r} has no root id {cp.root_id}; "
                                 f"took its last instruction as root")
            root = insts[-1].name
        return Computation(
            name=cp.name, instructions=insts, root=root,
            is_entry=cp.name == mp.entry_computation_name or (cp.id == mp.entry_computation_id and cp.id != 0),
            execution_thread=cp.execution_thread or None)

    def instruction(self, ip, cp, names: dict[int, str], shapes: dict[int, Shape]) -> Instruction:
        try:
            operands = [names[i] for i in ip.operand_ids]
        except KeyError as exc:
            raise HloError(f"{self.where}: instruction {ip.name!r} in {cp.name!r} refers to unknown "
                           f"operand id {exc.args[0]}") from None
        opcode = ip.opcode
        operand_shapes = [shapes[i] for i in ip.operand_ids]
        roles = called_roles(opcode, self.called(ip), operand_shapes)
        op = ProtoOp(ip, opcode, shapes[ip.id], roles, operand_shapes, ip.ListFields())
        attrs = attributes_of(op)
        metadata = metadata_of(ip.metadata) if ip.HasField("metadata") else {}
        backend_config = ip.backend_config.decode("utf-8", errors="replace") if ip.backend_config else None
        attrs.update(_trailing_attributes(ip, metadata, backend_config, names))
        inst = Instruction(
            name=ip.name, opcode=opcode, shape=shapes[ip.id], operands=operands, attributes=attrs,
            called_computations=[name for names in roles.values() for name in names], metadata=metadata,
            backend_config=backend_config, custom_call_target=ip.custom_call_target or None,
            fusion_kind=(ip.fusion_kind or None) if opcode == "fusion" else None, id=ip.id)
        inst.typed = Attributes.decoded(typed_values(op), backend_config)
        return inst

    def called(self, ip) -> list[str]:
        """The names of the computations the instruction calls; an unknown id is a warning."""
        called = []
        for cid in ip.called_computation_ids:
            name = self.computation_names.get(cid)
            if name is None:
                self.warnings.append(f"{self.where}: instruction {ip.name!r} calls unknown computation id {cid}")
                continue
            called.append(name)
        return called

    def entry(self, computations: dict[str, Computation]) -> str | None:
        mp = self.mp
        entry = mp.entry_computation_name or self.computation_names.get(mp.entry_computation_id)
        if entry not in computations:
            self.warnings.append(f"{self.where}: entry computation {entry!r} is not in the module")
            return None
        return entry


def _trailing_attributes(ip, metadata: dict[str, str], backend_config: str | None,
                         names: dict[int, str]) -> dict[str, str]:
    """The attributes HLO text prints after the op's own: metadata, backend config, frontend
    attributes, control predecessors."""
    a: dict[str, str] = {}
    if metadata:
        a["metadata"] = metadata_text(metadata)
    if backend_config is not None:
        a["backend_config"] = backend_config if backend_config.startswith("{") else quote(backend_config)
    if ip.HasField("frontend_attributes") and ip.frontend_attributes.map:
        a["frontend_attributes"] = "{" + ",".join(
            f"{k}={quote(v)}" for k, v in sorted(ip.frontend_attributes.map.items())) + "}"
    if ip.control_predecessor_ids:
        a["control-predecessors"] = "{" + ", ".join(
            "%" + names.get(i, str(i)) for i in ip.control_predecessor_ids) + "}"
    return a


def _in_schedule_order(mp, cp, insts: list[Instruction]) -> list[Instruction]:
    """The instructions in the module's schedule order (the order HLO text prints), when it lists them all."""
    seq = mp.schedule.sequences.get(cp.id) if mp.HasField("schedule") else None
    if seq is None or len(seq.instruction_ids) != len(insts):
        return insts
    by_id = {inst.id: inst for inst in insts}
    if not all(i in by_id for i in seq.instruction_ids):
        return insts
    return [by_id[i] for i in seq.instruction_ids]


def _entry_computation_layout(mp) -> str:
    ps = mp.host_program_shape
    return "{(" + ", ".join(shape_to_text(shape_from_proto(p)) for p in ps.parameters) + ")->" + \
        shape_to_text(shape_from_proto(ps.result)) + "}"


def _convert_module(mp, file: str | None) -> HloModule:
    conversion = _ModuleConversion(mp, file)
    computations = {cp.name: conversion.computation(cp) for cp in mp.computations}
    if conversion.unknown_types:
        conversion.warnings.append(
            f"{conversion.where}: element types this reader does not know, in {len(conversion.unknown_types)} "
            f"shape(s) (first on {sorted(conversion.unknown_types)[0]!r}); their sizes are unknown")
    module = HloModule(name=mp.name, computations=computations, entry=conversion.entry(computations), file=file,
                       warnings=conversion.warnings, module_id=mp.id)
    if mp.HasField("host_program_shape"):
        module.attributes["entry_computation_layout"] = _entry_computation_layout(mp)
    if mp.HasField("input_output_alias") and mp.input_output_alias.entries:
        module.attributes["input_output_alias"] = _alias_text(mp.input_output_alias.entries)
        module.aliases = _aliases(mp.input_output_alias.entries)
    _stack_frames(mp, module)
    return module


_ALIAS_KINDS = {1: "may-alias", 2: "must-alias"}


def _alias_text(entries) -> str:
    """The module's input_output_alias as HLO text prints it: ``{ {1}: (19, {}, may-alias), ... }``."""
    def index(values) -> str:
        return "{" + ",".join(str(int(v)) for v in values) + "}"

    return "{ " + ", ".join(
        f"{index(e.output_shape_index)}: ({int(e.parameter_number)}, {index(e.parameter_shape_index)}, "
        f"{_ALIAS_KINDS.get(int(e.kind), 'may-alias')})" for e in entries) + " }"


def _aliases(entries) -> dict[int, int]:
    """The alias entries as {top-level output index: parameter number}, later entries winning, as
    :func:`~traceview.parsers.hlo.attributes.input_output_alias` reads the text; an entry with a negative
    index or number is corrupt, left out."""
    out: dict[int, int] = {}
    for e in entries:
        if e.parameter_number < 0 or any(i < 0 for i in (*e.output_shape_index, *e.parameter_shape_index)):
            continue
        out[int(e.output_shape_index[0]) if e.output_shape_index else 0] = int(e.parameter_number)
    return out


def _stack_frames(mp, module: HloModule) -> None:
    if not mp.HasField("stack_frame_index"):
        return
    idx = mp.stack_frame_index
    files = [source_name(f) for f in idx.file_names]
    funcs, locs = [source_name(f) for f in idx.function_names], list(idx.file_locations)
    module.source_files = files

    def at(seq, i: int, default):
        return seq[i - 1] if 0 < i <= len(seq) else default

    for n, frame in enumerate(idx.stack_frames, start=1):  # ids are 1-based
        loc = at(locs, frame.file_location_id, None)
        if loc is None:
            continue
        module.stack_frames[n] = (at(files, loc.file_name_id, "?"), loc.line, at(funcs, loc.function_name_id, "?"))
    apply_stack_frames(module)
