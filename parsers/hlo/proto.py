"""Decode HloProto / HloModuleProto bytes into :class:`HloModule`.

Attributes are rendered the way HLO text prints them (``lhs_contracting_dims``
-> ``{1}``, ``replica_groups`` -> ``{{0,1},{2,3}}`` or ``[2,4]<=[8]``, ``window``
-> ``{size=3x3 stride=2x2}``, ...), so the cost model reads one form whatever
the source. Inputs: the bytes of a trace's ``/host:metadata`` HLO protos,
``*.hlo_proto.pb`` files written beside traces, and XLA dump files
``*.hlo.pb`` (optionally ``.xz``/``.gz``).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError

from traceview.errors import HloError
from traceview.parsers.hlo.checks import check_module
from traceview.parsers.hlo.files import read_bytes
from traceview.parsers.hlo.model import Computation, HloModule, Instruction, Shape, source_name
from traceview.parsers.hlo.schema import (
    FFT_TYPES,
    PRECISION_NAMES,
    PRIMITIVE_TYPES,
    RNG_ALGORITHMS,
    RNG_DISTRIBUTIONS,
    SHARDING_TYPES,
    message_class,
)
from traceview.parsers.hlo.text import apply_stack_frames, called_from_attributes, parse_replica_groups

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
# attribute rendering (as HLO text prints them)

def _ints(values) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def _quote(s: str) -> str:
    return encode_basestring(s)  # what json.dumps(s, ensure_ascii=False) returns, without building an encoder


def _window(w) -> str:
    dims = w.dimensions
    parts = ["size=" + "x".join(str(d.size) for d in dims)]
    if any(d.stride != 1 for d in dims):
        parts.append("stride=" + "x".join(str(d.stride) for d in dims))
    if any(d.padding_low or d.padding_high for d in dims):
        parts.append("pad=" + "x".join(f"{d.padding_low}_{d.padding_high}" for d in dims))
    if any(d.base_dilation not in (0, 1) for d in dims):
        parts.append("lhs_dilate=" + "x".join(str(d.base_dilation) for d in dims))
    if any(d.window_dilation not in (0, 1) for d in dims):
        parts.append("rhs_dilate=" + "x".join(str(d.window_dilation) for d in dims))
    if any(d.window_reversal for d in dims):
        parts.append("rhs_reversal=" + "x".join("1" if d.window_reversal else "0" for d in dims))
    return "{" + " ".join(parts) + "}"


def _dim_labels(c) -> str:
    n = len(c.input_spatial_dimensions) + 2

    def labels(batch: int, feature: int, spatial, b: str, f: str) -> str:
        out = ["?"] * n
        out[batch], out[feature] = b, f
        for i, d in enumerate(spatial):
            out[d] = str(i)
        return "".join(out)

    lhs = labels(c.input_batch_dimension, c.input_feature_dimension, c.input_spatial_dimensions, "b", "f")
    rhs = labels(c.kernel_input_feature_dimension, c.kernel_output_feature_dimension,
                 c.kernel_spatial_dimensions, "i", "o")
    out = labels(c.output_batch_dimension, c.output_feature_dimension, c.output_spatial_dimensions, "b", "f")
    return f"{lhs}_{rhs}->{out}"


def _iota_text(iota) -> str:
    text = f"[{iota.num_replica_groups},{iota.num_devices_per_group}]<=[" + \
        ",".join(map(str, iota.iota_reshape_dims)) + "]"
    perm = list(iota.iota_transpose_perm)
    if perm and perm != sorted(perm):
        text += "T(" + ",".join(map(str, perm)) + ")"
    return text


def _groups_text(groups) -> str:
    return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"


def _mesh_text(mesh_list) -> str:
    mesh = mesh_list.mesh
    names = [a.name for a in mesh.axes]
    axes = []
    for ref in mesh_list.axes:
        name = names[ref.mesh_axis_index] if ref.mesh_axis_index < len(names) else str(ref.mesh_axis_index)
        if ref.HasField("sub_axis_info"):
            axes.append(f"'{name}':({ref.sub_axis_info.pre_size}){ref.sub_axis_info.size}")
        else:
            axes.append(f"'{name}'")
    text = "mesh[" + ",".join(f"'{a.name}'={a.size}" for a in mesh.axes) + "] {" + ",".join(axes) + "}"
    if mesh.device_ids:
        # no confirmed text form for explicit device ids: spell the groups out instead
        return _groups_text(parse_replica_groups(text, device_ids=list(mesh.device_ids)) or [])
    return text


def _replica_groups(ip) -> str:
    if ip.HasField("mesh_axes_replica_group_list") and ip.mesh_axes_replica_group_list.mesh.axes:
        return _mesh_text(ip.mesh_axes_replica_group_list)
    if ip.HasField("iota_collective_device_list") and ip.iota_collective_device_list.num_replica_groups:
        return _iota_text(ip.iota_collective_device_list)
    cdl = ip.collective_device_list if ip.HasField("collective_device_list") else None
    if cdl is not None and cdl.HasField("iota_replica_group_list"):
        return _iota_text(cdl.iota_replica_group_list)
    groups = cdl.replica_groups if cdl is not None and cdl.replica_groups else ip.replica_groups
    return _groups_text(g.replica_ids for g in groups)


_COLLECTIVES = {"all-reduce", "all-reduce-start", "all-gather", "all-gather-start", "reduce-scatter",
                "all-to-all", "ragged-all-to-all", "collective-broadcast"}
_TO_APPLY_OPS = {"reduce", "reduce-window", "map", "sort", "scatter", "call", "all-reduce",
                 "all-reduce-start", "reduce-scatter"}


def _bf16(x: float) -> float:
    """``x`` rounded to bfloat16 (round to nearest even), as a float."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _f16(x: float) -> float:
    return struct.unpack("<e", struct.pack("<e", x))[0]


# element type -> (rounding to that type, digits10, max_digits10) of C++'s numeric_limits
_FLOAT_FORMATS: dict[str, tuple[Callable[[float], float], int, int]] = {"bf16": (_bf16, 2, 4), "f16": (_f16, 3, 5), "f32": (_f32, 6, 9), "c64": (_f32, 6, 9),
                  "f64": (float, 15, 17), "c128": (float, 15, 17)}


def _scalar_text(v, etype: str = "f64") -> str:
    """A literal element as XLA prints it: ``%.{digits10}g`` when that round-trips in the
    element type, else ``%.{max_digits10}g``."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if not isinstance(v, float):
        return str(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    to_type, digits, max_digits = _FLOAT_FORMATS.get(etype, _FLOAT_FORMATS["f32"])
    text = f"{v:.{digits}g}"
    return text if to_type(float(text)) == to_type(v) else f"{v:.{max_digits}g}"


# little-endian byte fields of LiteralProto -> numpy dtype ("bf16" is decoded by hand)
_BYTE_LITERALS = (("u8s", "<u1"), ("s8s", "<i1"), ("u16s", "<u2"), ("s16s", "<i2"), ("f16s", "<f2"),
                  ("bf16s", "bf16"))


def _literal_values(lit) -> list | None:
    for field in ("preds", "s32s", "s64s", "u32s", "u64s", "f32s", "f64s"):
        vals = getattr(lit, field)
        if vals:
            return list(vals)
    for field, dtype in _BYTE_LITERALS:
        raw = getattr(lit, field)
        if raw:
            import numpy as np

            raw = raw[: len(raw) - len(raw) % 2] if dtype != "<u1" and dtype != "<i1" else raw  # whole elements
            if dtype == "bf16":  # the top half of a float32
                return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).tolist()
            return np.frombuffer(raw, dtype).tolist()
    return None


def _literal(lit, shape: Shape) -> str:
    """Scalars and 1-D literals as text prints them; bigger ones elided like XLA's dumps."""
    if shape.is_tuple or len(shape.dims) > 1:
        return "{...}"
    vals = _literal_values(lit)
    if not vals:
        return "{...}"
    if shape.element_type == "pred":
        vals = [bool(v) for v in vals]
    if not shape.dims:
        return _scalar_text(vals[0], shape.element_type)
    return "{" + ", ".join(_scalar_text(v, shape.element_type) for v in vals) + "}"


def _sharding(sh) -> str:
    kind = SHARDING_TYPES.get(sh.type, str(sh.type))
    if kind == "tuple":
        return "{" + ", ".join(_sharding(t) for t in sh.tuple_shardings) + "}"
    if kind == "maximal":
        return "{maximal device=" + str(sh.tile_assignment_devices[0] if sh.tile_assignment_devices else 0) + "}"
    if kind != "other":
        return "{" + kind + "}"
    dims = "[" + ",".join(map(str, sh.tile_assignment_dimensions)) + "]"
    if sh.iota_reshape_dims:
        devices = "<=[" + ",".join(map(str, sh.iota_reshape_dims)) + "]"
        perm = list(sh.iota_transpose_perm)
        if perm and perm != sorted(perm):
            devices += "T(" + ",".join(map(str, perm)) + ")"
    else:
        devices = ",".join(map(str, sh.tile_assignment_devices))
    text = "{devices=" + dims + devices
    if sh.replicate_on_last_tile_dim:
        text += " last_tile_dim_replicate"
    if sh.last_tile_dims:
        text += " last_tile_dims={" + ", ".join(SHARDING_TYPES.get(t, str(t)) for t in sh.last_tile_dims) + "}"
    return text + "}"


def _default_comparison_type(etype: str) -> str:
    if etype.startswith(("f", "bf", "c")):
        return "FLOAT"
    if etype.startswith("s"):
        return "SIGNED"
    return "UNSIGNED"


def _called_attributes(ip, opcode: str, names: list[str], operand_shapes: list[Shape]) -> dict[str, str]:
    """Which attribute each called computation is printed under."""
    if not names:
        return {}
    ref = ["%" + n for n in names]
    if opcode == "while" and len(ref) == 2:  # the proto lists the body first
        return {"condition": ref[1], "body": ref[0]}
    if opcode == "conditional":
        if len(ref) == 2 and operand_shapes and operand_shapes[0].element_type == "pred":
            return {"true_computation": ref[0], "false_computation": ref[1]}
        return {"branch_computations": "{" + ", ".join(ref) + "}"}
    if opcode == "select-and-scatter" and len(ref) == 2:
        return {"select": ref[0], "scatter": ref[1]}
    if opcode == "custom-call":
        return {"called_computations": "{" + ", ".join(ref) + "}"}
    if opcode in ("async-done", "async-update"):
        return {}  # printed only on async-start
    if opcode in _TO_APPLY_OPS and len(ref) == 1:
        return {"to_apply": ref[0]}
    return {"calls": ref[0] if len(ref) == 1 else "{" + ", ".join(ref) + "}"}


class _Op(NamedTuple):
    """One instruction as the attribute formatters see it."""

    proto: Any                  # the HloInstructionProto
    opcode: str
    shape: Shape
    called: list[str]           # the computations it calls, by name
    operand_shapes: list[Shape]


def _slice(op: _Op) -> dict[str, str]:
    dims = op.proto.slice_dimensions
    strided = any(s.stride not in (0, 1) for s in dims)  # then all dims show it
    return {"slice": "{" + ", ".join(f"[{s.start}:{s.limit}:{s.stride}]" if strided else f"[{s.start}:{s.limit}]"
                                     for s in dims) + "}"}


def _dimensions(op: _Op) -> dict[str, str]:
    dims = op.proto.dimensions
    if op.opcode == "iota":
        return {"iota_dimension": str(dims[0] if dims else 0)}
    return {"dimensions": _ints(dims)}


def _padding(op: _Op) -> dict[str, str]:
    return {"padding": "x".join(
        f"{d.edge_padding_low}_{d.edge_padding_high}" + (f"_{d.interior_padding}" if d.interior_padding else "")
        for d in op.proto.padding_config.dimensions)}


def _group_counts(op: _Op) -> dict[str, str]:
    ip = op.proto
    counts = (("feature_group_count", ip.feature_group_count), ("batch_group_count", ip.batch_group_count))
    return {name: str(n) for name, n in counts if n > 1}


def _dot_dimensions(op: _Op) -> dict[str, str]:
    ip = op.proto
    ragged = ip.HasField("ragged_dot_dimension_numbers")
    dnums = ip.dot_dimension_numbers if ip.HasField("dot_dimension_numbers") else \
        ip.ragged_dot_dimension_numbers.dot_dimension_numbers
    a = {key: _ints(vals) for key, vals in (("lhs_batch_dims", dnums.lhs_batch_dimensions),
                                            ("lhs_contracting_dims", dnums.lhs_contracting_dimensions),
                                            ("rhs_batch_dims", dnums.rhs_batch_dimensions),
                                            ("rhs_contracting_dims", dnums.rhs_contracting_dimensions)) if vals}
    if ragged:
        r = ip.ragged_dot_dimension_numbers
        a["lhs_ragged_dims"] = _ints(r.lhs_ragged_dimensions)
        a["rhs_group_dims"] = _ints(r.rhs_group_dimensions)
    return a


def _gather_dimensions(op: _Op) -> dict[str, str]:
    g = op.proto.gather_dimension_numbers
    a = {"offset_dims": _ints(g.offset_dims), "collapsed_slice_dims": _ints(g.collapsed_slice_dims),
         "start_index_map": _ints(g.start_index_map)}
    if g.operand_batching_dims:
        a["operand_batching_dims"] = _ints(g.operand_batching_dims)
    if g.start_indices_batching_dims:
        a["start_indices_batching_dims"] = _ints(g.start_indices_batching_dims)
    a["index_vector_dim"] = str(g.index_vector_dim)
    a["slice_sizes"] = _ints(op.proto.gather_slice_sizes)
    return a


def _scatter_dimensions(op: _Op) -> dict[str, str]:
    s = op.proto.scatter_dimension_numbers
    a = {"update_window_dims": _ints(s.update_window_dims), "inserted_window_dims": _ints(s.inserted_window_dims),
         "scatter_dims_to_operand_dims": _ints(s.scatter_dims_to_operand_dims)}
    if s.input_batching_dims:
        a["input_batching_dims"] = _ints(s.input_batching_dims)
    if s.scatter_indices_batching_dims:
        a["scatter_indices_batching_dims"] = _ints(s.scatter_indices_batching_dims)
    a["index_vector_dim"] = str(s.index_vector_dim)
    return a


def _comparison(op: _Op) -> dict[str, str]:
    ip, operands = op.proto, op.operand_shapes
    a = {"direction": ip.comparison_direction}
    if ip.comparison_type and operands and \
            ip.comparison_type != _default_comparison_type(operands[0].element_type):
        a["type"] = ip.comparison_type
    return a


def _operand_precision(op: _Op) -> dict[str, str]:
    precisions = op.proto.precision_config.operand_precision
    if not any(precisions):
        return {}
    return {"operand_precision": "{" + ",".join(PRECISION_NAMES.get(p, str(p)) for p in precisions) + "}"}


def _output_to_operand_aliasing(op: _Op) -> dict[str, str]:
    return {"output_to_operand_aliasing": "{" + ", ".join(
        f"{_ints(al.output_shape_index)}: ({al.operand_index}, {_ints(al.operand_shape_index)})"
        for al in op.proto.output_operand_aliasing) + "}"}


def _flag(name: str) -> Callable[[_Op], dict[str, str]]:
    """A bool field, printed ``name=true`` when set."""
    return lambda op: {name: "true"}


class _Rule(NamedTuple):
    """Attributes HLO text prints: ``formatter`` runs when the instruction's opcode is one of ``opcodes``
    or one of ``fields`` is set in its proto, and returns them (none, one, or a group)."""

    opcodes: frozenset[str]
    fields: frozenset[str]
    formatter: Callable[[_Op], dict[str, str]]


def _rule(formatter: Callable[[_Op], dict[str, str]], opcodes: tuple[str, ...] = (),
          fields: tuple[str, ...] = ()) -> _Rule:
    return _Rule(frozenset(opcodes), frozenset(fields), formatter)


def _flag_rule(field: str) -> _Rule:
    return _rule(_flag(field), fields=(field,))


_REPLICA_GROUP_FIELDS = ("replica_groups", "collective_device_list", "iota_collective_device_list",
                         "mesh_axes_replica_group_list")

# The attributes HLO text prints, in its order.
_ATTRIBUTE_RULES = (
    _rule(lambda op: {"parameter_number": str(op.proto.parameter_number)}, opcodes=("parameter",)),
    _rule(lambda op: {"literal": _literal(op.proto.literal, op.shape)}, opcodes=("constant",)),
    _rule(lambda op: {"index": str(op.proto.tuple_index)}, opcodes=("get-tuple-element",)),
    _rule(lambda op: {"kind": op.proto.fusion_kind} if op.opcode == "fusion" else {}, fields=("fusion_kind",)),
    _rule(_slice, fields=("slice_dimensions",)),
    _rule(_dimensions, opcodes=("iota", "broadcast", "transpose", "reduce"), fields=("dimensions",)),
    _rule(lambda op: {"dynamic_slice_sizes": _ints(op.proto.dynamic_slice_sizes)}, fields=("dynamic_slice_sizes",)),
    _rule(_padding, fields=("padding_config",)),
    _rule(lambda op: {"window": _window(op.proto.window)} if op.proto.window.dimensions else {}, fields=("window",)),
    _rule(lambda op: {"dim_labels": _dim_labels(op.proto.convolution_dimension_numbers)},
          fields=("convolution_dimension_numbers",)),
    _rule(_group_counts, opcodes=("convolution",)),
    _rule(_dot_dimensions, fields=("dot_dimension_numbers", "ragged_dot_dimension_numbers")),
    _rule(_gather_dimensions, fields=("gather_dimension_numbers",)),
    _rule(_scatter_dimensions, fields=("scatter_dimension_numbers",)),
    _flag_rule("indices_are_sorted"),
    _flag_rule("unique_indices"),
    _rule(lambda op: {"channel_id": str(op.proto.channel_id)} if op.proto.channel_id > 0 else {},
          fields=("channel_id",)),
    _rule(lambda op: {"replica_groups": _replica_groups(op.proto)}, opcodes=tuple(_COLLECTIVES),
          fields=_REPLICA_GROUP_FIELDS),
    _rule(lambda op: {"source_target_pairs": "{" + ",".join(
        f"{{{p.source},{p.target}}}" for p in op.proto.source_target_pairs) + "}"}, fields=("source_target_pairs",)),
    _flag_rule("use_global_device_ids"),
    _rule(_comparison, fields=("comparison_direction",)),
    _flag_rule("is_stable"),
    _rule(_operand_precision, fields=("precision_config",)),
    _rule(lambda op: {"exponent_bits": str(op.proto.exponent_bits), "mantissa_bits": str(op.proto.mantissa_bits)},
          opcodes=("reduce-precision",)),
    _rule(lambda op: {"fft_type": FFT_TYPES.get(op.proto.fft_type, str(op.proto.fft_type)),
                      "fft_length": _ints(op.proto.fft_length)}, opcodes=("fft",)),
    _rule(lambda op: {"distribution": RNG_DISTRIBUTIONS.get(op.proto.distribution, str(op.proto.distribution))},
          opcodes=("rng",)),
    _rule(lambda op: {"algorithm": RNG_ALGORITHMS.get(op.proto.rng_algorithm, str(op.proto.rng_algorithm))},
          opcodes=("rng-bit-generator",)),
    _rule(lambda op: {"epsilon": repr(op.proto.epsilon), "feature_index": str(op.proto.feature_index)},
          opcodes=("batch-norm-training", "batch-norm-inference", "batch-norm-grad")),
    _rule(lambda op: {"k": str(op.proto.k), "largest": "true" if op.proto.largest else "false"}, opcodes=("topk",)),
    _flag_rule("is_host_transfer"),
    _rule(lambda op: {} if op.proto.async_execution_thread == "main" else
          {"async_execution_thread": _quote(op.proto.async_execution_thread)}, fields=("async_execution_thread",)),
    _rule(lambda op: {"sharding": _sharding(op.proto.sharding)}, fields=("sharding",)),
    _flag_rule("is_composite"),
    _rule(lambda op: _called_attributes(op.proto, op.opcode, op.called, op.operand_shapes),
          fields=("called_computation_ids",)),
    _rule(lambda op: {"custom_call_target": _quote(op.proto.custom_call_target)}, fields=("custom_call_target",)),
    _rule(_output_to_operand_aliasing, fields=("output_operand_aliasing",)),
    _flag_rule("custom_call_has_side_effect"),
)


def _rules_by(keys: Callable[[_Rule], frozenset[str]]) -> dict[str, tuple[int, ...]]:
    """Opcode or field (as ``keys`` gives them) -> the indexes of the rules that run for it."""
    index: dict[str, list[int]] = {}
    for i, rule in enumerate(_ATTRIBUTE_RULES):
        for key in keys(rule):
            index.setdefault(key, []).append(i)
    return {key: tuple(rules) for key, rules in index.items()}


_RULES_BY_OPCODE = _rules_by(lambda rule: rule.opcodes)
_RULES_BY_FIELD = _rules_by(lambda rule: rule.fields)


def _attributes(op: _Op) -> dict[str, str]:
    """The instruction's attributes as HLO text prints them, in its order (see _ATTRIBUTE_RULES)."""
    rules = set(_RULES_BY_OPCODE.get(op.opcode, ()))
    for field, _ in op.proto.ListFields():  # the fields set: a handful of the proto's fifty
        rules.update(_RULES_BY_FIELD.get(field.name, ()))
    a: dict[str, str] = {}
    for i in sorted(rules):
        a.update(_ATTRIBUTE_RULES[i].formatter(op))
    return a


# OpMetadata fields in the order XLA's OpMetadataToString prints them; True = a quoted string
_METADATA_FIELDS = (("op_type", True), ("op_name", True), ("source_file", True), ("source_line", False),
                    ("source_end_line", False), ("source_column", False), ("source_end_column", False),
                    ("deduplicated_name", True), ("scheduling_name", True), ("stack_frame_id", False))
_QUOTED_METADATA = {k for k, quoted in _METADATA_FIELDS if quoted}


def _metadata(md) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, _ in _METADATA_FIELDS:
        v = getattr(md, key)
        if v:
            out[key] = v if isinstance(v, str) else str(v)
    return out


def _metadata_text(md: dict[str, str]) -> str:
    return "{" + " ".join(f"{k}={_quote(v)}" if k in _QUOTED_METADATA else f"{k}={v}"
                          for k, v in md.items()) + "}"


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
        attrs = _attributes(_Op(ip, opcode, shapes[ip.id], self.called(ip), [shapes[i] for i in ip.operand_ids]))
        metadata = _metadata(ip.metadata) if ip.HasField("metadata") else {}
        backend_config = ip.backend_config.decode("utf-8", errors="replace") if ip.backend_config else None
        attrs.update(_trailing_attributes(ip, metadata, backend_config, names))
        return Instruction(
            name=ip.name, opcode=opcode, shape=shapes[ip.id], operands=operands, attributes=attrs,
            called_computations=called_from_attributes(attrs), metadata=metadata, backend_config=backend_config,
            custom_call_target=ip.custom_call_target or None,
            fusion_kind=(ip.fusion_kind or None) if opcode == "fusion" else None, id=ip.id)

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
        a["metadata"] = _metadata_text(metadata)
    if backend_config is not None:
        a["backend_config"] = backend_config if backend_config.startswith("{") else _quote(backend_config)
    if ip.HasField("frontend_attributes") and ip.frontend_attributes.map:
        a["frontend_attributes"] = "{" + ",".join(
            f"{k}={_quote(v)}" for k, v in sorted(ip.frontend_attributes.map.items())) + "}"
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
