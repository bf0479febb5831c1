"""On-disk cache of one host file's parsed tables: a second read of an unchanged trace is instant.

An entry is keyed by the file's identity (absolute path, size, modification
time) plus traceview's version and a fingerprint of the reader's source (so a
development checkout never reads tables an older reader wrote). It is one
file of plain arrays (columns as they are, categoricals as codes plus their
categories as UTF-8 bytes; no pickle): a JSON header naming each array's
dtype, shape, place and checksum, then the arrays' raw bytes, 64-byte
aligned; a column holding one value throughout is stored as that value.
Writing is a few large writes (no compression, no zip), and the command's
own put happens in a writer thread while the analysis goes on; reading is
one read, the columns are views of it. It lives under
``$XDG_CACHE_HOME/traceview`` (default ``~/.cache/traceview``;
``TRACEVIEW_CACHE_DIR`` overrides).

Beside it, a host's allocator events (the memory view's input: parsers.xspace.allocator_events)
are kept in an entry of their own (``.alloc``, same key and layout) once they
were read: a command that reads the tables from the cache then reads them
from there too, not from the file.

The cache is an accelerator only: a read-only or missing directory, a full
disk, a corrupt or foreign entry are all a miss, never an error. The oldest
entries go when the total passes ``TRACEVIEW_CACHE_MAX_MB`` (default 4096).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from traceview.cache.store import remove, store, touch
from traceview.cache_root import cache_root
from traceview.parsers.profile import Device
from traceview.parsers.remote import identity as remote_identity
from traceview.parsers.remote import url_of
from traceview.parsers.tables.trace_data import TraceData
from traceview.version import __version__

FORMAT = 2
SUFFIX = ".tables"
ALLOCATOR_SUFFIX = ".alloc"
_SUFFIX = SUFFIX
_MAGIC = b"TVTABLES"
_ALIGN = 64
# The dtypes an entry may hold (anything else in a header is a foreign or corrupt entry).
_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"}
_TABLES = ("ops", "host_events", "steps")
# Modules whose code decides what the tables hold.
_READER_MODULES = ("traceview.parsers.xspace.reader", "traceview.parsers.xspace.events", "traceview.parsers.xspace.lines",
                   "traceview.parsers.xspace.plane", "traceview.parsers.xspace.schema", "traceview.parsers.xspace.fast",
                   "traceview.parsers.native.kernels", "traceview.parsers.native.linker", "traceview.parsers.native.loader",
                   "traceview.parsers.xspace.file", "traceview.parsers.compressed", "traceview.parsers.tables.builder",
                   "traceview.parsers.tables.columns", "traceview.parsers.tables.conventions",
                   "traceview.parsers.tables.nesting", "traceview.parsers.tables.steps",
                   "traceview.parsers.tables.trace_data", "traceview.parsers.tables.gpu_kernels",
                   "traceview.parsers.discover", "traceview.parsers.layout", "traceview.parsers.profile",
                   "traceview.cache.tables", "traceview.parsers.trace_json.reader", "traceview.parsers.trace_file",
                   "traceview.parsers.remote", "traceview.parsers.xspace.allocator_events")
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
    """Where the entry for this file (as it is now) lives; None when the file cannot be stat'ed. An object
    behind an fsspec URL is keyed by the identity its filesystem gives (etag, generation, mtime and size)."""
    url = url_of(path)
    if url is not None:
        found = remote_identity(url)
        if found is None:
            return None
        ident = json.dumps([FORMAT, __version__, _reader_fingerprint(), url, found])
        return cache_root() / (hashlib.sha256(ident.encode()).hexdigest()[:32] + _SUFFIX)
    try:
        p = Path(path).resolve()
        st = p.stat()
    except OSError:
        return None
    ident = json.dumps([FORMAT, __version__, _reader_fingerprint(), str(p), st.st_size, st.st_mtime_ns])
    return cache_root() / (hashlib.sha256(ident.encode()).hexdigest()[:32] + _SUFFIX)


def get(path: str | Path) -> TraceData | None:
    """The cached tables of this file, or None (absent, stale, unreadable or corrupt entry)."""
    return _get(path, SUFFIX, _unpack)


def _get(path: str | Path, suffix: str, unpack: Callable[[dict[str, np.ndarray]], Any]) -> Any:
    """The entry of this file with this suffix, unpacked; None when absent, stale or corrupt (then removed)."""
    if _pending:
        flush()  # an entry this process is still writing
    entry = entry_path(path)
    if entry is None:
        return None
    entry = entry.with_suffix(suffix)
    if not entry.is_file():
        return None
    try:
        data = unpack(_read_arrays(entry))
    except Exception:  # a corrupt or foreign entry is a miss
        remove(entry)
        return None
    touch(entry)
    return data


def get_allocator(path: str | Path) -> pd.DataFrame | None:
    """The cached allocator events of this file, or None (absent, stale, unreadable or corrupt entry)."""
    return _get(path, ALLOCATOR_SUFFIX, _unpack_allocator)


def _unpack_allocator(arrays: dict[str, np.ndarray]) -> pd.DataFrame:
    meta = json.loads(arrays["meta"].tobytes())
    if meta.get("format") != FORMAT:
        raise ValueError("other format")
    return _unpack_frame("allocator", meta["columns"], arrays)


def put_allocator(path: str | Path, frame: pd.DataFrame, background: bool = False) -> bool:
    """Store the allocator events read from this file (as put stores its tables)."""
    entry = entry_path(path)
    if entry is None:
        return False
    try:
        arrays: dict[str, np.ndarray] = {}
        columns = _pack_frame("allocator", frame, arrays)
        arrays["meta"] = np.frombuffer(json.dumps({"format": FORMAT, "columns": columns}).encode(), dtype=np.uint8)
        plan = _plan(arrays)
    except (_Unstorable, ValueError, TypeError):
        return False
    return _put_planned(entry.with_suffix(ALLOCATOR_SUFFIX), plan, background)


def put(path: str | Path, data: TraceData, background: bool = False) -> bool:
    """Store the tables read from this file; False (and nothing stored) when that is not possible.

    With `background`, the tables are checked here and written by a writer
    thread while the caller goes on (True then means "being stored"); the
    entry is kept only if the arrays still hold what they held when put was
    called (a table changed in place meanwhile: nothing is stored). The
    process waits for the writer before it exits; get and flush wait too.
    """
    entry = entry_path(path)
    if entry is None:
        return False
    try:
        plan = _plan(_pack(data))
    except (_Unstorable, ValueError, TypeError):
        return False
    return _put_planned(entry, plan, background)


def _put_planned(entry: Path, plan: tuple[bytes, list[tuple[int, np.ndarray]], list], background: bool) -> bool:
    if not background:
        return _store(entry, plan, verify=False)
    # A thread of its own that ends with the write (no idle thread left for a later fork to copy);
    # not a daemon: the interpreter waits for it before exiting.
    writer = threading.Thread(target=_store, args=(entry, plan, True), name="traceview-table-cache")
    with _writer_lock:
        _pending.append(writer)
        writer.start()
    return True


def flush() -> None:
    """Wait until every background put has finished (stored or given up)."""
    with _writer_lock:
        pending = list(_pending)
        _pending.clear()
    for writer in pending:
        writer.join()


_writer_lock = threading.Lock()
_pending: list[threading.Thread] = []


def _store(entry: Path, plan: tuple[bytes, list[tuple[int, np.ndarray]], list], verify: bool) -> bool:
    """Write an entry atomically (traceview.cache.store.store); never raises."""
    header, payload, fills = plan

    def write(handle) -> None:
        _write_planned(handle, header, payload)
        if verify and not _unchanged(header, payload, fills):
            raise _Unstorable("a table changed while it was written")

    if not store(entry, entry.suffix, write):
        return False
    if str(entry.parent) not in _swept:  # entries of the first format are never read again: once per folder
        _swept.add(str(entry.parent))
        try:
            for old in entry.parent.glob("*.npz"):
                remove(old)
        except OSError:
            pass
    return True


_swept: set[str] = set()


def _checksum(a: np.ndarray) -> int:
    """A cheap checksum of an array's bytes (wrapping sum of 64-bit words, the tail, the length): catches
    a truncated, overwritten or bit-flipped entry without the cost of a CRC."""
    raw = a.reshape(-1).view(np.uint8)
    cut = raw.size - raw.size % 8
    with np.errstate(over="ignore"):
        total = int(raw[:cut].view(np.uint64).sum(dtype=np.uint64)) if cut else 0
    tail = int.from_bytes(raw[cut:].tobytes(), "little")
    return (total + tail * 0x9E3779B97F4A7C15 + raw.size) % (1 << 64)


def _constant(a: np.ndarray) -> str | None:
    """The one value every element of `a` has (its bytes, in hex), or None; compared bit for bit (NaN too)."""
    if a.size < 2:
        return None
    bits = a.reshape(-1).view(f"u{a.dtype.itemsize}")
    if not (bits == bits[0]).all():
        return None
    return a.reshape(-1)[:1].tobytes().hex()


def _plan(arrays: dict[str, np.ndarray]) -> tuple[bytes, list[tuple[int, np.ndarray]], list]:
    """The header of an entry (JSON: name, dtype, shape, offset, size, checksum of each array; a repeated
    value stored once), the arrays to write with their offsets, and the repeated-value arrays."""
    specs: list[list] = []
    payload: list[tuple[int, np.ndarray]] = []
    fills: list[tuple[np.ndarray, str]] = []
    offset = 0
    for name, a in arrays.items():
        if a.dtype.name not in _DTYPES:
            raise _Unstorable(f"dtype {a.dtype}")
        fill = _constant(a)
        if fill is not None:  # one value repeated (a column of -1, NaN, one category): stored once
            specs.append([name, a.dtype.name, list(a.shape), -1, fill, 0])
            fills.append((a, fill))
            continue
        a = np.ascontiguousarray(a)      # after the check: a column of one value held once stays so
        offset = -(-offset // _ALIGN) * _ALIGN
        specs.append([name, a.dtype.name, list(a.shape), offset, a.nbytes, _checksum(a)])
        payload.append((offset, a))
        offset += a.nbytes
    return json.dumps(specs).encode(), payload, fills


def _write_planned(handle, header: bytes, payload: list[tuple[int, np.ndarray]]) -> None:
    start = -(-(len(_MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN
    handle.write(_MAGIC + len(header).to_bytes(8, "little") + header)
    handle.write(bytes(start - len(_MAGIC) - 8 - len(header)))
    at = 0
    for off, a in payload:
        handle.write(bytes(off - at))
        if a.nbytes:
            handle.write(a.reshape(-1).view(np.uint8).data)
        at = off + a.nbytes


def _unchanged(header: bytes, payload: list[tuple[int, np.ndarray]], fills: list) -> bool:
    """Whether the arrays still hold what the header says (checked after a background write)."""
    sums = [spec[5] for spec in json.loads(header) if spec[3] != -1]
    return (all(_checksum(a) == c for (_, a), c in zip(payload, sums))
            and all(_constant(a) == fill for a, fill in fills))


def _read_arrays(entry: Path) -> dict[str, np.ndarray]:
    """The arrays of an entry (writable views of one buffer); ValueError when it is not exactly what was written."""
    with open(entry, "rb", buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        data = np.empty(size, dtype=np.uint8)  # not zeroed first: the read fills it
        view, done = data.data, 0
        while done < size:
            got = handle.readinto(view[done:])
            if not got:
                raise ValueError("short read")
            done += got
    if size < len(_MAGIC) + 8 or data[:len(_MAGIC)].tobytes() != _MAGIC:
        raise ValueError("not a table cache entry")
    length = int.from_bytes(data[len(_MAGIC):len(_MAGIC) + 8].tobytes(), "little")
    head_end = len(_MAGIC) + 8 + length
    if head_end > size:
        raise ValueError("truncated header")
    specs = json.loads(data[len(_MAGIC) + 8:head_end].tobytes())
    start = -(-head_end // _ALIGN) * _ALIGN
    out: dict[str, np.ndarray] = {}
    for name, dtype, shape, offset, nbytes, checksum in specs:
        if dtype not in _DTYPES or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise ValueError("bad array spec")
        itemsize = np.dtype(dtype).itemsize
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if offset == -1 and isinstance(nbytes, str):  # a repeated value, as hex
            value = np.frombuffer(bytes.fromhex(nbytes), dtype=dtype)
            if value.size != 1:
                raise ValueError("bad fill value")
            out[name] = np.full(shape, value[0], dtype=dtype)
            continue
        if not isinstance(offset, int) or not isinstance(nbytes, int) or offset < 0:
            raise ValueError("bad array spec")
        if count * itemsize != nbytes or start + offset + nbytes > size:
            raise ValueError("array past the end")
        a = data[start + offset:start + offset + nbytes].view(dtype).reshape(shape)
        if _checksum(a) != checksum:
            raise ValueError("checksum mismatch")
        out[name] = a
    return out


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
    tables = {table: _pack_frame(table, getattr(data, table), arrays) for table in _TABLES}
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
    frames = {table: _unpack_frame(table, meta["tables"][table], arrays) for table in _TABLES}
    hlo = {name: arrays[f"hlo:{i}"].tobytes() for i, name in enumerate(meta["hlo"])}
    devices = [Device(**_from_json(d)) for d in meta["devices"]]
    return TraceData(host=meta["host"], ops=frames["ops"], host_events=frames["host_events"],
                     steps=frames["steps"], devices=devices, hlo_protos=hlo,
                     environment=_from_json(meta["environment"]), warnings=meta["warnings"])


def _texts(key: str, cats: list[str], arrays: dict[str, np.ndarray]) -> None:
    encoded = [c.encode("utf-8", "surrogatepass") for c in cats]
    arrays[key + ":text"] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    arrays[key + ":ends"] = np.cumsum([len(e) for e in encoded], dtype=np.int64)


def _pack_frame(table: str, frame: pd.DataFrame, arrays: dict[str, np.ndarray]) -> list[list]:
    """Add the arrays of one table's columns to ``arrays``; returns their specs. Categorical columns are
    stored as codes and their categories; a column of strings and None (``text``) as codes (-1: None) and
    its distinct strings; any other object column cannot be stored."""
    if not isinstance(frame.index, pd.RangeIndex) or frame.index.start != 0 or frame.index.step != 1:
        raise _Unstorable("only tables with a default index are stored")
    columns: list[list] = []
    for i, name in enumerate(frame.columns):
        column = frame.iloc[:, i]
        key = f"{table}:{i}"
        if isinstance(column.dtype, pd.CategoricalDtype):
            cats = column.cat.categories
            if not all(isinstance(c, str) for c in cats):
                raise _Unstorable("non-string categories")
            _texts(key, list(cats), arrays)
            arrays[key + ":codes"] = column.cat.codes.to_numpy()
            columns.append([name, "category", str(cats.dtype), bool(column.cat.ordered)])
            continue
        values = column.to_numpy()
        if values.dtype != object:
            arrays[key] = values
            columns.append([name, str(column.dtype)])
            continue
        if not all(v is None or type(v) is str for v in values):
            raise _Unstorable("object column")
        distinct = sorted({v for v in values if v is not None})
        where = {v: k for k, v in enumerate(distinct)}
        _texts(key, distinct, arrays)
        arrays[key + ":codes"] = np.array([-1 if v is None else where[v] for v in values], dtype=np.int64)
        columns.append([name, "text"])
    return columns


def _unpack_frame(table: str, specs: list[list], arrays: dict[str, np.ndarray]) -> pd.DataFrame:
    out = {}
    for i, spec in enumerate(specs):
        name, dtype = spec[0], spec[1]
        key = f"{table}:{i}"
        if dtype in ("category", "text"):
            text = arrays[key + ":text"].tobytes()
            ends = arrays[key + ":ends"].tolist()
            starts = [0] + ends[:-1]
            cats = [text[s:e].decode("utf-8", "surrogatepass") for s, e in zip(starts, ends)]
            codes = arrays[key + ":codes"]
            if dtype == "category":
                out[name] = pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=spec[2]),
                                                      ordered=spec[3])
            else:
                values = np.array([None, *cats], dtype=object)   # code -1 -> None
                out[name] = pd.Series(values[codes.astype(np.int64) + 1], dtype=object)
        else:
            out[name] = arrays[key].astype(dtype, copy=False)
    return pd.DataFrame(out, copy=False)
