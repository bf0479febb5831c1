"""HLO instruction attributes as typed values: :class:`Attributes` (``Instruction.typed``), and the
decoders of their text.

Two sources fill the same record. The text reader keeps every attribute as the text XLA prints
(``Instruction.attributes``): each property decodes its attribute from that text the first time it is
read (``{1,2}``, ``{size=3x3 stride=2x2 pad=1_1x1_1}``, ``b01f_01io->b01f``, ``{{0,1},{2,3}}``,
``[2,4]<=[8]``, ...), and decoders of texts that repeat across instructions are cached by text. The
proto reader decodes the values straight from the HloInstructionProto's fields
(:mod:`traceview.parsers.hlo.proto_typed`) and hands them over whole (:meth:`Attributes.decoded`); the
text it also writes (:mod:`traceview.parsers.hlo.proto_attributes`) is only for display.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from traceview.parsers.hlo.replica_groups import mesh_axes, parse_replica_groups
from traceview.parsers.hlo.sharding import Sharding, parse_sharding

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
    """``b01f_01io->b01f`` -> ConvDims; None when absent or malformed (a side that is no layout of its
    letters and spatial digits)."""
    if not dim_labels:
        return None
    m = re.fullmatch(r"\s*(\w+)_(\w+)->(\w+)\s*", dim_labels)
    if not m:
        return None
    lhs, rhs, out = m.groups()
    n = sum(c.isdigit() for c in lhs)
    if not len(lhs) == len(rhs) == len(out) == n + 2:  # each a layout: its letters and digits once each
        return None
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


@dataclass(frozen=True)
class Precision:
    """A precision config: what each operand asks for (``default``, ``high``, ``highest``: the names HLO
    text prints) and the dot algorithm (``dot_bf16_bf16_f32``, as text prints XLA's
    ``ALG_DOT_BF16_BF16_F32``; None when unset)."""
    operands: tuple[str, ...] = ()
    algorithm: str | None = None


NO_PRECISION = Precision()


@lru_cache(maxsize=256)
def operand_precision(text: str | None) -> tuple[str, ...]:
    """``{highest,default}`` -> ("highest", "default"); () when absent."""
    return tuple(name for part in (text or "").strip().strip("{}").split(",") if (name := part.strip().lower()))


def dot_algorithm(text: str | None) -> str | None:
    """A dot's ``algorithm=dot_...``; None when absent, and for the other ops' ``algorithm=``
    (rng-bit-generator's ``rng_philox``, ...): XLA prints every dot algorithm as ``dot_...``."""
    value = (text or "").strip().lower()
    return value if value.startswith("dot_") else None


def config_precision(config: Mapping[str, Any]) -> Precision:
    """The precision config a library call's backend config carries: a cuBLAS gemm's
    ``gemm_backend_config.precision_config`` (at the top of an older, unwrapped GemmBackendConfig), whose
    JSON spells the enums ``HIGHEST`` and ``ALG_DOT_F32_F32_F32``; named as HLO text names them.
    NO_PRECISION when there is none (cuDNN's convolution config carries no precision)."""
    gemm = config.get("gemm_backend_config", config)
    found = gemm.get("precision_config") if isinstance(gemm, dict) else None
    if not isinstance(found, dict):
        return NO_PRECISION
    operands = found.get("operand_precision")
    names = tuple(str(p).lower() for p in operands) if isinstance(operands, list) else ()
    algorithm = str(found.get("algorithm") or "").lower().removeprefix("alg_")
    if not names and algorithm in ("", "unset"):
        return NO_PRECISION
    return Precision(names, algorithm if algorithm not in ("", "unset") else None)


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


def integer_scalar_type(opcode: str, element_type: str, dims: tuple[int, ...]) -> str | None:
    """The element type of a ``constant`` whose shape is one scalar (no dims, not a tuple) of an integer type
    (``s*``/``u*``; ``pred`` is not one); None for any other instruction. The one rule both sources of
    :attr:`Attributes.integer_scalar` go by."""
    if opcode != "constant" or dims or element_type == "tuple" or element_type[:1] not in ("s", "u"):
        return None
    return element_type


def optional_int(text: str | None) -> int | None:
    """The first integer in ``text``; None when absent or none there."""
    m = _INT_RE.search(text) if text else None
    return int(m.group()) if m else None


def unquote(value: str) -> str:
    """A quoted HLO text string (``"a\\"b"``) as its value; any other text as it is."""
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        body = value[1:-1]
        if "\\" in body:
            body = re.sub(r'\\(.)', lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)
        return body
    return value


# attributes naming called computations, in the order XLA prints them
CALL_KEYS = ("calls", "to_apply", "condition", "body", "true_computation", "false_computation",
             "branch_computations", "select", "scatter", "called_computations")
_COMP_REF_RE = re.compile(r"%?([^\s{},%]+)")


def computation_names(text: str) -> list[str]:
    """The computation names an attribute lists: ``%body``, ``{%a, %b}`` -> [a, b]."""
    return _COMP_REF_RE.findall(text)


def called_from_attributes(attrs: Mapping[str, str]) -> list[str]:
    """Names of the computations an instruction's attributes call, in printed-key order."""
    out: list[str] = []
    for key in CALL_KEYS:
        if key in attrs:
            out.extend(computation_names(attrs[key]))
    return out


_ALIAS_RE = re.compile(r"\{\s*([\d,\s]*)\}\s*:\s*\(\s*(\d+)\s*,\s*\{[\d,\s]*\}")


def input_output_alias(text: str | None) -> dict[int, int]:
    """A module's ``input_output_alias`` header (``{ {1}: (19, {}, may-alias), ... }``) as {top-level output
    index: parameter number}; an entry with a negative index or number is corrupt, left out."""
    out: dict[int, int] = {}
    for m in _ALIAS_RE.finditer(text or ""):
        index = m.group(1).replace(" ", "").split(",")[0]
        out[int(index) if index else 0] = int(m.group(2))
    return out


_FRONTEND_ENTRY_RE = re.compile(r'\s*([A-Za-z_][\w.\-]*)\s*=\s*')


def frontend_attributes(text: str | None) -> dict[str, str]:
    """``{k=v,...}`` as a dict, values unquoted (XLA prints some quoted, some bare, e.g. ``{{0,1},{1,2}}``);
    {} when absent or unreadable."""
    text = (text or "").strip()
    if not (text.startswith("{") and text.endswith("}")):
        return {}
    body, pos = text[1:-1], 0
    out: dict[str, str] = {}
    while pos < len(body):
        m = _FRONTEND_ENTRY_RE.match(body, pos)
        if m is None:
            return out
        key, pos = m.group(1), m.end()
        end = _value_end(body, pos)
        out[key] = unquote(body[pos:end].strip())
        pos = end + 1                      # past the comma
    return out


def _value_end(text: str, pos: int) -> int:
    """Where a value starting at ``pos`` ends: the next comma outside braces and quotes (or the end)."""
    depth, quoted, i = 0, False, pos
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth <= 0:
            return i
        i += 1
    return len(text)


def _flag(text: str | None) -> bool:
    """A boolean attribute's text: ``true`` (any case) is True, anything else or absent False."""
    return (text or "").strip().lower() == "true"


class Attributes:
    """The attributes of one instruction that the cost model and the views read, as typed values.

    From text, each property decodes its attribute from the instruction's attribute text the first time it
    is read (``raw``: the text by key; ``backend_config``: the instruction's backend config text) and keeps
    it. From a proto, :meth:`decoded` holds the values the proto reader decoded from the fields. Either
    way an absent attribute reads as XLA's default: an empty tuple or mapping, the count 1, False, or None
    where no default exists.
    """

    # every typed attribute, by property name (what as_dict() lists and the two sources must agree on)
    FIELDS = ("window", "conv_dims", "feature_group_count", "batch_group_count", "lhs_contracting_dims",
              "rhs_contracting_dims", "lhs_batch_dims", "rhs_batch_dims", "dimensions", "fft_length",
              "parameter_number", "index", "replica_groups", "replica_group_mesh", "use_global_device_ids",
              "source_target_pairs", "channel_id", "is_host_transfer", "frontend_attributes", "calls",
              "comparison_direction", "sharding", "precision", "async_execution_thread", "backend_config",
              "backend_precision", "known_trip_count", "integer_scalar")

    # the element type of an integer scalar constant (see integer_scalar_type): the record has no shape, so
    # the text route is told it; None (this class default) for every other instruction and the proto route
    _scalar_type: str | None = None

    def __init__(self, raw: Mapping[str, str], backend_config: str | None, scalar_type: str | None = None) -> None:
        self._raw = raw
        self._backend_config = backend_config
        if scalar_type is not None:
            self._scalar_type = scalar_type

    @classmethod
    def decoded(cls, values: dict[str, Any], backend_config: str | None) -> Attributes:
        """A record of values decoded elsewhere (the proto reader, from the proto's fields), by property
        name; a property not in ``values`` is absent from the instruction and reads as its default. The
        backend config is JSON text in both sources: it is decoded here, on first read. Instructions with
        neither share one record (all defaults: most of a module's instructions).

        The record takes ``values`` as its own dict (what each cached property would have stored on first
        read): one object fewer per instruction, and a module has tens of thousands.
        """
        if not values and backend_config is None:
            return _NO_ATTRIBUTES
        record = cls.__new__(cls)
        values["_raw"], values["_backend_config"] = _NO_TEXT, backend_config
        record.__dict__ = values
        return record

    def as_dict(self) -> dict[str, Any]:
        """Every typed attribute by name (decoding what was not read yet)."""
        return {name: getattr(self, name) for name in self.FIELDS}

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
    def rhs_contracting_dims(self) -> tuple[int, ...]:
        return self._ints("rhs_contracting_dims")

    @cached_property
    def lhs_batch_dims(self) -> tuple[int, ...]:
        return self._ints("lhs_batch_dims")

    @cached_property
    def rhs_batch_dims(self) -> tuple[int, ...]:
        return self._ints("rhs_batch_dims")

    @cached_property
    def dimensions(self) -> tuple[int, ...]:
        """``dimensions={...}`` (broadcast, transpose, reduce, concatenate, all-gather, ...); an iota's
        dimension is ``iota_dimension``, not this."""
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
    def replica_group_mesh(self) -> tuple[tuple[str, int], ...]:
        """The mesh (axis names and sizes, major to minor) a mesh-form ``replica_groups`` is over; () for
        the other forms (a mesh over listed device ids is printed as its groups, so it is () too)."""
        return mesh_axes(self._raw.get("replica_groups"))

    @cached_property
    def use_global_device_ids(self) -> bool:
        """Whether a collective's groups hold global device ids (``replica * partitions + partition``)."""
        return _flag(self._raw.get("use_global_device_ids"))

    @cached_property
    def source_target_pairs(self) -> tuple[tuple[int, int], ...]:
        return source_target_pairs(self._raw.get("source_target_pairs"))

    @cached_property
    def channel_id(self) -> int | None:
        """The channel a send/recv pair or a cross-module collective shares; None when it has none."""
        return optional_int(self._raw.get("channel_id"))

    @cached_property
    def is_host_transfer(self) -> bool:
        """Whether a send/recv moves data to or from the host rather than between devices."""
        return _flag(self._raw.get("is_host_transfer"))

    @cached_property
    def frontend_attributes(self) -> Mapping[str, str]:
        """The frontend attributes, values unquoted; {} when none."""
        return frontend_attributes(self._raw.get("frontend_attributes"))

    @cached_property
    def calls(self) -> Mapping[str, tuple[str, ...]]:
        """The called computations by the attribute that names them (``to_apply``, ``condition``,
        ``body``, ``calls``, ``branch_computations``, ...), in XLA's printed order."""
        return {key: tuple(computation_names(self._raw[key])) for key in CALL_KEYS if key in self._raw}

    @cached_property
    def comparison_direction(self) -> str | None:
        """A compare's direction (``LT``, ``EQ``, ...); None when absent."""
        text = (self._raw.get("direction") or "").strip()
        return text or None

    @cached_property
    def sharding(self) -> Sharding | None:
        """How the value is laid out over the devices; None when the instruction has no sharding (or one
        in no form XLA prints)."""
        return parse_sharding(self._raw.get("sharding"))

    @cached_property
    def precision(self) -> Precision:
        """The precision config of a dot, convolution, ...: ``operand_precision`` (only printed when an
        operand asks for more than the default) and the dot ``algorithm``."""
        operands, algorithm = operand_precision(self._raw.get("operand_precision")), dot_algorithm(
            self._raw.get("algorithm"))
        return Precision(operands, algorithm) if operands or algorithm else NO_PRECISION

    @cached_property
    def async_execution_thread(self) -> str | None:
        """The thread an async op runs its computation on (``sparsecore``, ...); None when not printed:
        XLA prints no thread for the main one, whose ops may run a computation of another thread."""
        return (self._raw.get("async_execution_thread") or "").strip().strip('"') or None

    @cached_property
    def backend_config(self) -> dict:
        """The backend config JSON as a dict; {} when absent or not JSON."""
        return backend_config(self._backend_config or self._raw.get("backend_config"))

    @cached_property
    def backend_precision(self) -> Precision:
        """The precision config a library call's backend config carries (see config_precision). Read for
        every op the cost table lists: only a config that names a precision config is decoded, and its
        dict is not kept (most ops have a config, few a precision)."""
        text = self._backend_config or self._raw.get("backend_config")
        if not text or "precision_config" not in text:
            return NO_PRECISION
        return config_precision(backend_config(text))

    @cached_property
    def known_trip_count(self) -> int | None:
        """A while loop's ``known_trip_count`` from its backend config; None when absent or impossible."""
        return known_trip_count(self._backend_config)

    @cached_property
    def integer_scalar(self) -> int | None:
        """The value of a constant whose shape is one integer scalar (``s32[] constant(-3)``); None for any
        other instruction, including a float constant printed as an integer (``f32[] constant(0)``)."""
        if self._scalar_type is None:
            return None
        try:
            return int(self._raw.get("literal", "").strip())
        except ValueError:
            return None


_NO_TEXT: Mapping[str, str] = {}  # never written to (a dict, not a read-only proxy: records are pickled)
_NO_ATTRIBUTES = Attributes(_NO_TEXT, None)  # every attribute at its default
