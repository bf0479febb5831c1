"""Element counts and byte sizes of HLO shapes, as XLA's default shape-size function counts them.

XLA's HloCostAnalysis sizes an array as elements x element bytes and a tuple as
its index table only (one 8-byte pointer per element), not its leaves; the
handlers that care about tuple leaves walk them explicitly.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

from traceview.parsers.hlo.model import Shape

POINTER_BYTES = 8

# Bits per element, by XLA's lower-case type name.
_BITS: dict[str, int] = {
    "pred": 8, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "s32": 32, "u32": 32, "s64": 64, "u64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "s1": 8, "u1": 8, "s2": 8, "u2": 8, "s4": 8, "u4": 8,   # stored one per byte unless the layout packs them
    "f8e5m2": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e5m2fnuz": 8, "f8e4m3fnuz": 8, "f8e4m3": 8,
    "f8e3m4": 8, "f8e8m0fnu": 8, "f4e2m1fn": 8, "f6e2m3fn": 8, "f6e3m2fn": 8,
    "token": 0, "opaque": 0,
}
_PACKED_RE = re.compile(r"E\((\d+)\)")        # layout element size in bits, e.g. {0:E(4)}
_MINOR_TO_MAJOR_RE = re.compile(r"^\{([\d,\s]*)")



def unknown_element_types(shape: Shape) -> set[str]:
    """Element types in a shape whose size we do not know (they count as zero bytes)."""
    return {leaf.element_type for leaf in leaves(shape) if leaf.element_type not in _BITS}


def elements(shape: Shape) -> int:
    """Elements of an array shape (1 for a scalar); 0 for tuples and tokens."""
    if shape.is_tuple or shape.element_type in ("token", "opaque"):
        return 0
    return math.prod(shape.dims)


def elements_recursive(shape: Shape) -> int:
    """Elements summed over every array leaf of a (nested) tuple."""
    if shape.is_tuple:
        return sum(elements_recursive(s) for s in shape.tuple_shapes)
    return elements(shape)


def byte_size(shape: Shape) -> int:
    """XLA's ShapeUtil::ByteSizeOf with 8-byte pointers: tuples count their index table only."""
    if shape.is_tuple:
        return POINTER_BYTES * len(shape.tuple_shapes)
    return _array_bytes(shape.element_type, math.prod(shape.dims), shape.layout)


def _array_bytes(etype: str, n: int, layout: str | None) -> int:
    bits = _BITS.get(etype, 0)
    if layout and "E(" in layout:
        m = _PACKED_RE.search(layout)
        if m:
            return -(-n * int(m.group(1)) // 8)
    return n * bits // 8


def leaf_bytes(shape: Shape) -> int:
    """Bytes of every array leaf of a (nested) tuple, without index tables."""
    if shape.is_tuple:
        return sum(leaf_bytes(s) for s in shape.tuple_shapes)
    return byte_size(shape)


def leaves(shape: Shape) -> list[Shape]:
    if shape.is_tuple:
        return [leaf for s in shape.tuple_shapes for leaf in leaves(s)]
    return [shape]


@lru_cache(maxsize=4096)
def _minor_to_major(layout: str) -> tuple[int, ...] | None:
    m = _MINOR_TO_MAJOR_RE.match(layout)
    if not m or not m.group(1).strip():
        return () if m else None
    return tuple(int(x) for x in m.group(1).split(","))


def minor_to_major(shape: Shape) -> tuple[int, ...]:
    """The layout's minor-to-major order; the default (row-major) order when no layout is printed."""
    if shape.layout:
        mtm = _minor_to_major(shape.layout)
        if mtm is not None and len(mtm) == len(shape.dims):
            return mtm
    return tuple(range(len(shape.dims) - 1, -1, -1))


def first_array(shape: Shape) -> Shape:
    """The shape itself, or the first array leaf of a tuple."""
    while shape.is_tuple and shape.tuple_shapes:
        shape = shape.tuple_shapes[0]
    return shape


def shape_text(shape: Shape) -> str:
    """Compact text of a shape without layout, e.g. ``f32[128,512]`` or ``(f32[2], s32[])``."""
    if shape.is_tuple:
        return "(" + ", ".join(shape_text(s) for s in shape.tuple_shapes) + ")"
    if shape.element_type in ("token", "opaque"):
        return shape.element_type
    return f"{shape.element_type}[{','.join(str(d) for d in shape.dims)}]"
