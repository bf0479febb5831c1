"""The chip model: what each chip can do, and where each figure comes from (loading: database.py).

Figures live in ``traceview/data/hardware.json`` (one entry per chip, every
figure with its source); a user file given with ``--hardware-file`` adds chips
or overrides figures. Rates are FLOP/s per chip, dense; bandwidths are bytes/s
one way; capacities bytes. Unknown figures are None, never zero.

Peak-rate rule (:meth:`Chip.peak_flops_for`): an op's dtype maps to a dtype
class (bf16, fp16, fp8, fp4, int8, int4, tf32, fp32, fp64, int32); the chip's
figure for that class is used when it exists. Otherwise the chip's declared
fallback is used, and only when the table declares one, with its reason (e.g.
TPU f32 matmuls run as bf16 MXU passes at default precision; Volta has no
bf16 so XLA computes it in f32). A fallback is always a rate at least as fast
as the real one, so the roofline time stays a lower bound, and callers turn
its reason into a warning. No figure and no fallback gives None: the caller
labels the op "unknown", it never guesses.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from traceview.config.values import as_float
from traceview.errors import UserError

DTYPE_CLASSES = ("bf16", "fp16", "fp8", "fp4", "int8", "int4", "tf32", "fp32", "fp64", "int32")
TOPOLOGIES = ("2d_torus", "3d_torus", "switch", "full_mesh")
KINDS = ("TPU", "GPU", "CPU")

_DTYPE_ALIASES = {
    "bf16": "bf16", "bfloat16": "bf16",
    "f16": "fp16", "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "f32": "fp32", "fp32": "fp32", "float32": "fp32", "float": "fp32", "c64": "fp32", "complex64": "fp32",
    "tf32": "tf32",
    "f64": "fp64", "fp64": "fp64", "float64": "fp64", "double": "fp64", "c128": "fp64", "complex128": "fp64",
    "s8": "int8", "u8": "int8", "int8": "int8", "uint8": "int8",
    "s4": "int4", "u4": "int4", "int4": "int4", "uint4": "int4",
    "fp8": "fp8", "fp4": "fp4",
    "pred": "int32", "s16": "int32", "u16": "int32", "s32": "int32", "u32": "int32",
    "s64": "int32", "u64": "int32", "int16": "int32", "int32": "int32", "int64": "int32",
    "uint16": "int32", "uint32": "int32", "uint64": "int32", "bool": "int32", "int": "int32",
}


def dtype_class(dtype: object) -> str | None:
    """Map an XLA element type (``bf16``, ``f8e4m3fn``, ``s32``...) to a peak-rate class.

    All 8-bit floats (f8e4m3fn, f8e5m2, ...) are ``fp8``, 4-bit floats ``fp4``;
    integers wider than 8 bits and ``pred`` share ``int32`` (vector ALU ops).
    None for a missing or unrecognised dtype.
    """
    if dtype is None or (isinstance(dtype, float) and math.isnan(dtype)):
        return None
    text = str(dtype).strip().lower()
    if not text:
        return None
    if text in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[text]
    if text.startswith(("f8", "float8")):
        return "fp8"
    if text.startswith(("f4", "float4", "mxfp4", "nvfp4")):
        return "fp4"
    return None


@dataclass(frozen=True)
class Interconnect:
    """Scale-up network of one chip. Bandwidths one way, bytes/s.

    ``topology`` is ``2d_torus``/``3d_torus`` (TPU ICI: nearest neighbours,
    ``links`` per chip), ``switch`` (NVLink through NVSwitch: any peer at
    ``device_bandwidth``) or ``full_mesh`` (Infinity Fabric: one direct link of
    ``link_bandwidth`` to each of ``links`` peers).
    """

    type: str
    topology: str
    link_bandwidth: float | None = None
    links: int | None = None
    device_bandwidth: float | None = None

    @property
    def egress_bandwidth(self) -> float | None:
        """All the bytes/s one chip can send at once (one way)."""
        if self.device_bandwidth is not None:
            return self.device_bandwidth
        if self.link_bandwidth is not None and self.links is not None:
            return self.link_bandwidth * self.links
        return None


@dataclass
class Chip:
    """One chip's figures. ``sources`` maps a figure's path (``peak_flops.bf16``,
    ``hbm_bandwidth``, ``interconnect.link_bandwidth``...) to where it comes from."""

    name: str
    kind: str
    vendor: str | None = None
    aliases: tuple[str, ...] = ()
    peak_flops: dict[str, float] = field(default_factory=dict)
    hbm_bandwidth: float | None = None
    hbm_capacity: float | None = None
    on_chip_memory: float | None = None
    on_chip_memory_scope: str | None = None   # "per chip", "per SM", "per CU"
    on_chip_memory_what: str | None = None
    interconnect: Interconnect | None = None
    pcie_bandwidth: float | None = None
    dcn_bandwidth: float | None = None
    dtype_fallbacks: dict[str, tuple[str, str]] = field(default_factory=dict)  # class -> (class, reason)
    identify: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    assumption: bool = False                 # figures are assumptions (the default cpu entry)
    notes: list[str] = field(default_factory=list)

    def peak_flops_rule(self, dtype: object) -> tuple[float | None, str | None]:
        """(peak FLOP/s for ops of this dtype, note when a fallback was used).

        See the module docstring for the rule; None when the chip has no
        figure and no declared fallback for the dtype's class.
        """
        klass = dtype_class(dtype)
        if klass is None:
            return None, None
        if klass in self.peak_flops:
            return self.peak_flops[klass], None
        fallback = self.dtype_fallbacks.get(klass)
        if fallback and fallback[0] in self.peak_flops:
            to, reason = fallback
            return self.peak_flops[to], f"{klass} ops on {self.name} use the {to} peak: {reason}"
        return None, None

    def peak_flops_for(self, dtype: object) -> float | None:
        """Peak FLOP/s for ops of ``dtype`` (see :meth:`peak_flops_rule`)."""
        return self.peak_flops_rule(dtype)[0]

    def with_figures(self, source: str, *, peak_flops: dict[str, float] | None = None,
                     hbm_bandwidth: float | None = None, name: str | None = None) -> Chip:
        """A copy with some figures replaced (trace figures, command-line flags), credited to ``source``.

        ``peak_flops`` maps a dtype or dtype class (``"bf16"``, ``"f32"``) to FLOP/s. Every figure must be a
        positive, finite number: a zero, a NaN or a class no op has would judge every op wrongly, silently."""
        if name is not None and not (isinstance(name, str) and name.strip()):
            raise UserError(f"name={name!r}: expected the new chip's name (a non-empty string)")
        if peak_flops is not None and not isinstance(peak_flops, Mapping):
            raise UserError(f"peak_flops={peak_flops!r}: expected a dict of dtype class -> FLOP/s, e.g. {{'bf16': 1e15}}")
        chip = copy.deepcopy(self)
        if name:
            chip.name = name
        for key, value in (peak_flops or {}).items():
            klass = dtype_class(key)
            if klass is None:
                raise UserError(f"peak_flops: {key!r} is not a dtype class ({', '.join(DTYPE_CLASSES)})")
            chip.peak_flops[klass] = _figure(value, f"peak_flops[{key!r}]")
            chip.sources[f"peak_flops.{klass}"] = source
        if hbm_bandwidth is not None:
            chip.hbm_bandwidth = _figure(hbm_bandwidth, "hbm_bandwidth")
            chip.sources["hbm_bandwidth"] = source
        return chip

    @property
    def interconnect_bandwidth(self) -> float | None:
        """The scale-up figure the collective formulas start from, one way: a TPU ICI link,
        a GPU's NVLink egress, an Infinity Fabric link."""
        ic = self.interconnect
        if ic is None:
            return None
        if ic.topology == "switch":
            return ic.egress_bandwidth
        return ic.link_bandwidth

    def target_fields(self) -> dict[str, Any]:
        """The ``target`` object of ``traceview analyze --format json`` (less ``detected``)."""
        return {"name": self.name, "kind": self.kind, "peak_flops": dict(self.peak_flops),
                "hbm_bandwidth": self.hbm_bandwidth, "interconnect_bandwidth": self.interconnect_bandwidth,
                "dcn_bandwidth": self.dcn_bandwidth, "assumption": self.assumption,
                "sources": dict(self.sources), "notes": list(self.notes)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready figures with their sources (for ``traceview hardware --format json``)."""
        ic = self.interconnect
        return {
            "name": self.name, "aliases": list(self.aliases), "vendor": self.vendor, "kind": self.kind,
            "assumption": self.assumption,
            "peak_flops": dict(self.peak_flops),
            "hbm_bandwidth": self.hbm_bandwidth, "hbm_capacity": self.hbm_capacity,
            "on_chip_memory": None if self.on_chip_memory is None else {
                "value": self.on_chip_memory, "scope": self.on_chip_memory_scope,
                "what": self.on_chip_memory_what},
            "interconnect": None if ic is None else dataclasses.asdict(ic),
            "pcie_bandwidth": self.pcie_bandwidth, "dcn_bandwidth": self.dcn_bandwidth,
            "dtype_fallbacks": {k: {"to": to, "reason": why} for k, (to, why) in self.dtype_fallbacks.items()},
            "identify": dict(self.identify),
            "sources": dict(self.sources),
            "notes": list(self.notes),
        }


def _figure(value: object, what: str) -> float:
    """A chip figure (FLOP/s, bytes/s): a positive, finite number."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = as_float(value)
        if number > 0 and math.isfinite(number):
            return number
    raise UserError(f"{what}={value!r}: expected a positive, finite number")


def ridge_point_of(chip: Chip, dtype: object = "bf16") -> float | None:
    """Peak FLOP/s / HBM bytes/s for ``dtype``: the intensity above which a matmul is compute-bound."""
    peak = chip.peak_flops_for(dtype)
    if peak is None or not chip.hbm_bandwidth:
        return None
    return peak / chip.hbm_bandwidth
