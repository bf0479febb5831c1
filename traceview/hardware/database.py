"""Loading the chip database: the built-in table (``traceview/data/hardware.json``) plus a user file.

Every figure keeps its source; a user file (``--hardware-file``) adds chips or
overrides single figures of a known one.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

from traceview.config.files import read_json, read_toml, validate
from traceview.errors import UserError
from traceview.hardware.chips import DTYPE_CLASSES, KINDS, TOPOLOGIES, Chip, Interconnect, dtype_class

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
            peak = self.figure(raw["peak_flops"], key, f"peak_flops.{klass}", sources)
            if peak is not None:  # null: no figure, the fallback rule applies
                peaks[klass] = peak
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
    if not all(isinstance(entry, dict) and isinstance(entry.get("name"), str) for entry in raw["chips"]):
        raise UserError(f"{path}: every chip entry needs a 'name'")
    _unknown_keys(raw, _TOP_KEYS, f"{path}")
    for entry in raw["chips"]:
        if isinstance(entry, dict):
            _check_chip_keys(entry, f"{path}: chip {entry.get('name')!r}")
    validate(raw, "hardware", path, "/oneOf/2")
    return raw


# Every key a hardware file may use (docs/hardware.md); anything else is a typo, refused with one line.
_TOP_KEYS = frozenset({"chips", "sources", "schema_version", "about"})
_CHIP_KEYS = frozenset({"name", "kind", "vendor", "aliases", "peak_flops", "hbm_bandwidth", "hbm_capacity",
                        "pcie_bandwidth", "dcn_bandwidth", "on_chip_memory", "interconnect", "dtype_fallbacks",
                        "identify", "assumption", "notes"})
_FIGURE_KEYS = frozenset({"value", "source", "note", "assumption"})
_ON_CHIP_KEYS = _FIGURE_KEYS | {"scope", "what"}
_INTERCONNECT_KEYS = frozenset({"type", "topology", "link_bandwidth", "links", "device_bandwidth"})
_IDENTIFY_KEYS = frozenset({"vendor", "model_strings", "model_patterns", "compute_capability", "core_count",
                            "memory_bytes", "clock_hz", "source", "note"})
_FALLBACK_KEYS = frozenset({"to", "reason"})


def _unknown_keys(raw: dict, known: frozenset[str], where: str) -> None:
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        import difflib

        hint = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        raise UserError(f"{where}: unknown key {unknown[0]!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                        + f"; known keys: {', '.join(sorted(known))} (see docs/hardware.md)")


def _check_chip_keys(entry: dict, where: str) -> None:
    """Refuse misspelt keys in a user's chip entry, at every level (a typo would leave a figure unset)."""
    _unknown_keys(entry, _CHIP_KEYS, where)
    for key in (*_FIGURES, "on_chip_memory"):
        if isinstance(entry.get(key), dict):
            _unknown_keys(entry[key], _ON_CHIP_KEYS if key == "on_chip_memory" else _FIGURE_KEYS, f"{where}: {key}")
    for dtype, item in (entry.get("peak_flops") or {}).items() if isinstance(entry.get("peak_flops"), dict) else ():
        if isinstance(item, dict):
            _unknown_keys(item, _FIGURE_KEYS, f"{where}: peak_flops.{dtype}")
    link = entry.get("interconnect")
    if isinstance(link, dict):
        _unknown_keys(link, _INTERCONNECT_KEYS, f"{where}: interconnect")
        for key in ("link_bandwidth", "links", "device_bandwidth"):
            if isinstance(link.get(key), dict):
                _unknown_keys(link[key], _FIGURE_KEYS, f"{where}: interconnect.{key}")
    if isinstance(entry.get("identify"), dict):
        _unknown_keys(entry["identify"], _IDENTIFY_KEYS, f"{where}: identify")
    for dtype, item in (entry.get("dtype_fallbacks") or {}).items() \
            if isinstance(entry.get("dtype_fallbacks"), dict) else ():
        if isinstance(item, dict):
            _unknown_keys(item, _FALLBACK_KEYS, f"{where}: dtype_fallbacks.{dtype}")


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
        from_user = name in user_names
        reader = _Reader(sources, origin_user if from_user else origin, from_user)
        chip = reader.chip(raw)
        db[chip.name] = chip
    return db


def get_chip(name: str, db: dict[str, Chip]) -> Chip:
    """The chip called ``name`` (or one of its aliases); UserError listing known names otherwise (a name that
    is not a string, e.g. ``target=123`` from Python, included)."""
    if not isinstance(name, str):
        raise UserError(f"target {name!r}: expected a chip name or alias (`traceview hardware` or "
                        "traceview.chips() lists them)")
    wanted = _key(name)
    for chip in db.values():
        if wanted == _key(chip.name) or wanted in (_key(a) for a in chip.aliases):
            return chip
    raise UserError(f"unknown target {name!r}; known chips: {', '.join(db)} "
                    "(`traceview hardware` lists them with their aliases)")
