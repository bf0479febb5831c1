"""HLO instruction attributes as typed values: :class:`Attributes` (``Instruction.typed``), and the
decoders it uses.

Both readers keep every attribute as the text XLA prints (``Instruction.attributes``; the proto reader
writes a proto's fields that way, :mod:`traceview.parsers.hlo.proto_attributes`), so one decoder per
attribute serves both sources: ``{1,2}``, ``{size=3x3 stride=2x2 pad=1_1x1_1}``, ``b01f_01io->b01f``,
``{{0,1},{2,3}}``, ``[2,4]<=[8]``, ... Each attribute is decoded the first time it is read and kept
with its instruction; decoders of texts that repeat across instructions are cached by text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache

from traceview.parsers.hlo.replica_groups import parse_replica_groups

_INT_RE = re.compile(r"-?\d+")


@lru_cache(maxsize=8192)
def int_list(text: str | None) -> tuple[int, ...]:
    """``{1,2}`` / ``1,2`` / ``[1,2]`` -> (1, 2); empty or None -> ()."""
    if not text:
        return ()
    return tuple(int(x) for x in _INT_RE.findall(text))


def int_attr(attrs: Mapping[str, str], key: str, default: int) -> int:
    value = attrs.get(key)
    if value is None:
        return default
    m = _INT_RE.search(value)
    return int(m.group()) if m else default


@dataclass(frozen=True)
class WindowDim:
    size: int = 1
    stride: int = 1
    pad_low: int = 0
    pad_high: int = 0
    lhs_dilate: int = 1   # base dilation
    rhs_dilate: int = 1   # window dilation


@lru_cache(maxsize=4096)
def window(text: str | None) -> tuple[WindowDim, ...]:
    """``{size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=2x2 rhs_dilate=1x1}`` -> one WindowDim per spatial dim."""
    if not text:
        return ()
    fields: dict[str, list[str]] = {}
    for part in text.strip("{} ").split():
        key, _, value = part.partition("=")
        fields[key] = value.split("x")
    n = len(fields.get("size", ()))
    if n == 0:
        return ()

    def ints(key: str, default: int) -> list[int]:
        vals = fields.get(key)
        return [int(v) for v in vals] if vals and len(vals) == n else [default] * n

    pads = fields.get("pad")
    lows, highs = [0] * n, [0] * n
    if pads and len(pads) == n:
        for i, p in enumerate(pads):
            lo, _, hi = p.partition("_")
            lows[i], highs[i] = int(lo), int(hi or lo)
    size, stride = ints("size", 1), ints("stride", 1)
    lhs, rhs = ints("lhs_dilate", 1), ints("rhs_dilate", 1)
    return tuple(WindowDim(size[i], stride[i], lows[i], highs[i], lhs[i], rhs[i]) for i in range(n))


@dataclass(frozen=True)
class ConvDims:
    """Convolution dimension numbers decoded from ``dim_labels``."""
    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]


@lru_cache(maxsize=1024)
def conv_dims(dim_labels: str | None) -> ConvDims | None:
    """``b01f_01io->b01f`` -> ConvDims; None when absent or malformed."""
    if not dim_labels:
        return None
    m = re.fullmatch(r"\s*(\w+)_(\w+)->(\w+)\s*", dim_labels)
    if not m:
        return None
    lhs, rhs, out = m.groups()
    n = sum(c.isdigit() for c in lhs)
    try:
        return ConvDims(lhs.index("b"), lhs.index("f"), tuple(lhs.index(str(i)) for i in range(n)),
                        rhs.index("i"), rhs.index("o"), tuple(rhs.index(str(i)) for i in range(n)),
                        out.index("b"), out.index("f"), tuple(out.index(str(i)) for i in range(n)))
    except ValueError:
        return None


@lru_cache(maxsize=4096)
def replica_groups(text: str | None) -> tuple[tuple[int, ...], ...] | None:
    """Decode ``replica_groups`` in any of XLA's forms (explicit, iota ``[G,S]<=[dims]T(perm)``, mesh).

    Returns () for ``{}`` (all devices) and None when absent or unreadable. The
    decoding itself is the HLO reader's; this only caches and freezes it.
    """
    if text is None:
        return None
    groups = parse_replica_groups(text)
    if groups is None:
        return None
    return tuple(tuple(int(x) for x in g) for g in groups)


def source_target_pairs(text: str | None) -> tuple[tuple[int, int], ...]:
    if not text:
        return ()
    return tuple((p[0], p[1]) for p in (int_list(g) for g in re.findall(r"\{([^{}]*)\}", text)) if len(p) == 2)


def backend_config(text: str | None) -> dict:
    """The backend_config JSON as a dict; {} when absent or not JSON."""
    if not text or not text.lstrip().startswith("{"):
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than any real config
        return {}
    return value if isinstance(value, dict) else {}


def known_trip_count(text: str | None) -> int | None:
    """``known_trip_count.n`` from a while loop's backend_config, or None."""
    if not text or "known_trip_count" not in text:
        return None
    count = backend_config(text).get("known_trip_count")
    n = count.get("n") if isinstance(count, dict) else None
    try:
        trips = int(n)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    # A count no loop can run (negative, or past what float64 counts exactly) is corrupt: unknown.
    return trips if 0 <= trips <= 1 << 53 else None


class Attributes:
    """The attributes of one instruction that the cost model and the views read, as typed values.

    Each property decodes its attribute from the instruction's attribute text the first time it is read
    (``raw``: the text by key; ``backend_config``: the instruction's backend config text) and keeps it.
    An absent attribute reads as XLA's default: an empty tuple, the count 1, or None where no default
    exists.
    """

    def __init__(self, raw: Mapping[str, str], backend_config: str | None) -> None:
        self._raw = raw
        self._backend_config = backend_config

    def _ints(self, key: str) -> tuple[int, ...]:
        return int_list(self._raw.get(key))

    @cached_property
    def window(self) -> tuple[WindowDim, ...]:
        """Per spatial dimension: size, stride, padding, dilations (convolutions, reduce-window)."""
        return window(self._raw.get("window"))

    @cached_property
    def conv_dims(self) -> ConvDims | None:
        """A convolution's dimension numbers, from ``dim_labels``."""
        return conv_dims(self._raw.get("dim_labels"))

    @cached_property
    def feature_group_count(self) -> int:
        return int_attr(self._raw, "feature_group_count", 1)

    @cached_property
    def batch_group_count(self) -> int:
        return int_attr(self._raw, "batch_group_count", 1)

    @cached_property
    def lhs_contracting_dims(self) -> tuple[int, ...]:
        return self._ints("lhs_contracting_dims")

    @cached_property
    def dimensions(self) -> tuple[int, ...]:
        return self._ints("dimensions")

    @cached_property
    def fft_length(self) -> tuple[int, ...]:
        return self._ints("fft_length")

    @cached_property
    def parameter_number(self) -> int:
        return int_attr(self._raw, "parameter_number", 0)

    @cached_property
    def index(self) -> int:
        """A get-tuple-element's index; -1 when absent."""
        return int_attr(self._raw, "index", -1)

    @cached_property
    def replica_groups(self) -> tuple[tuple[int, ...], ...] | None:
        """The device groups: () for ``{}`` (every device), None when absent or unreadable."""
        return replica_groups(self._raw.get("replica_groups"))

    @cached_property
    def source_target_pairs(self) -> tuple[tuple[int, int], ...]:
        return source_target_pairs(self._raw.get("source_target_pairs"))

    @cached_property
    def backend_config(self) -> dict:
        """The backend config JSON as a dict; {} when absent or not JSON."""
        return backend_config(self._backend_config or self._raw.get("backend_config"))

    @cached_property
    def known_trip_count(self) -> int | None:
        """A while loop's ``known_trip_count`` from its backend config; None when absent or impossible."""
        return known_trip_count(self._backend_config)
