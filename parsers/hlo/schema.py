"""The subset of XLA's HLO protobuf schema that traceview reads.

XLA does not ship Python bindings for ``xla/service/hlo.proto`` and
``xla/xla_data.proto``, so the messages are declared here, at run time, with
``descriptor_pb2``; field names and numbers follow XLA's files. Fields that are
not declared are skipped by the protobuf decoder, so old and new dumps both
parse. Enums are declared as plain ``int32`` (same wire format), and mapped to
names where we render them.
"""

from __future__ import annotations

from functools import cache, lru_cache

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "traceview_xla"

# message -> [(field, number, type, repeated?)]; a type starting with an upper
# case letter is a message of this schema.
_SCHEMA: dict[str, list[tuple[str, int, str, bool]]] = {
    "HloProto": [("hlo_module", 1, "HloModuleProto", False)],
    "HloModuleProto": [
        ("name", 1, "string", False), ("entry_computation_name", 2, "string", False),
        ("computations", 3, "HloComputationProto", True),
        ("host_program_shape", 4, "ProgramShapeProto", False),
        ("id", 5, "int64", False), ("entry_computation_id", 6, "int64", False),
        ("schedule", 7, "HloScheduleProto", False),
        ("input_output_alias", 8, "HloInputOutputAliasProto", False),
        ("stack_frame_index", 17, "StackFrameIndexProto", False),
    ],
    "HloInputOutputAliasProto": [("entries", 1, "AliasEntryProto", True)],
    "AliasEntryProto": [("output_shape_index", 1, "int64", True), ("parameter_number", 2, "int64", False),
                        ("parameter_shape_index", 3, "int64", True), ("kind", 4, "int32", False)],
    "HloScheduleProto": [("sequences", 1, "HloScheduleProto.SequencesEntry", True)],
    "InstructionSequence": [("instruction_ids", 1, "int64", True)],
    "StackFrameIndexProto": [
        ("file_names", 1, "string", True), ("function_names", 2, "string", True),
        ("file_locations", 3, "FileLocation", True), ("stack_frames", 4, "StackFrame", True),
    ],
    "FileLocation": [("file_name_id", 1, "int32", False), ("function_name_id", 2, "int32", False),
                     ("line", 3, "int32", False), ("column", 4, "int32", False)],
    "StackFrame": [("file_location_id", 1, "int32", False), ("parent_frame_id", 2, "int32", False)],
    "HloComputationProto": [
        ("name", 1, "string", False), ("instructions", 2, "HloInstructionProto", True),
        ("program_shape", 4, "ProgramShapeProto", False),
        ("id", 5, "int64", False), ("root_id", 6, "int64", False),
        ("is_fusion_computation", 7, "bool", False), ("execution_thread", 8, "string", False),
    ],
    "HloInstructionProto": [
        ("name", 1, "string", False), ("opcode", 2, "string", False), ("shape", 3, "ShapeProto", False),
        ("metadata", 7, "OpMetadata", False), ("literal", 8, "LiteralProto", False),
        ("parameter_number", 9, "int64", False), ("fusion_kind", 11, "string", False),
        ("tuple_index", 13, "int64", False), ("dimensions", 14, "int64", True),
        ("window", 15, "Window", False),
        ("convolution_dimension_numbers", 16, "ConvolutionDimensionNumbers", False),
        ("slice_dimensions", 17, "SliceDimensions", True),
        ("exponent_bits", 18, "int32", False), ("mantissa_bits", 19, "int32", False),
        ("dynamic_slice_sizes", 20, "int64", True), ("padding_config", 21, "PaddingConfig", False),
        ("distribution", 23, "int32", False), ("epsilon", 24, "float", False),
        ("feature_index", 25, "int64", False), ("channel_id", 26, "int64", False),
        ("custom_call_target", 28, "string", False),
        ("dot_dimension_numbers", 30, "DotDimensionNumbers", False),
        ("fft_type", 31, "int32", False), ("fft_length", 32, "int64", True),
        ("gather_dimension_numbers", 33, "GatherDimensionNumbers", False),
        ("gather_slice_sizes", 34, "int64", True),
        ("id", 35, "int64", False), ("operand_ids", 36, "int64", True),
        ("control_predecessor_ids", 37, "int64", True), ("called_computation_ids", 38, "int64", True),
        ("sharding", 40, "OpSharding", False), ("backend_config", 43, "bytes", False),
        ("is_host_transfer", 47, "bool", False),
        ("scatter_dimension_numbers", 48, "ScatterDimensionNumbers", False),
        ("replica_groups", 49, "ReplicaGroup", True),
        ("feature_group_count", 50, "int64", False),
        ("precision_config", 51, "PrecisionConfig", False),
        ("source_target_pairs", 52, "SourceTarget", True),
        ("batch_group_count", 58, "int64", False), ("is_stable", 60, "bool", False),
        ("comparison_direction", 63, "string", False),
        ("custom_call_has_side_effect", 65, "bool", False),
        ("output_operand_aliasing", 74, "OutputOperandAliasing", True),
        ("indices_are_sorted", 67, "bool", False),
        ("frontend_attributes", 68, "FrontendAttributes", False),
        ("unique_indices", 69, "bool", False), ("rng_algorithm", 70, "int32", False),
        ("use_global_device_ids", 71, "bool", False), ("comparison_type", 72, "string", False),
        ("async_execution_thread", 79, "string", False),
        ("k", 81, "int64", False), ("largest", 85, "bool", False),
        ("collective_device_list", 87, "CollectiveDeviceListProto", False),
        ("is_composite", 89, "bool", False),
        ("ragged_dot_dimension_numbers", 90, "RaggedDotDimensionNumbers", False),
        # newer XLA stores the compact device lists directly on the instruction
        ("iota_collective_device_list", 92, "IotaReplicaGroupListProto", False),
        ("mesh_axes_replica_group_list", 93, "MeshAxesReplicaGroupListProto", False),
    ],
    "SliceDimensions": [("start", 1, "int64", False), ("limit", 2, "int64", False),
                        ("stride", 3, "int64", False)],
    "ShapeProto": [
        ("element_type", 2, "int32", False), ("dimensions", 3, "int64", True),
        ("tuple_shapes", 4, "ShapeProto", True), ("layout", 5, "LayoutProto", False),
        ("is_dynamic_dimension", 6, "bool", True),
    ],
    "ProgramShapeProto": [("parameters", 1, "ShapeProto", True), ("result", 2, "ShapeProto", False),
                          ("parameter_names", 3, "string", True)],
    "LayoutProto": [
        ("minor_to_major", 1, "int64", True), ("tiles", 6, "TileProto", True),
        ("element_size_in_bits", 7, "int64", False), ("memory_space", 8, "int64", False),
        ("dynamic_shape_metadata_prefix_bytes", 15, "int64", False),
        ("tail_padding_alignment_in_elements", 16, "int64", False),
    ],
    "TileProto": [("dimensions", 1, "int64", True)],
    "OpMetadata": [
        ("op_type", 1, "string", False), ("op_name", 2, "string", False),
        ("source_file", 3, "string", False), ("source_line", 4, "int32", False),
        ("deduplicated_name", 12, "string", False), ("stack_frame_id", 15, "int32", False),
        ("scheduling_name", 16, "string", False), ("source_end_line", 17, "int32", False),
        ("source_column", 18, "int32", False), ("source_end_column", 19, "int32", False),
    ],
    "LiteralProto": [
        ("shape", 1, "ShapeProto", False), ("preds", 2, "bool", True),
        ("s32s", 4, "int32", True), ("s64s", 5, "int64", True), ("u32s", 6, "uint32", True),
        ("u64s", 7, "uint64", True), ("f32s", 8, "float", True), ("f64s", 9, "double", True),
        ("u8s", 3, "bytes", False), ("f16s", 11, "bytes", False), ("bf16s", 13, "bytes", False),
        ("s8s", 15, "bytes", False), ("u16s", 16, "bytes", False), ("s16s", 17, "bytes", False),
    ],
    "WindowDimension": [
        ("size", 1, "int64", False), ("stride", 2, "int64", False),
        ("padding_low", 3, "int64", False), ("padding_high", 4, "int64", False),
        ("window_dilation", 5, "int64", False), ("base_dilation", 6, "int64", False),
        ("window_reversal", 7, "bool", False),
    ],
    "Window": [("dimensions", 1, "WindowDimension", True)],
    "ConvolutionDimensionNumbers": [
        ("kernel_input_feature_dimension", 3, "int64", False),
        ("kernel_output_feature_dimension", 4, "int64", False),
        ("kernel_spatial_dimensions", 6, "int64", True),
        ("input_batch_dimension", 7, "int64", False), ("input_feature_dimension", 8, "int64", False),
        ("output_batch_dimension", 9, "int64", False), ("output_feature_dimension", 10, "int64", False),
        ("input_spatial_dimensions", 11, "int64", True), ("output_spatial_dimensions", 12, "int64", True),
    ],
    "DotDimensionNumbers": [
        ("lhs_contracting_dimensions", 1, "int64", True), ("rhs_contracting_dimensions", 2, "int64", True),
        ("lhs_batch_dimensions", 3, "int64", True), ("rhs_batch_dimensions", 4, "int64", True),
    ],
    "RaggedDotDimensionNumbers": [
        ("dot_dimension_numbers", 1, "DotDimensionNumbers", False),
        ("lhs_ragged_dimensions", 2, "int64", True), ("rhs_group_dimensions", 3, "int64", True),
    ],
    "GatherDimensionNumbers": [
        ("offset_dims", 1, "int64", True), ("collapsed_slice_dims", 2, "int64", True),
        ("start_index_map", 3, "int64", True), ("index_vector_dim", 4, "int64", False),
        ("operand_batching_dims", 5, "int64", True), ("start_indices_batching_dims", 6, "int64", True),
    ],
    "ScatterDimensionNumbers": [
        ("update_window_dims", 1, "int64", True), ("inserted_window_dims", 2, "int64", True),
        ("scatter_dims_to_operand_dims", 3, "int64", True), ("index_vector_dim", 4, "int64", False),
        ("input_batching_dims", 5, "int64", True), ("scatter_indices_batching_dims", 6, "int64", True),
    ],
    "PaddingConfigDimension": [("edge_padding_low", 1, "int64", False),
                               ("edge_padding_high", 2, "int64", False),
                               ("interior_padding", 3, "int64", False)],
    "PaddingConfig": [("dimensions", 1, "PaddingConfigDimension", True)],
    "ReplicaGroup": [("replica_ids", 1, "int64", True)],
    "IotaReplicaGroupListProto": [
        ("num_replica_groups", 1, "int64", False), ("num_devices_per_group", 2, "int64", False),
        ("iota_reshape_dims", 3, "int64", True), ("iota_transpose_perm", 4, "int32", True),
    ],
    "CollectiveDeviceListProto": [
        ("replica_groups", 1, "ReplicaGroup", True),
        ("iota_replica_group_list", 2, "IotaReplicaGroupListProto", False),
    ],
    "OpSharding": [
        ("type", 1, "int32", False), ("tile_assignment_dimensions", 3, "int64", True),
        ("tile_assignment_devices", 4, "int64", True), ("tuple_shardings", 5, "OpSharding", True),
        ("replicate_on_last_tile_dim", 6, "bool", False), ("last_tile_dims", 8, "int32", True),
        ("iota_reshape_dims", 9, "int64", True), ("iota_transpose_perm", 10, "int32", True),
    ],
    "MeshAxis": [("name", 1, "string", False), ("size", 2, "int64", False)],
    "MeshProto": [("axes", 1, "MeshAxis", True), ("device_ids", 2, "int64", True)],
    "SubAxis": [("pre_size", 1, "int64", False), ("size", 2, "int64", False)],
    "AxisRefProto": [("mesh_axis_index", 1, "int64", False), ("sub_axis_info", 2, "SubAxis", False)],
    "MeshAxesReplicaGroupListProto": [("mesh", 1, "MeshProto", False), ("axes", 2, "AxisRefProto", True)],
    "OutputOperandAliasing": [("output_shape_index", 1, "int64", True), ("operand_index", 2, "int64", False),
                              ("operand_shape_index", 3, "int64", True)],
    "SourceTarget": [("source", 1, "int64", False), ("target", 2, "int64", False)],
    "PrecisionConfig": [("operand_precision", 1, "int32", True), ("algorithm", 2, "int32", False)],
    "FrontendAttributes": [("map", 1, "FrontendAttributes.MapEntry", True)],
}

# map fields: message -> (entry message name, key type, value type)
_MAPS = {
    "FrontendAttributes": ("MapEntry", "string", "string"),              # map<string, string> map = 1
    "HloScheduleProto": ("SequencesEntry", "int64", "InstructionSequence"),  # map<int64, ...> sequences = 1
}

_SCALARS = {
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    "bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
    "int32": descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    "uint32": descriptor_pb2.FieldDescriptorProto.TYPE_UINT32,
    "uint64": descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
    "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    "float": descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT,
    "double": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
}

# xla.PrimitiveType numbers -> the lower-case names HLO text uses.
PRIMITIVE_TYPES: dict[int, str] = {
    1: "pred", 30: "s1", 26: "s2", 21: "s4", 2: "s8", 3: "s16", 4: "s32", 5: "s64",
    31: "u1", 27: "u2", 22: "u4", 6: "u8", 7: "u16", 8: "u32", 9: "u64",
    10: "f16", 11: "f32", 16: "bf16", 12: "f64",
    19: "f8e5m2", 28: "f8e4m3", 20: "f8e4m3fn", 23: "f8e4m3b11fnuz", 29: "f8e3m4",
    24: "f8e5m2fnuz", 25: "f8e4m3fnuz", 32: "f4e2m1fn", 33: "f8e8m0fnu",
    15: "c64", 18: "c128", 13: "tuple", 14: "opaque", 17: "token", 34: "buffer",
}

PRECISION_NAMES = {0: "default", 1: "high", 2: "highest", 3: "packed_nibble"}
# PrecisionConfig.Algorithm numbers -> the names HLO text prints (``ALG_DOT_BF16_BF16_F32`` as
# ``dot_bf16_bf16_f32``); ALG_UNSET (0) is not printed.
DOT_ALGORITHMS = {n: "dot_" + name for n, name in enumerate(
    ("", "any_f8_any_f8_f32", "any_f8_any_f8_f32_fast_accum", "f16_f16_f16", "f16_f16_f32", "bf16_bf16_bf16",
     "bf16_bf16_f32", "bf16_bf16_f32_x3", "bf16_bf16_f32_x6", "tf32_tf32_f32", "tf32_tf32_f32_x3", "f32_f32_f32",
     "f64_f64_f64", "bf16_bf16_f32_x9")) if n}
FFT_TYPES = {0: "FFT", 1: "IFFT", 2: "RFFT", 3: "IRFFT"}
RNG_DISTRIBUTIONS = {1: "rng_uniform", 2: "rng_normal"}
RNG_ALGORITHMS = {0: "rng_default", 1: "rng_three_fry", 2: "rng_philox"}
SHARDING_TYPES = {0: "replicated", 1: "maximal", 2: "tuple", 3: "other", 4: "manual", 5: "unknown",
                  6: "unreduced"}


def _file_proto() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(name="traceview_hlo_schema.proto", package=_PACKAGE,
                                             syntax="proto3")
    F = descriptor_pb2.FieldDescriptorProto
    for msg_name, fields in _SCHEMA.items():
        msg = fdp.message_type.add(name=msg_name)
        for fname, number, ftype, repeated in fields:
            f = msg.field.add(name=fname, number=number,
                              label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if ftype in _SCALARS:
                f.type = _SCALARS[ftype]
            else:
                f.type = F.TYPE_MESSAGE
                f.type_name = f".{_PACKAGE}.{ftype}"
        if msg_name in _MAPS:
            entry_name, key_type, value_type = _MAPS[msg_name]
            entry = msg.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, type=_SCALARS[key_type], label=F.LABEL_OPTIONAL)
            value = entry.field.add(name="value", number=2, label=F.LABEL_OPTIONAL)
            if value_type in _SCALARS:
                value.type = _SCALARS[value_type]
            else:
                value.type = F.TYPE_MESSAGE
                value.type_name = f".{_PACKAGE}.{value_type}"
    return fdp


@cache
def message_class(name: str) -> type:
    """The generated message class for one of the schema's messages, e.g. ``"HloProto"``."""
    pool = _pool()
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


@lru_cache(maxsize=1)
def _pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()  # private pool: never clashes with a real xla_pb2
    pool.Add(_file_proto())
    return pool
