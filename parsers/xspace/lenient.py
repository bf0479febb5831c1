"""Reading an XSpace whose strings are not all valid UTF-8 (a thread name cut mid-character is common).

The XSpace schema is proto3, whose parser rejects the whole file for one bad
string. This module parses such a file again with a proto2 copy of the same
schema (proto2 does not check UTF-8: bad strings arrive as bytes), decodes
every string with replacement characters, and hands back the bytes of a valid
XSpace, so only files that need it take this slower path.
"""

from __future__ import annotations

from functools import cache

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor

_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE


@cache
def _lenient_class(full_name: str, file_descriptor):
    """The message class `full_name` from a proto2 copy of `file_descriptor` (in a pool of its own)."""
    fdp = descriptor_pb2.FileDescriptorProto()
    file_descriptor.CopyToProto(fdp)
    fdp.syntax = "proto2"
    fdp.name = "lenient/" + fdp.name
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


def _repeated(fd) -> bool:
    flag = getattr(fd, "is_repeated", None)  # newer protobuf; older ones only have `label`
    return bool(flag) if flag is not None else fd.label == FieldDescriptor.LABEL_REPEATED


def _fix(msg) -> int:
    """Decode every bytes-valued string field of `msg` (recursively) with replacement characters; count them."""
    fixed = 0
    for fd, value in msg.ListFields():
        if fd.type == _STRING:
            if _repeated(fd):
                items = list(value)
                if any(isinstance(v, bytes) for v in items):
                    del value[:]
                    value.extend(v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in items)
                    fixed += sum(isinstance(v, bytes) for v in items)
            elif isinstance(value, bytes):
                setattr(msg, fd.name, value.decode("utf-8", "replace"))
                fixed += 1
        elif fd.type == _MESSAGE:
            if fd.message_type.GetOptions().map_entry:
                value_fd = fd.message_type.fields_by_name["value"]
                if value_fd.type == _MESSAGE:
                    fixed += sum(_fix(v) for v in value.values())
            elif _repeated(fd):
                fixed += sum(_fix(v) for v in value)
            else:
                fixed += _fix(value)
    return fixed


def repair_utf8(data: bytes, message_class) -> tuple[bytes, int]:
    """`data` (serialized `message_class`) with every invalid UTF-8 string replaced; and how many there were.

    Raises google.protobuf.message.DecodeError when the bytes are corrupt for
    other reasons too.
    """
    desc = message_class.DESCRIPTOR
    lenient = _lenient_class(desc.full_name, desc.file)()
    lenient.ParseFromString(data)
    fixed = _fix(lenient)
    return lenient.SerializeToString(), fixed
