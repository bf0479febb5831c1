"""The typed attributes of an HloInstructionProto (:class:`~traceview.parsers.hlo.attributes.Attributes`),
decoded straight from its fields.

The text reader decodes the same record from the attribute text XLA prints; for every module both forms
describe, the two give equal records (tests/unit/test_hlo_proto_typed.py). Each decoder reads one field
(or a group: a dot's dimension numbers, the device-list forms) and returns the record's values by name;
an instruction's record holds what the fields it has set give, and XLA's defaults for the rest. The
decoders write into the one dict the record keeps (few objects per instruction: a module has tens of
thousands).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from traceview.parsers.hlo.attributes import ConvDims, Precision, WindowDim, integer_scalar_type
from traceview.parsers.hlo.proto_attributes import (
    COLLECTIVES,
    REPLICA_GROUP_FIELDS,
    ProtoOp,
    literal_values,
    mesh_axis_name,
    replica_group_form,
)
from traceview.parsers.hlo.replica_groups import iota_groups, mesh_groups
from traceview.parsers.hlo.schema import DOT_ALGORITHMS, PRECISION_NAMES, SHARDING_TYPES, message_class
from traceview.parsers.hlo.sharding import TILED, Sharding, iota_devices, listed_devices

Values = dict[str, Any]
Decoder = Callable[[ProtoOp, Any, Values], None]  # (instruction, the field's value, the values to fill)


def _window(op: ProtoOp, w, values: Values) -> None:
    # An unset dilation (0) is XLA's default, 1: text leaves such a window's dilations out.
    values["window"] = tuple(WindowDim(d.size, d.stride, d.padding_low, d.padding_high, d.base_dilation or 1,
                                       d.window_dilation or 1) for d in w.dimensions)


def _is_layout(batch: int, feature: int, spatial, rank: int) -> bool:
    """Whether batch (or input feature), feature and the spatial dimensions number 0 .. rank-1 once each."""
    return sorted([batch, feature, *spatial]) == list(range(rank))


def _conv_dims(op: ProtoOp, c, values: Values) -> None:
    """The dimension numbers, or None when they are no layout (what ``dim_labels`` cannot spell)."""
    rank = len(c.input_spatial_dimensions) + 2
    dims = ConvDims(c.input_batch_dimension, c.input_feature_dimension, tuple(c.input_spatial_dimensions),
                    c.kernel_input_feature_dimension, c.kernel_output_feature_dimension,
                    tuple(c.kernel_spatial_dimensions), c.output_batch_dimension, c.output_feature_dimension,
                    tuple(c.output_spatial_dimensions))
    ok = (_is_layout(dims.input_batch, dims.input_feature, dims.input_spatial, rank)
          and _is_layout(dims.kernel_input_feature, dims.kernel_output_feature, dims.kernel_spatial, rank)
          and _is_layout(dims.output_batch, dims.output_feature, dims.output_spatial, rank))
    values["conv_dims"] = dims if ok else None


def _count(name: str) -> Decoder:
    """A group count: unset (0) or 1 both mean one group."""
    def decode(op: ProtoOp, n: int, values: Values) -> None:
        if n > 1:
            values[name] = n
    return decode


def _dot_dims(dnums, values: Values) -> None:
    values["lhs_contracting_dims"] = tuple(dnums.lhs_contracting_dimensions)
    values["rhs_contracting_dims"] = tuple(dnums.rhs_contracting_dimensions)
    values["lhs_batch_dims"] = tuple(dnums.lhs_batch_dimensions)
    values["rhs_batch_dims"] = tuple(dnums.rhs_batch_dimensions)


def _as(name: str, convert: Callable[[Any], Any] = tuple) -> Decoder:
    """The field's value, converted, under ``name``."""
    def decode(op: ProtoOp, value, values: Values) -> None:
        values[name] = convert(value)
    return decode


def _replica_groups(ip) -> tuple[tuple[int, ...], ...] | None:
    """The device groups of whichever device-list form the instruction uses (see replica_group_form)."""
    form, value = replica_group_form(ip)
    if form == "mesh":
        axes = [(a.name, a.size) for a in value.mesh.axes]
        wanted = [(mesh_axis_name(value, ref), ref.sub_axis_info.pre_size, ref.sub_axis_info.size)
                  if ref.HasField("sub_axis_info") else (mesh_axis_name(value, ref), None, None)
                  for ref in value.axes]
        groups = mesh_groups(axes, wanted, list(value.mesh.device_ids) or None)
    elif form == "iota":
        groups = iota_groups(value.num_replica_groups, value.num_devices_per_group, list(value.iota_reshape_dims),
                             list(value.iota_transpose_perm))
    else:
        return tuple(tuple(g.replica_ids) for g in value)
    return None if groups is None else tuple(tuple(int(x) for x in g) for g in groups)


def _replica_group_mesh(ip) -> tuple[tuple[str, int], ...]:
    """The mesh of a mesh-form device list over the iota device order (one over listed device ids is
    written out as its groups, as text would print it); () otherwise."""
    form, value = replica_group_form(ip)
    if form != "mesh" or value.mesh.device_ids:
        return ()
    return tuple((a.name, a.size) for a in value.mesh.axes)


def sharding_from_proto(sh) -> Sharding:
    """The sharding an OpSharding message holds (the elements of a tuple sharding are not decoded)."""
    kind = SHARDING_TYPES.get(sh.type, str(sh.type))
    if kind == "maximal":
        return Sharding(kind, devices=(sh.tile_assignment_devices[0] if sh.tile_assignment_devices else 0,))
    if kind != TILED:
        return Sharding(kind)
    tiles = tuple(sh.tile_assignment_dimensions)
    if sh.iota_reshape_dims:
        devices = iota_devices(tiles, tuple(sh.iota_reshape_dims), tuple(sh.iota_transpose_perm))
    else:
        devices = listed_devices(tiles, tuple(sh.tile_assignment_devices))
    return Sharding(kind, tiles, devices, bool(sh.replicate_on_last_tile_dim),
                    tuple(SHARDING_TYPES.get(t, str(t)) for t in sh.last_tile_dims))


@lru_cache(maxsize=4096)
def _sharding_of(data: bytes) -> Sharding:
    """The sharding of a serialized OpSharding. A module repeats a few shardings on many instructions:
    keyed on its bytes, each is decoded once (reading a message's fields costs some 30 times more than
    serializing it)."""
    return sharding_from_proto(message_class("OpSharding").FromString(data))


def _sharding(op: ProtoOp, sh, values: Values) -> None:
    values["sharding"] = _sharding_of(sh.SerializeToString())


def _frontend_attributes(op: ProtoOp, f, values: Values) -> None:
    entries = f.map  # XLA writes the message on every instruction, mostly empty
    if entries:
        values["frontend_attributes"] = dict(sorted(entries.items()))


def _dimensions(op: ProtoOp, dims, values: Values) -> None:
    if op.opcode != "iota":  # an iota's dimension is its iota_dimension
        values["dimensions"] = tuple(dims)


def _channel_id(op: ProtoOp, n: int, values: Values) -> None:
    if n > 0:  # non-positive: no channel
        values["channel_id"] = n


def _calls(op: ProtoOp, ids, values: Values) -> None:
    values["calls"] = {key: tuple(names) for key, names in op.roles.items()}


@lru_cache(maxsize=256)
def _precision_of(numbers: tuple[int, ...], algorithm: int) -> Precision | None:
    """Operand precisions only when one is not the default, and named algorithms: what text prints. A
    module repeats a few configs on many dots: each is one record."""
    operands = tuple(PRECISION_NAMES.get(p, str(p)) for p in numbers) if any(numbers) else ()
    name = DOT_ALGORITHMS.get(algorithm)
    return Precision(operands, name) if operands or name else None


def _precision(op: ProtoOp, config, values: Values) -> None:
    precision = _precision_of(tuple(config.operand_precision), config.algorithm)
    if precision is not None:
        values["precision"] = precision


def _async_execution_thread(op: ProtoOp, thread: str, values: Values) -> None:
    if thread != "main":  # XLA's text prints no thread for the main one
        values["async_execution_thread"] = thread


def _groups(op: ProtoOp, field, values: Values) -> None:
    values["replica_groups"] = _replica_groups(op.proto)
    mesh = _replica_group_mesh(op.proto)
    if mesh:
        values["replica_group_mesh"] = mesh


def _integer_scalar(op: ProtoOp) -> int | None:
    """An integer scalar constant's value, from the LiteralProto's integer arrays (s8/u8/s16/u16 are bytes);
    None when the constant is no integer scalar, or its literal holds no integer (pred or float values)."""
    if integer_scalar_type(op.opcode, op.shape.element_type, op.shape.dims) is None:
        return None
    values = literal_values(op.proto.literal)
    value = values[0] if values else None
    return value if type(value) is int else None  # not bool: a pred array's True is no integer


# proto field -> its decoder
_BY_FIELD: dict[str, Decoder] = {
    "window": _window,
    "convolution_dimension_numbers": _conv_dims,
    "feature_group_count": _count("feature_group_count"),
    "batch_group_count": _count("batch_group_count"),
    "dot_dimension_numbers": lambda op, d, values: _dot_dims(d, values),
    "ragged_dot_dimension_numbers": lambda op, r, values: _dot_dims(r.dot_dimension_numbers, values),
    "dimensions": _dimensions,
    "fft_length": _as("fft_length"),
    "source_target_pairs": _as("source_target_pairs", lambda pairs: tuple((p.source, p.target) for p in pairs)),
    "channel_id": _channel_id,
    "is_host_transfer": _as("is_host_transfer", bool),
    "use_global_device_ids": _as("use_global_device_ids", bool),
    "sharding": _sharding,
    "frontend_attributes": _frontend_attributes,
    "comparison_direction": _as("comparison_direction", str),
    "precision_config": _precision,
    "async_execution_thread": _async_execution_thread,
    "called_computation_ids": _calls,
    **dict.fromkeys(REPLICA_GROUP_FIELDS, _groups),
}


def typed_values(op: ProtoOp) -> Values:
    """The instruction's typed attributes by :class:`Attributes` property name, from the fields it sets."""
    values: Values = {}
    for field, value in op.fields:
        decode = _BY_FIELD.get(field.name)
        if decode is not None:
            decode(op, value, values)
    if op.opcode in COLLECTIVES and "replica_groups" not in values:  # no list: every device
        values["replica_groups"] = _replica_groups(op.proto)
    # proto3 leaves 0 unset, so these go by opcode
    if op.opcode == "parameter":
        values["parameter_number"] = op.proto.parameter_number
    elif op.opcode == "get-tuple-element":
        values["index"] = op.proto.tuple_index
    elif op.opcode == "constant":
        value = _integer_scalar(op)
        if value is not None:
            values["integer_scalar"] = value
    return values
