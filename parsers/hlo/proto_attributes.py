"""HLO instruction attributes of an HloInstructionProto, written the way HLO text prints them
(``lhs_contracting_dims`` -> ``{1}``, ``replica_groups`` -> ``{{0,1},{2,3}}`` or ``[2,4]<=[8]``,
``window`` -> ``{size=3x3 stride=2x2}``, ...), so that a module read from a proto and one read from
text show the same ``Instruction.attributes``; and the instruction's metadata. This text is for
display and for the views that read attribute text: the typed values the cost model reads are decoded
from the fields themselves (:mod:`traceview.parsers.hlo.proto_typed`).

Each attribute has a rule (the opcodes or proto fields it applies to, and its formatter): an
instruction's attributes are the rules that apply to it, in the order XLA prints them.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any, NamedTuple

from traceview.parsers.hlo.model import Shape
from traceview.parsers.hlo.replica_groups import parse_replica_groups
from traceview.parsers.hlo.schema import (
    DOT_ALGORITHMS,
    FFT_TYPES,
    PRECISION_NAMES,
    RNG_ALGORITHMS,
    RNG_DISTRIBUTIONS,
    SHARDING_TYPES,
)


def _ints(values) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def quote(s: str) -> str:
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
    axes = []
    for ref in mesh_list.axes:
        name = mesh_axis_name(mesh_list, ref)
        if ref.HasField("sub_axis_info"):
            axes.append(f"'{name}':({ref.sub_axis_info.pre_size}){ref.sub_axis_info.size}")
        else:
            axes.append(f"'{name}'")
    text = "mesh[" + ",".join(f"'{a.name}'={a.size}" for a in mesh.axes) + "] {" + ",".join(axes) + "}"
    if mesh.device_ids:
        # no confirmed text form for explicit device ids: spell the groups out instead
        return _groups_text(parse_replica_groups(text, device_ids=list(mesh.device_ids)) or [])
    return text


def replica_group_form(ip) -> tuple[str, Any]:
    """Which of its device-list fields an instruction's groups are in, and that field: ``("mesh",
    MeshAxesReplicaGroupListProto)``, ``("iota", IotaReplicaGroupListProto)`` or ``("list", the
    ReplicaGroups)``; the newest form set wins, as in XLA."""
    if ip.HasField("mesh_axes_replica_group_list") and ip.mesh_axes_replica_group_list.mesh.axes:
        return "mesh", ip.mesh_axes_replica_group_list
    if ip.HasField("iota_collective_device_list") and ip.iota_collective_device_list.num_replica_groups:
        return "iota", ip.iota_collective_device_list
    cdl = ip.collective_device_list if ip.HasField("collective_device_list") else None
    if cdl is not None and cdl.HasField("iota_replica_group_list"):
        return "iota", cdl.iota_replica_group_list
    return "list", cdl.replica_groups if cdl is not None and cdl.replica_groups else ip.replica_groups


def mesh_axis_name(mesh_list, ref) -> str:
    """The name of the mesh axis an AxisRefProto points at (its index when out of range)."""
    axes = mesh_list.mesh.axes
    return axes[ref.mesh_axis_index].name if ref.mesh_axis_index < len(axes) else str(ref.mesh_axis_index)


def _replica_groups(ip) -> str:
    form, value = replica_group_form(ip)
    if form == "mesh":
        return _mesh_text(value)
    if form == "iota":
        return _iota_text(value)
    return _groups_text(g.replica_ids for g in value)


COLLECTIVES = frozenset({"all-reduce", "all-reduce-start", "all-gather", "all-gather-start", "reduce-scatter",
                         "all-to-all", "ragged-all-to-all", "collective-broadcast"})
REPLICA_GROUP_FIELDS = ("replica_groups", "collective_device_list", "iota_collective_device_list",
                        "mesh_axes_replica_group_list")
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


def literal_values(lit) -> list | None:
    """A LiteralProto's elements, from the first of its arrays that holds any (None when none does)."""
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
    vals = literal_values(lit)
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


def called_roles(opcode: str, names: list[str], operand_shapes: list[Shape]) -> dict[str, list[str]]:
    """The computations an instruction calls (``names``, in the proto's order), by the attribute HLO text
    prints each under (``to_apply``, ``condition`` and ``body``, ``branch_computations``, ...), in the
    order of ``attributes.CALL_KEYS`` (so the names in the dict's order are the text reader's
    ``called_computations``)."""
    if not names:
        return {}
    if opcode == "while" and len(names) == 2:  # the proto lists the body first
        return {"condition": [names[1]], "body": [names[0]]}
    if opcode == "conditional":
        if len(names) == 2 and operand_shapes and operand_shapes[0].element_type == "pred":
            return {"true_computation": [names[0]], "false_computation": [names[1]]}
        return {"branch_computations": names}
    if opcode == "select-and-scatter" and len(names) == 2:
        return {"select": [names[0]], "scatter": [names[1]]}
    if opcode == "custom-call":
        return {"called_computations": names}
    if opcode in ("async-done", "async-update"):
        return {}  # printed only on async-start
    if opcode in _TO_APPLY_OPS and len(names) == 1:
        return {"to_apply": names}
    return {"calls": names}


_LIST_ROLES = frozenset({"branch_computations", "called_computations"})  # printed in braces even when one


def _called_attributes(roles: dict[str, list[str]]) -> dict[str, str]:
    """The called computations as HLO text prints them: ``%name``, or ``{%a, %b}``."""
    return {key: "%" + names[0] if len(names) == 1 and key not in _LIST_ROLES else
            "{" + ", ".join("%" + n for n in names) + "}" for key, names in roles.items()}


class ProtoOp(NamedTuple):
    """One instruction as the attribute decoders (text and typed) see it."""

    proto: Any                  # the HloInstructionProto
    opcode: str
    shape: Shape
    roles: dict[str, list[str]]  # the computations it calls, by name, under their attributes (called_roles)
    operand_shapes: list[Shape]
    fields: list                # proto.ListFields(): the fields set, a handful of the proto's fifty


def _slice(op: ProtoOp) -> dict[str, str]:
    dims = op.proto.slice_dimensions
    strided = any(s.stride not in (0, 1) for s in dims)  # then all dims show it
    return {"slice": "{" + ", ".join(f"[{s.start}:{s.limit}:{s.stride}]" if strided else f"[{s.start}:{s.limit}]"
                                     for s in dims) + "}"}


def _dimensions(op: ProtoOp) -> dict[str, str]:
    dims = op.proto.dimensions
    if op.opcode == "iota":
        return {"iota_dimension": str(dims[0] if dims else 0)}
    return {"dimensions": _ints(dims)}


def _padding(op: ProtoOp) -> dict[str, str]:
    return {"padding": "x".join(
        f"{d.edge_padding_low}_{d.edge_padding_high}" + (f"_{d.interior_padding}" if d.interior_padding else "")
        for d in op.proto.padding_config.dimensions)}


def _group_counts(op: ProtoOp) -> dict[str, str]:
    ip = op.proto
    counts = (("feature_group_count", ip.feature_group_count), ("batch_group_count", ip.batch_group_count))
    return {name: str(n) for name, n in counts if n > 1}


def _dot_dimensions(op: ProtoOp) -> dict[str, str]:
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


def _gather_dimensions(op: ProtoOp) -> dict[str, str]:
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


def _scatter_dimensions(op: ProtoOp) -> dict[str, str]:
    s = op.proto.scatter_dimension_numbers
    a = {"update_window_dims": _ints(s.update_window_dims), "inserted_window_dims": _ints(s.inserted_window_dims),
         "scatter_dims_to_operand_dims": _ints(s.scatter_dims_to_operand_dims)}
    if s.input_batching_dims:
        a["input_batching_dims"] = _ints(s.input_batching_dims)
    if s.scatter_indices_batching_dims:
        a["scatter_indices_batching_dims"] = _ints(s.scatter_indices_batching_dims)
    a["index_vector_dim"] = str(s.index_vector_dim)
    return a


def _comparison(op: ProtoOp) -> dict[str, str]:
    ip, operands = op.proto, op.operand_shapes
    a = {"direction": ip.comparison_direction}
    if ip.comparison_type and operands and \
            ip.comparison_type != _default_comparison_type(operands[0].element_type):
        a["type"] = ip.comparison_type
    return a


def _precision_config(op: ProtoOp) -> dict[str, str]:
    """``operand_precision`` when an operand asks for more than the default, and the dot ``algorithm``
    when one is set (XLA prints neither otherwise; an algorithm number it has no name for is left out)."""
    config = op.proto.precision_config
    a: dict[str, str] = {}
    if any(config.operand_precision):
        a["operand_precision"] = "{" + ",".join(PRECISION_NAMES.get(p, str(p)) for p in config.operand_precision) + "}"
    if config.algorithm in DOT_ALGORITHMS:
        a["algorithm"] = DOT_ALGORITHMS[config.algorithm]
    return a


def _output_to_operand_aliasing(op: ProtoOp) -> dict[str, str]:
    return {"output_to_operand_aliasing": "{" + ", ".join(
        f"{_ints(al.output_shape_index)}: ({al.operand_index}, {_ints(al.operand_shape_index)})"
        for al in op.proto.output_operand_aliasing) + "}"}


def _flag(name: str) -> Callable[[ProtoOp], dict[str, str]]:
    """A bool field, printed ``name=true`` when set."""
    return lambda op: {name: "true"}


class _Rule(NamedTuple):
    """Attributes HLO text prints: ``formatter`` runs when the instruction's opcode is one of ``opcodes``
    or one of ``fields`` is set in its proto, and returns them (none, one, or a group)."""

    opcodes: frozenset[str]
    fields: frozenset[str]
    formatter: Callable[[ProtoOp], dict[str, str]]


def _rule(formatter: Callable[[ProtoOp], dict[str, str]], opcodes: tuple[str, ...] = (),
          fields: tuple[str, ...] = ()) -> _Rule:
    return _Rule(frozenset(opcodes), frozenset(fields), formatter)


def _flag_rule(field: str) -> _Rule:
    return _rule(_flag(field), fields=(field,))


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
    _rule(lambda op: {"replica_groups": _replica_groups(op.proto)}, opcodes=tuple(COLLECTIVES),
          fields=REPLICA_GROUP_FIELDS),
    _rule(lambda op: {"source_target_pairs": "{" + ",".join(
        f"{{{p.source},{p.target}}}" for p in op.proto.source_target_pairs) + "}"}, fields=("source_target_pairs",)),
    _flag_rule("use_global_device_ids"),
    _rule(_comparison, fields=("comparison_direction",)),
    _flag_rule("is_stable"),
    _rule(_precision_config, fields=("precision_config",)),
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
          {"async_execution_thread": quote(op.proto.async_execution_thread)}, fields=("async_execution_thread",)),
    _rule(lambda op: {"sharding": _sharding(op.proto.sharding)}, fields=("sharding",)),
    _flag_rule("is_composite"),
    _rule(lambda op: _called_attributes(op.roles), fields=("called_computation_ids",)),
    _rule(lambda op: {"custom_call_target": quote(op.proto.custom_call_target)}, fields=("custom_call_target",)),
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


def attributes_of(op: ProtoOp) -> dict[str, str]:
    """The instruction's attributes as HLO text prints them, in its order (see _ATTRIBUTE_RULES)."""
    rules = set(_RULES_BY_OPCODE.get(op.opcode, ()))
    for field, _ in op.fields:
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


def metadata_of(md) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, _ in _METADATA_FIELDS:
        v = getattr(md, key)
        if v:
            out[key] = v if isinstance(v, str) else str(v)
    return out


def metadata_text(md: dict[str, str]) -> str:
    return "{" + " ".join(f"{k}={quote(v)}" if k in _QUOTED_METADATA else f"{k}={v}"
                         for k, v in md.items()) + "}"
