"""The hardware database: what each chip can do, and where each figure comes from.

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
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from traceview.errors import UserError
from traceview.userfiles import read_json, read_toml

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
        """A copy with some figures replaced (trace figures, command-line flags), credited to ``source``."""
        chip = copy.deepcopy(self)
        if name:
            chip.name = name
        for key, value in (peak_flops or {}).items():
            klass = dtype_class(key) or key
            chip.peak_flops[klass] = float(value)
            chip.sources[f"peak_flops.{klass}"] = source
        if hbm_bandwidth is not None:
            chip.hbm_bandwidth = float(hbm_bandwidth)
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


# ---------------------------------------------------------------- loading

_FIGURES = ("hbm_bandwidth", "hbm_capacity", "pcie_bandwidth", "dcn_bandwidth")


class _Reader:
    """Turns one raw chip entry into a Chip, resolving figure sources."""

    def __init__(self, sources: dict[str, str], origin: str, user: bool):
        self.sources = sources
        self.origin = origin
        self.user = user

    def figure(self, raw: dict, key: str, path: str, into: dict[str, str]) -> float | None:
        item = raw.get(key)
        if item is None:
            return None
        if isinstance(item, dict):
            value, src, note = item.get("value"), item.get("source"), item.get("note")
            if item.get("assumption"):
                note = f"ASSUMPTION; {note}" if note else "ASSUMPTION"
        else:
            value, src, note = item, None, None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise UserError(f"{self.origin}: {path} must be a positive number, got {value!r}")
        if src is None:
            if not self.user:
                raise UserError(f"{self.origin}: {path} has no source")
            src = f"user file {self.origin}"
        text = self.sources.get(src, src)
        into[path] = f"{text} ({note})" if note else text
        return float(value)

    def chip(self, raw: dict) -> Chip:
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise UserError(f"{self.origin}: a chip entry has no 'name'")
        kind = str(raw.get("kind", "")).upper()
        if kind not in KINDS:
            raise UserError(f"{self.origin}: chip {name!r} needs 'kind' TPU, GPU or CPU, got {raw.get('kind')!r}")
        where = f"{self.origin}: chip {name!r}"
        for key, kind_of in (("peak_flops", dict), ("dtype_fallbacks", dict), ("interconnect", dict),
                             ("identify", dict), ("aliases", (list, tuple))):
            if raw.get(key) is not None and not isinstance(raw[key], kind_of):
                raise UserError(f"{where}: '{key}' must be a {'list' if key == 'aliases' else 'table/object'}")
        sources: dict[str, str] = {}
        peaks: dict[str, float] = {}
        for key in (raw.get("peak_flops") or {}):
            klass = dtype_class(key) if key not in DTYPE_CLASSES else key
            if klass is None:
                raise UserError(f"{where}: unknown dtype {key!r} in peak_flops (use one of {', '.join(DTYPE_CLASSES)})")
            peaks[klass] = self.figure(raw["peak_flops"], key, f"peak_flops.{klass}", sources)
        figures = {key: self.figure(raw, key, key, sources) for key in _FIGURES}
        memory = raw.get("on_chip_memory")
        on_chip = self.figure(raw, "on_chip_memory", "on_chip_memory", sources)
        fallbacks = {}
        for key, item in (raw.get("dtype_fallbacks") or {}).items():
            klass, to = dtype_class(key), dtype_class(item.get("to") if isinstance(item, dict) else item)
            if klass is None or to is None:
                raise UserError(f"{where}: bad dtype_fallbacks entry {key!r}")
            reason = item.get("reason", "declared in the hardware file") if isinstance(item, dict) else \
                "declared in the hardware file"
            fallbacks[klass] = (to, reason)
        return Chip(
            name=name.lower(), kind=kind, vendor=raw.get("vendor"),
            aliases=tuple(str(a).lower() for a in raw.get("aliases") or ()),
            peak_flops=peaks, on_chip_memory=on_chip,
            on_chip_memory_scope=memory.get("scope") if isinstance(memory, dict) else None,
            on_chip_memory_what=memory.get("what") if isinstance(memory, dict) else None,
            interconnect=self.interconnect(raw.get("interconnect"), where, sources),
            dtype_fallbacks=fallbacks, identify=dict(raw.get("identify") or {}),
            sources=sources, assumption=bool(raw.get("assumption", False)),
            notes=list(raw.get("notes", [])), **figures,
        )

    def interconnect(self, raw: dict | None, where: str, sources: dict[str, str]) -> Interconnect | None:
        if not raw:
            return None
        topology = raw.get("topology")
        if topology not in TOPOLOGIES:
            raise UserError(f"{where}: interconnect topology must be one of {', '.join(TOPOLOGIES)}, got {topology!r}")
        links = self.figure(raw, "links", "interconnect.links", sources)
        return Interconnect(
            type=str(raw.get("type", "")), topology=topology,
            link_bandwidth=self.figure(raw, "link_bandwidth", "interconnect.link_bandwidth", sources),
            links=None if links is None else int(links),
            device_bandwidth=self.figure(raw, "device_bandwidth", "interconnect.device_bandwidth", sources),
        )


@lru_cache(maxsize=1)
def _builtin() -> dict:
    text = resources.files("traceview").joinpath("data/hardware.json").read_text(encoding="utf-8")
    return json.loads(text)


def _read_user_file(path: Path) -> dict:
    """A user hardware file as {"chips": [...], "sources": {...}}."""
    raw = read_toml(path, "hardware file") if path.suffix.lower() == ".toml" else read_json(path, "hardware file")
    if isinstance(raw, list):
        raw = {"chips": raw}
    elif isinstance(raw, dict) and "chips" not in raw and "name" in raw:
        raw = {"chips": [raw]}
    if not isinstance(raw, dict) or not isinstance(raw.get("chips"), list):
        raise UserError(f"{path}: expected a chip object, a list of chips or {{\"chips\": [...]}}")
    return raw


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and "value" not in value:
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _key(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def load_hardware(extra_file: str | Path | None = None) -> dict[str, Chip]:
    """The chip database by name: the built-in table, plus or overridden by ``extra_file``.

    ``extra_file`` (JSON, or TOML on Python 3.11+) holds one chip object, a
    list of them or ``{"chips": [...], "sources": {...}}`` in the built-in
    layout; figures may be plain numbers. An entry whose name or alias
    matches a known chip overrides only the figures it gives.
    """
    builtin = _builtin()
    sources = dict(builtin["sources"])
    raws: dict[str, dict] = {raw["name"]: raw for raw in builtin["chips"]}
    user_names: set[str] = set()
    origin = origin_user = "traceview/data/hardware.json"
    if extra_file is not None:
        path = Path(extra_file)
        user = _read_user_file(path)
        sources.update(user.get("sources") or {})
        lookup = {_key(n): n for n, r in raws.items()}
        lookup.update({_key(a): n for n, r in raws.items() for a in r.get("aliases", ())})
        for entry in user["chips"]:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise UserError(f"{path}: every chip entry needs a 'name'")
            known = lookup.get(_key(entry["name"]))
            if known:
                merged = _merge(raws[known], {k: v for k, v in entry.items() if k != "name"})
                merged["notes"] = list(merged.get("notes", [])) + [f"figures overridden by {path}"]
                raws[known] = merged
                user_names.add(known)
            else:
                raws[_key(entry["name"])] = entry
                user_names.add(_key(entry["name"]))
        origin_user = str(path)
    db = {}
    for name, raw in raws.items():
        user = name in user_names
        reader = _Reader(sources, origin_user if user else origin, user)
        chip = reader.chip(raw)
        db[chip.name] = chip
    return db


def get_chip(name: str, db: dict[str, Chip]) -> Chip:
    """The chip called ``name`` (or one of its aliases); UserError listing known names otherwise."""
    wanted = _key(name)
    for chip in db.values():
        if wanted == _key(chip.name) or wanted in (_key(a) for a in chip.aliases):
            return chip
    raise UserError(f"unknown target {name!r}; known chips: {', '.join(db)} "
                    "(`traceview hardware` lists them with their aliases)")


# ---------------------------------------------------------------- listing


def _cell(value: float | None, scale: float) -> str:
    return "-" if value is None else f"{value / scale:.4g}"


def format_hardware_table(db: dict[str, Chip]) -> str:
    """A plain-text table of every chip (``traceview hardware``)."""
    header = ["chip", "kind", "bf16 TFLOP/s", "fp8 TFLOP/s", "fp32 TFLOP/s", "HBM GB/s", "HBM GB",
              "ridge bf16", "link GB/s", "egress GB/s", "aliases"]
    rows = []
    for chip in db.values():
        ic = chip.interconnect
        ridge = ridge_point_of(chip, "bf16")
        rows.append([
            chip.name + (" *" if chip.assumption else ""), chip.kind,
            _cell(chip.peak_flops.get("bf16"), 1e12), _cell(chip.peak_flops.get("fp8"), 1e12),
            _cell(chip.peak_flops.get("fp32"), 1e12), _cell(chip.hbm_bandwidth, 1e9),
            _cell(chip.hbm_capacity, 1e9), "-" if ridge is None else f"{ridge:.0f}",
            _cell(ic.link_bandwidth if ic else None, 1e9), _cell(ic.egress_bandwidth if ic else None, 1e9),
            ", ".join(chip.aliases),
        ])
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("Rates dense, per chip; bandwidths one way. * = assumed figures (override with --hardware-file). "
                 "`traceview hardware --format json` gives every figure's source.")
    return "\n".join(lines)


def hardware_json(db: dict[str, Chip]) -> dict[str, Any]:
    """Every chip with its figures and sources (``traceview hardware --format json``)."""
    return {"chips": [chip.to_dict() for chip in db.values()]}


def ridge_point_of(chip: Chip, dtype: object = "bf16") -> float | None:
    """Peak FLOP/s / HBM bytes/s for ``dtype``: the intensity above which a matmul is compute-bound."""
    peak = chip.peak_flops_for(dtype)
    if peak is None or not chip.hbm_bandwidth:
        return None
    return peak / chip.hbm_bandwidth
