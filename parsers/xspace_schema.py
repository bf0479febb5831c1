"""The XSpace wire format (profiler ``*.xplane.pb`` files), defined by traceview itself.

The messages and field numbers follow tsl/profiler/protobuf/xplane.proto; the
descriptors are built at import time so no protoc step or generated module
from another project is needed. The proto package is ``traceview.xspace`` so
these classes never clash with TensorFlow's or XProf's own ``XSpace`` when
both are loaded in one process.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "traceview.xspace"

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_I64, _U64, _DBL = _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_DOUBLE
_STR, _BYTES, _MSG = _F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE

# (message, [(field name, number, type, label, message type or None, oneof index or None)])
_MESSAGES: list[tuple[str, list[tuple]]] = [
    ("XSpace", [
        ("planes", 1, _MSG, _REP, "XPlane", None),
        ("errors", 2, _STR, _REP, None, None),
        ("warnings", 3, _STR, _REP, None, None),
        ("hostnames", 4, _STR, _REP, None, None),
    ]),
    ("XPlane", [
        ("id", 1, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("lines", 3, _MSG, _REP, "XLine", None),
        ("event_metadata", 4, _MSG, _REP, "XPlane.EventMetadataEntry", None),
        ("stat_metadata", 5, _MSG, _REP, "XPlane.StatMetadataEntry", None),
        ("stats", 6, _MSG, _REP, "XStat", None),
    ]),
    ("XLine", [
        ("id", 1, _I64, _OPT, None, None),
        ("display_id", 10, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("display_name", 11, _STR, _OPT, None, None),
        ("timestamp_ns", 3, _I64, _OPT, None, None),
        ("duration_ps", 9, _I64, _OPT, None, None),
        ("events", 4, _MSG, _REP, "XEvent", None),
    ]),
    ("XEvent", [
        ("metadata_id", 1, _I64, _OPT, None, None),
        ("offset_ps", 2, _I64, _OPT, None, 0),
        ("num_occurrences", 5, _I64, _OPT, None, 0),
        ("duration_ps", 3, _I64, _OPT, None, None),
        ("stats", 4, _MSG, _REP, "XStat", None),
    ]),
    ("XStat", [
        ("metadata_id", 1, _I64, _OPT, None, None),
        ("double_value", 2, _DBL, _OPT, None, 0),
        ("uint64_value", 3, _U64, _OPT, None, 0),
        ("int64_value", 4, _I64, _OPT, None, 0),
        ("str_value", 5, _STR, _OPT, None, 0),
        ("bytes_value", 6, _BYTES, _OPT, None, 0),
        ("ref_value", 7, _U64, _OPT, None, 0),
    ]),
    ("XEventMetadata", [
        ("id", 1, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("display_name", 4, _STR, _OPT, None, None),
        ("metadata", 3, _BYTES, _OPT, None, None),
        ("stats", 5, _MSG, _REP, "XStat", None),
        ("child_id", 6, _I64, _REP, None, None),
    ]),
    ("XStatMetadata", [
        ("id", 1, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("description", 3, _STR, _OPT, None, None),
    ]),
]

_ONEOFS = {"XEvent": "data", "XStat": "value"}
_MAP_ENTRIES = {"XPlane": [("EventMetadataEntry", "XEventMetadata"), ("StatMetadataEntry", "XStatMetadata")]}


def _add_field(msg: descriptor_pb2.DescriptorProto, name, number, ftype, label, type_name, oneof) -> None:
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = f".{_PACKAGE}.{type_name}"
    if oneof is not None:
        f.oneof_index = oneof


def _build_file() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(name="traceview/xspace.proto", package=_PACKAGE, syntax="proto3")
    for name, fields in _MESSAGES:
        msg = fdp.message_type.add(name=name)
        if name in _ONEOFS:
            msg.oneof_decl.add(name=_ONEOFS[name])
        for field in fields:
            _add_field(msg, *field)
        for entry_name, value_type in _MAP_ENTRIES.get(name, []):
            entry = msg.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            _add_field(entry, "key", 1, _I64, _OPT, None, None)
            _add_field(entry, "value", 2, _MSG, _OPT, value_type, None)
    return fdp


def _build_classes() -> dict[str, type]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_build_file())
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
        for name, _ in _MESSAGES
    }


_CLASSES = _build_classes()
XSpace = _CLASSES["XSpace"]
XPlane = _CLASSES["XPlane"]
XLine = _CLASSES["XLine"]
XEvent = _CLASSES["XEvent"]
XStat = _CLASSES["XStat"]
XEventMetadata = _CLASSES["XEventMetadata"]
XStatMetadata = _CLASSES["XStatMetadata"]

__all__ = ["XSpace", "XPlane", "XLine", "XEvent", "XStat", "XEventMetadata", "XStatMetadata"]
