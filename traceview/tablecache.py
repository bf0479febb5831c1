"""On-disk cache of one host file's parsed tables: a second read of an unchanged trace is instant.

An entry is keyed by the file's identity (absolute path, size, modification
time) plus traceview's version and a fingerprint of the reader's source (so a
development checkout never reads tables an older reader wrote). It is one
numpy ``.npz`` file (columns as plain arrays, categoricals as codes plus their
categories as UTF-8 bytes; no pickle) under ``$XDG_CACHE_HOME/traceview``
(default ``~/.cache/traceview``; ``TRACEVIEW_CACHE_DIR`` overrides).

The cache is an accelerator only: a read-only or missing directory, a full
disk, a corrupt or foreign entry are all a miss, never an error. The oldest
entries go when the total passes ``TRACEVIEW_CACHE_MAX_MB`` (default 4096).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from traceview import __version__
from traceview.cachedir import cache_dir, evict, remove, touch
from traceview.parsers.xplane import TraceData
from traceview.profile import Device

FORMAT = 1
_SUFFIX = ".npz"
_TABLES = ("ops", "host_events", "steps")
# Modules whose code decides what the tables hold.
_READER_MODULES = ("traceview.parsers.xplane", "traceview.parsers.xspace_schema", "traceview.parsers.xspace_fast",
                   "traceview.parsers.xspace_kernels", "traceview.parsers.xspace_file", "traceview.parsers.compressed",
                   "traceview.parsers.discover", "traceview.profile", "traceview.tablecache")
# The TraceData fields an entry holds: a TraceData with other fields is not stored (nothing silently lost).
_FIELDS = {"host", "ops", "host_events", "steps", "devices", "hlo_protos", "environment", "warnings"}
_fingerprint: str | None = None


class _Unstorable(Exception):
    """Tables this format cannot hold exactly (then nothing is stored)."""


def _reader_fingerprint() -> str:
    global _fingerprint
    if _fingerprint is None:
        import importlib.util

        h = hashlib.sha256()
        for name in _READER_MODULES:
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.origin:
                try:
                    h.update(Path(spec.origin).read_bytes())
                except OSError:
                    h.update(name.encode())
        _fingerprint = h.hexdigest()[:16]
    return _fingerprint


def entry_path(path: str | Path) -> Path | None:
    """Where the entry for this file (as it is now) lives; None when the file cannot be stat'ed."""
    try:
        p = Path(path).resolve()
        st = p.stat()
    except OSError:
        return None
    ident = json.dumps([FORMAT, __version__, _reader_fingerprint(), str(p), st.st_size, st.st_mtime_ns])
    return cache_dir() / (hashlib.sha256(ident.encode()).hexdigest()[:32] + _SUFFIX)


def get(path: str | Path) -> TraceData | None:
    """The cached tables of this file, or None (absent, stale, unreadable or corrupt entry)."""
    entry = entry_path(path)
    if entry is None or not entry.is_file():
        return None
    try:
        with np.load(entry, allow_pickle=False) as z:
            data = _unpack({k: z[k] for k in z.files})
    except Exception:  # a corrupt or foreign entry is a miss
        remove(entry)
        return None
    touch(entry)
    return data


def put(path: str | Path, data: TraceData) -> bool:
    """Store the tables read from this file; False (and nothing stored) when that is not possible."""
    entry = entry_path(path)
    if entry is None:
        return False
    try:
        arrays = _pack(data)
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-", suffix=_SUFFIX)
        try:
            with os.fdopen(fd, "wb") as handle:
                np.savez(handle, **arrays)  # type: ignore[arg-type]
            os.replace(tmp, entry)
        except BaseException:
            remove(Path(tmp))
            raise
    except (OSError, _Unstorable, ValueError, TypeError):
        return False
    evict(entry.parent, _SUFFIX, keep=entry)
    return True


# ----------------------------------------------------------------- encoding


def _jsonable(value):
    if isinstance(value, (bytes, bytearray)):
        return {"__bytes__": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise _Unstorable(f"cannot store a {type(value).__name__}")


def _from_json(value):
    if isinstance(value, dict):
        if set(value) == {"__bytes__"}:
            return base64.b64decode(value["__bytes__"])
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def _pack(data: TraceData) -> dict[str, np.ndarray]:
    from dataclasses import fields

    if {f.name for f in fields(data)} != _FIELDS:
        raise _Unstorable("TraceData has fields this cache format does not know")
    arrays: dict[str, np.ndarray] = {}
    tables: dict[str, list] = {}
    for table in _TABLES:
        frame: pd.DataFrame = getattr(data, table)
        if not isinstance(frame.index, pd.RangeIndex) or frame.index.start != 0 or frame.index.step != 1:
            raise _Unstorable("only tables with a default index are stored")
        columns = []
        for i, name in enumerate(frame.columns):
            column = frame.iloc[:, i]
            key = f"{table}:{i}"
            if isinstance(column.dtype, pd.CategoricalDtype):
                cats = column.cat.categories
                if not all(isinstance(c, str) for c in cats):
                    raise _Unstorable("non-string categories")
                encoded = [c.encode("utf-8", "surrogatepass") for c in cats]
                arrays[key + ":codes"] = column.cat.codes.to_numpy()
                arrays[key + ":text"] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
                arrays[key + ":ends"] = np.cumsum([len(e) for e in encoded], dtype=np.int64)
                columns.append([name, "category", str(cats.dtype), bool(column.cat.ordered)])
            else:
                values = column.to_numpy()
                if values.dtype == object:
                    raise _Unstorable("object column")
                arrays[key] = values
                columns.append([name, str(column.dtype)])
        tables[table] = columns
    names = list(data.hlo_protos)
    for i, name in enumerate(names):
        arrays[f"hlo:{i}"] = np.frombuffer(bytes(data.hlo_protos[name]), dtype=np.uint8)
    meta = {"format": FORMAT, "host": data.host, "tables": tables, "hlo": names,
            "devices": [_jsonable(asdict(d)) for d in data.devices],
            "environment": _jsonable(data.environment), "warnings": list(data.warnings)}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    return arrays


def _unpack(arrays: dict[str, np.ndarray]) -> TraceData:
    meta = json.loads(arrays["meta"].tobytes())
    if meta.get("format") != FORMAT:
        raise ValueError("other format")
    frames = {}
    for table in _TABLES:
        out = {}
        for i, spec in enumerate(meta["tables"][table]):
            name, dtype = spec[0], spec[1]
            key = f"{table}:{i}"
            if dtype == "category":
                text = arrays[key + ":text"].tobytes()
                ends = arrays[key + ":ends"].tolist()
                starts = [0] + ends[:-1]
                cats = [text[s:e].decode("utf-8", "surrogatepass") for s, e in zip(starts, ends)]
                out[name] = pd.Categorical.from_codes(arrays[key + ":codes"],
                                                      categories=pd.Index(cats, dtype=spec[2]), ordered=spec[3])
            else:
                out[name] = arrays[key].astype(dtype, copy=False)
        frames[table] = pd.DataFrame(out)
    hlo = {name: arrays[f"hlo:{i}"].tobytes() for i, name in enumerate(meta["hlo"])}
    devices = [Device(**_from_json(d)) for d in meta["devices"]]
    return TraceData(host=meta["host"], ops=frames["ops"], host_events=frames["host_events"],
                     steps=frames["steps"], devices=devices, hlo_protos=hlo,
                     environment=_from_json(meta["environment"]), warnings=meta["warnings"])
