"""The typed attributes of an HloInstructionProto (:class:`~traceview.parsers.hlo.attributes.Attributes`),
decoded straight from its fields.

The text reader decodes the same record from the attribute text XLA prints; for every module both forms
describe, the two give equal records (tests/unit/test_hlo_proto_typed.py). Each decoder reads one field
(or a group: a dot's dimension numbers, the device-list forms) and returns the record's values by name;
an instruction's record holds what the fields it has set give, and XLA's defaults for the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from traceview.parsers.hlo.attributes import ConvDims, WindowDim
from traceview.parsers.hlo.proto_attributes import (
    COLLECTIVES,
    REPLICA_GROUP_FIELDS,
    ProtoOp,
    mesh_axis_name,
    replica_group_form,
)
from traceview.parsers.hlo.replica_groups import iota_groups, mesh_groups

Values = dict[str, Any]


def _window(op: ProtoOp, w) -> Values:
    # An unset dilation (0) is XLA's default, 1: text leaves such a window's dilations out.
    return {"window": tuple(WindowDim(d.size, d.stride, d.padding_low, d.padding_high, d.base_dilation or 1,
                                      d.window_dilation or 1) for d in w.dimensions)}


def _is_layout(batch: int, feature: int, spatial, rank: int) -> bool:
    """Whether batch (or input feature), feature and the spatial dimensions number 0 .. rank-1 once each."""
    return sorted([batch, feature, *spatial]) == list(range(rank))


def _conv_dims(op: ProtoOp, c) -> Values:
    """The dimension numbers, or None when they are no layout (what ``dim_labels`` cannot spell)."""
    rank = len(c.input_spatial_dimensions) + 2
    dims = ConvDims(c.input_batch_dimension, c.input_feature_dimension, tuple(c.input_spatial_dimensions),
                    c.kernel_input_feature_dimension, c.kernel_output_feature_dimension,
                    tuple(c.kernel_spatial_dimensions), c.output_batch_dimension, c.output_feature_dimension,
                    tuple(c.output_spatial_dimensions))
    ok = (_is_layout(dims.input_batch, dims.input_feature, dims.input_spatial, rank)
          and _is_layout(dims.kernel_input_feature, dims.kernel_output_feature, dims.kernel_spatial, rank)
          and _is_layout(dims.output_batch, dims.output_feature, dims.output_spatial, rank))
    return {"conv_dims": dims if ok else None}


def _count(name: str) -> Callable[[ProtoOp, int], Values]:
    """A group count: unset (0) or 1 both mean one group."""
    return lambda op, n: {name: n} if n > 1 else {}


def _dot_dims(dnums) -> Values:
    return {"lhs_contracting_dims": tuple(dnums.lhs_contracting_dimensions),
            "rhs_contracting_dims": tuple(dnums.rhs_contracting_dimensions),
            "lhs_batch_dims": tuple(dnums.lhs_batch_dimensions),
            "rhs_batch_dims": tuple(dnums.rhs_batch_dimensions)}


def _ints(name: str) -> Callable[[ProtoOp, Any], Values]:
    return lambda op, values: {name: tuple(values)}


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


def _frontend_attributes(op: ProtoOp, f) -> Values:
    # XLA writes the message on every instruction, mostly empty
    entries = f.map
    return {"frontend_attributes": dict(sorted(entries.items()))} if entries else {}


# proto field -> its decoder (the proto instruction and the field's value -> record values)
_BY_FIELD: dict[str, Callable[[ProtoOp, Any], Values]] = {
    "window": _window,
    "convolution_dimension_numbers": _conv_dims,
    "feature_group_count": _count("feature_group_count"),
    "batch_group_count": _count("batch_group_count"),
    "dot_dimension_numbers": lambda op, d: _dot_dims(d),
    "ragged_dot_dimension_numbers": lambda op, r: _dot_dims(r.dot_dimension_numbers),
    "dimensions": lambda op, d: {} if op.opcode == "iota" else {"dimensions": tuple(d)},  # iota: iota_dimension
    "fft_length": _ints("fft_length"),
    "source_target_pairs": lambda op, pairs: {"source_target_pairs": tuple((p.source, p.target) for p in pairs)},
    "channel_id": lambda op, n: {"channel_id": n} if n > 0 else {},  # non-positive: no channel
    "is_host_transfer": lambda op, flag: {"is_host_transfer": bool(flag)},
    "frontend_attributes": _frontend_attributes,
    "comparison_direction": lambda op, d: {"comparison_direction": d},
    "called_computation_ids": lambda op, ids: {"calls": {k: tuple(v) for k, v in op.roles.items()}},
    **{name: lambda op, value: {"replica_groups": _replica_groups(op.proto)} for name in REPLICA_GROUP_FIELDS},
}


def typed_values(op: ProtoOp) -> Values:
    """The instruction's typed attributes by :class:`Attributes` property name, from the fields it sets."""
    values: Values = {}
    for field, value in op.fields:
        decode = _BY_FIELD.get(field.name)
        if decode is not None:
            values.update(decode(op, value))
    if op.opcode in COLLECTIVES and "replica_groups" not in values:  # no list: every device
        values["replica_groups"] = _replica_groups(op.proto)
    # proto3 leaves 0 unset, so these go by opcode
    if op.opcode == "parameter":
        values["parameter_number"] = op.proto.parameter_number
    elif op.opcode == "get-tuple-element":
        values["index"] = op.proto.tuple_index
    return values
