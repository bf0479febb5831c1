"""Runtime allocator events: ``MemoryAllocation`` / ``MemoryDeallocation`` on the ``/host:CPU`` plane.

XLA's BFC allocators (and the TPU runtime) emit one event per allocation and
deallocation, each carrying the allocator's state just after it: bytes
reserved (stack), allocated (heap) and available, fragmentation, the lifetime
peak, plus what was asked for (requested / allocation bytes, address) and,
where the framework set them, the op, region, dtype and shape. JAX on the CPU
writes none.

This reader is separate from parsers.xspace.reader on purpose: it decodes only the
host plane's allocator events, once, into one DataFrame (ALLOCATOR_COLUMNS).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from traceview.errors import TraceError
from traceview.parsers.layout import host_of
from traceview.parsers.tables.conventions import MAX_TIME_PS
from traceview.parsers.xspace.schema import (
    STAT_BYTES,
    STAT_DOUBLE,
    STAT_INT64,
    STAT_NO_VALUE,
    STAT_REF,
    STAT_STR,
    STAT_UINT64,
    WireError,
    XLineRaw,
    XPlaneRaw,
    decode_events,
    decode_wide,
    field_span,
    varint_bytes,
)

HOST_PLANE = "/host:CPU"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
ALLOCATION, DEALLOCATION = "MemoryAllocation", "MemoryDeallocation"

# One row per allocator event, in time order per memory.
ALLOCATOR_COLUMNS: dict[str, str] = {
    "host": "category",
    "memory": "category",          # allocator_name ("GPU_0_bfc"), or the TPU's index_on_host / device_ordinal
    "time_ps": "int64",            # absolute (session clock)
    "kind": "category",            # "alloc" | "free"
    "stack_bytes": "int64",        # bytes_reserved after the event
    "heap_bytes": "int64",         # bytes_allocated after the event
    "free_bytes": "int64",         # bytes_available after the event
    "fragmentation": "float64",
    "peak_bytes_in_use": "int64",  # the allocator's lifetime peak so far
    "requested_bytes": "int64",
    "allocation_bytes": "int64",
    "address": "uint64",
    "step": "int64",               # group_id; -1 when the event has none
    "tf_op": "object",             # None where not set
    "region_type": "object",
    "data_type": "object",
    "shape": "object",
}

_INT_STATS = {"bytes_reserved": "stack_bytes", "bytes_allocated": "heap_bytes", "bytes_available": "free_bytes",
              "peak_bytes_in_use": "peak_bytes_in_use", "requested_bytes": "requested_bytes",
              "allocation_bytes": "allocation_bytes", "addr": "address", "group_id": "step"}
_STR_STATS = {"tf_op": "tf_op", "region_type": "region_type", "tensor_shapes": "shape", "shape": "shape"}
_ID_STATS = ("allocator_name", "index_on_host", "device_ordinal")
_WANTED = tuple(_INT_STATS) + tuple(_STR_STATS) + _ID_STATS + ("fragmentation", "data_type")


def empty_allocator_frame() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in ALLOCATOR_COLUMNS.items()})


def read_allocator_events(path: str | Path, host: str | None = None) -> pd.DataFrame:
    """Every allocator event in one ``*.xplane.pb`` file (empty frame when it has none)."""
    from traceview.parsers.xspace.file import load_xspace  # file checks and decompression live there

    path = Path(path)
    host = host or host_of(path)
    plane = _host_plane_alone(path)
    if plane is None:
        # The plain protobuf path: allocator events are picked by their raw bytes (the compiled reader's lines
        # keep no per-event bytes), and only the host plane's few matching events are decoded.
        space = load_xspace(path, fast=False)
        plane = next((p for p in space.planes if p.name == HOST_PLANE), False)
    if plane is False:
        return empty_allocator_frame()
    return allocator_events_of_plane(plane, host, str(path))


def _host_plane_alone(path: Path):
    """The host plane parsed from its own bytes (_plane_bytes: after the trace's read, its device planes
    are not read again); False when the file has none; None where the whole file must be read."""
    from google.protobuf.message import DecodeError

    raw = _plane_bytes(path, HOST_PLANE)
    if raw is None:
        return None
    if not raw:
        return False
    from traceview.parsers.native import loader as native_loader
    from traceview.parsers.xspace import fast as xspace_fast

    # Where the trace's read loaded the compiled reader (a large file, a pod's hosts), the plane's lines
    # are walked by it, each decoded whole; a small trace's read does not load it for this.
    if native_loader.loaded():
        try:
            return xspace_fast.parse_plane(raw)
        except (DecodeError, WireError):
            pass                # the raw path below says what is wrong, as it did
    try:
        return XPlaneRaw.FromString(raw)  # its lines' events stay bytes
    except DecodeError:  # e.g. a name that is not UTF-8: the whole-file path repairs and warns
        return None


_NAME_FIELDS = 8        # a plane's name is looked for among its first fields (writers put it second)
_NAME_BYTES = 4096
_SPACE_FIELDS = 4096    # more top-level fields (planes, errors, hostnames) than this: left to protobuf


def _plane_bytes(path: Path, name: str) -> bytes | None:
    """The bytes of the first plane of a plain (uncompressed) XSpace file named `name`, found by reading
    field headers only (a few bytes each; no memory map): the rest of the file is not read. Every field
    of the XSpace is checked to lie within the file. b"": no such plane; None: the whole-file read must
    decide (a compressed, malformed or oversized file, one of thousands of top-level fields, or a plane
    whose name is not among its first fields)."""
    from traceview.parsers.compressed import _SUFFIXES, PROTO_LIMIT, compression_of

    if path.suffix.lower() in _SUFFIXES:
        return None
    wanted = name.encode()
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if not 0 < size <= PROTO_LIMIT or compression_of(fh.read(8)) is not None:
                return None
            found: tuple[int, int] | None = None
            pos = fields = 0
            while pos < size:  # the XSpace's fields: planes (1), errors, warnings, hostnames
                fields += 1
                field = _field_at(fh, pos, size) if fields <= _SPACE_FIELDS else None
                if field is None:
                    return None
                number, wire, start, end = field
                if number == 1 and found is None:
                    plane_name = _plane_name(fh, start, end) if wire == 2 else None
                    if plane_name is None:
                        return None
                    if plane_name == wanted:
                        found = (start, end)
                pos = end
            if found is None:
                return b""
            fh.seek(found[0])
            data = fh.read(found[1] - found[0])
            return data if len(data) == found[1] - found[0] else None
    except OSError:
        return None


def _plane_name(fh, start: int, end: int) -> bytes | None:
    """A plane's name (XPlane field 2) among its first fields; b"" when it has none; None when not found
    among them or malformed."""
    pos = start
    for _ in range(_NAME_FIELDS):
        if pos >= end:
            return b""
        field = _field_at(fh, pos, end)
        if field is None:
            return None
        number, wire, value_start, value_end = field
        if number == 2:
            if wire != 2 or value_end - value_start > _NAME_BYTES:
                return None
            fh.seek(value_start)
            return fh.read(value_end - value_start)
        pos = value_end
    return None


def _field_at(fh, pos: int, limit: int) -> tuple[int, int, int, int] | None:
    """(field number, wire type, value start, value end) of the field whose tag is at `pos`; None when it
    is malformed or runs past `limit`."""
    fh.seek(pos)
    head = fh.read(min(20, limit - pos))
    try:
        number, wire, start, end = field_span(head, 0)
    except WireError:
        return None
    if number == 0 or pos + end > limit:
        return None
    return number, wire, pos + start, pos + end


def allocator_events_of_plane(plane, host: str, where: str) -> pd.DataFrame:
    """The allocator events of one host plane (raw protobuf, or read by xspace.fast), as columns: no Python
    object per event."""
    md_names = {k: v.name for k, v in plane.event_metadata.items()}
    kinds = {k: ("alloc" if n == ALLOCATION else "free") for k, n in md_names.items()
             if n in (ALLOCATION, DEALLOCATION)}
    if not kinds:
        return empty_allocator_frame()
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    every = [k for k, n in stat_names.items() if n in _WANTED]
    ids = {stat_names[k]: k for k in every}
    if len(ids) < len(every):
        # Two stat ids of one name: which counts depends on their order in each event, which the columns
        # do not keep; then the event's last one, as a row by row read takes it.
        return _frame(_rows_by_name(plane, kinds, stat_names, np.array(every, dtype=np.int64), host, where))
    wanted = np.array(list(ids.values()), dtype=np.int64)
    prefixes = _prefixes(kinds)
    kind_ids = np.fromiter(kinds, dtype=np.int64, count=len(kinds))
    parts = []
    for line in plane.lines:
        cols = _line_columns(line, prefixes, wanted, where)
        if cols is None:
            continue
        base = int(line.timestamp_ns) * 1000
        if not _INT64_MIN <= base <= _INT64_MAX:
            continue
        picked = np.flatnonzero(np.isin(cols.metadata_id, kind_ids))
        # a time that cannot be (negative, overflowing) is dropped, as the op reader drops it; compared as
        # offsets, which cannot overflow
        offsets = cols.offset_ps[picked]
        picked = picked[(offsets >= -base) & (offsets <= MAX_TIME_PS - base)]
        if picked.size:
            parts.append(_columns(cols, picked, base, list(ids), stat_names, kinds))
    if not parts:
        return empty_allocator_frame()
    columns = {name: (np.concatenate([p[name] for p in parts]) if isinstance(parts[0][name], np.ndarray)
                      else [v for p in parts for v in p[name]]) for name in parts[0]}
    columns["host"] = [host] * len(columns["time_ps"])
    return _frame(columns)


def _line_columns(line, prefixes: tuple[bytes, ...], wanted: np.ndarray, where: str):
    """A line's events with the wanted stats as columns (schema.decode_wide), or None when none of
    its events can be an allocator event. A line read by xspace.fast is decoded whole (compiled); a raw
    line, or one with a malformed event anywhere (decoded the raw way then, so the error is the same),
    only its events that may be allocator events."""
    if hasattr(line.events, "decode_wide"):
        try:
            return decode_wide(line.events, wanted)
        except WireError:
            pass
    raw = _candidates(line, prefixes)
    if not raw:
        return None
    try:
        return decode_wide(raw, wanted)
    except WireError as exc:
        raise TraceError(f"{where}: corrupt events on line {line.name!r} ({exc})") from exc


def _prefixes(kinds: dict[int, str]) -> tuple[bytes, ...]:
    """How an allocator event's bytes begin: its metadata id, written first (field 1, tag 0x08)."""
    return tuple(b"\x08" + varint_bytes(k) for k in kinds)


def _candidates(line, prefixes: tuple[bytes, ...]) -> list[bytes]:
    """A line's events that may be allocator events, as bytes: those whose metadata id is an allocator
    event's (varints are prefix-free), and any written otherwise. A line read by xspace.fast keeps no
    per-event bytes: its own bytes are parsed for them."""
    events = line.events
    if hasattr(events, "data"):
        events = XLineRaw.FromString(bytes(events.data)).events
    return [e for e in events if e.startswith(prefixes) or not e.startswith(b"\x08")]


_WHOLE_KINDS = (STAT_NO_VALUE, STAT_UINT64, STAT_INT64)   # a stat read as an int64 (no value: 0)


def _columns(cols, picked: np.ndarray, base_ps: int, names: list[str], stat_names: dict[int, str],
             kinds: dict[int, str]) -> dict:
    """The frame's columns for the picked events of one line (their stats as _row reads them)."""
    stat = {name: k for k, name in enumerate(names)}
    kind = cols.kind[:, picked]
    bits = cols.bits[:, picked]
    n = picked.size

    def texts(name: str) -> list[str | None]:
        """A stat's text per event (a string's, or a reference's name), None where it has none or it is empty."""
        k = stat.get(name)
        if k is None:
            return [None] * n
        out: list[str | None] = [None] * n
        for i in np.flatnonzero((kind[k] == STAT_STR) | (kind[k] == STAT_REF)).tolist():
            if kind[k, i] == STAT_STR:
                start = int(bits[k, i])
                text = bytes(cols.buffer[start:start + int(cols.size[k, picked[i]])]).decode("utf-8", "replace")
            else:
                text = stat_names.get(int(bits[k, i]), "")
            out[i] = text or None
        return out

    def integers(name: str, default: int) -> np.ndarray:
        """A stat as _int reads it: integers as they are, a double truncated, a text parsed (else `default`)."""
        out = np.full(n, default, dtype=np.int64)
        k = stat.get(name)
        if k is None:
            return out
        is_int = np.isin(kind[k], _WHOLE_KINDS)
        out[is_int] = bits[k, is_int].view(np.int64)
        doubles = bits[k].view(np.float64)
        is_double = (kind[k] == STAT_DOUBLE) & np.isfinite(doubles) & (np.abs(doubles) < 2.0**63)
        out[is_double] = doubles[is_double].astype(np.int64)
        for i, text in enumerate(texts(name)):
            if text is not None:  # a number past 64 bits keeps its low 64 (an address's unsigned ones)
                out[i] = (_int(text, default) + 2**63) % 2**64 - 2**63
        return out

    named = texts("allocator_name")
    numbered: list[int | None] = [None] * n      # else the last present of these, as a number
    for key in ("index_on_host", "device_ordinal"):
        k = stat.get(key)
        if k is not None:
            values = integers(key, 0)
            for i in np.flatnonzero((kind[k] != 0) & (kind[k] != STAT_BYTES)).tolist():
                numbered[i] = int(values[i])
    row: dict = {"memory": [a if a is not None else "unknown" if b is None else str(b) for a, b in zip(named, numbered)],
                 "time_ps": cols.offset_ps[picked] + np.int64(base_ps),
                 "kind": [kinds[m] for m in cols.metadata_id[picked].tolist()]}
    fragmentation = np.zeros(n, dtype=np.float64)
    k = stat.get("fragmentation")
    if k is not None:
        whole = np.isin(kind[k], _WHOLE_KINDS)
        fragmentation[whole] = bits[k, whole].view(np.int64)
        fragmentation[kind[k] == STAT_DOUBLE] = bits[k, kind[k] == STAT_DOUBLE].view(np.float64)
    row["fragmentation"] = fragmentation
    for name, column in _INT_STATS.items():
        row[column] = integers(name, -1 if column == "step" else 0)
    row["address"] = row["address"].view(np.uint64)
    row["tf_op"], row["region_type"] = texts("tf_op"), texts("region_type")
    row["shape"] = [a if a is not None else b for a, b in zip(texts("tensor_shapes"), texts("shape"))]
    row["data_type"] = texts("data_type")
    return row


def _frame(columns) -> pd.DataFrame:
    """The frame of these columns (or rows), in time order (stable), typed as ALLOCATOR_COLUMNS."""
    frame = pd.DataFrame(columns, columns=list(ALLOCATOR_COLUMNS))
    if not len(frame):
        return empty_allocator_frame()
    frame = frame.sort_values("time_ps", kind="stable").reset_index(drop=True).astype(ALLOCATOR_COLUMNS)
    for name, dtype in ALLOCATOR_COLUMNS.items():
        if dtype == "object":  # absent strings stay None (pandas makes an all-None column NaN)
            frame[name] = pd.Series([v if isinstance(v, str) else None for v in frame[name]], index=frame.index,
                                    dtype=object)
    return frame


def _rows_by_name(plane, kinds: dict[int, str], stat_names: dict[int, str], wanted: np.ndarray, host: str,
                  where: str) -> list[dict]:
    """One dict per allocator event, its stats by name (the last of one name in the event counts)."""
    prefixes = _prefixes(kinds)
    rows: list[dict] = []
    for line in plane.lines:
        raw = _candidates(line, prefixes)
        if not raw:
            continue
        try:
            cols = decode_events(raw, keep_stats=wanted)
        except WireError as exc:
            raise TraceError(f"{where}: corrupt events on line {line.name!r} ({exc})") from exc
        mids = cols.metadata_id
        picked = np.flatnonzero(np.isin(mids, np.fromiter(kinds, dtype=np.int64, count=len(kinds))))
        index: dict[int, dict] = {int(e): {} for e in picked}
        for r in np.flatnonzero(np.isin(cols.stat_event, picked)):
            index[int(cols.stat_event[r])][stat_names.get(int(cols.stat_id[r]), "")] = _value(cols, int(r), stat_names)
        base = int(line.timestamp_ns) * 1000
        for e in picked:
            time_ps = base + int(cols.offset_ps[e])
            if 0 <= time_ps <= MAX_TIME_PS:
                rows.append(_row(host, kinds[int(mids[e])], time_ps, index[int(e)]))
    return rows


def _value(cols, r: int, stat_names: dict[int, str]):
    kind = int(cols.stat_kind[r])
    bits = cols.stat_bits[r]
    if kind == STAT_DOUBLE:
        return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])
    if kind == STAT_STR:
        return cols.stat_bytes(r).decode("utf-8", "replace")
    if kind == STAT_REF:
        return stat_names.get(int(bits), "")
    if kind == STAT_BYTES:
        return None
    return int(np.array([bits], dtype=np.uint64).view(np.int64)[0])


def _int(value, default: int = 0) -> int:
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, (int, float)):
        return int(value)
    try:
        return int(str(value))
    except ValueError:
        return default


def _text(value) -> str | None:
    return value if isinstance(value, str) and value else None


def _row(host: str, kind: str, time_ps: int, stats: dict) -> dict:
    memory = _text(stats.get("allocator_name"))
    if memory is None:
        for key in ("index_on_host", "device_ordinal"):
            if stats.get(key) is not None:
                memory = str(_int(stats[key]))
    row: dict[str, Any] = {"host": host, "memory": memory or "unknown", "time_ps": time_ps, "kind": kind,
           "fragmentation": float(stats["fragmentation"]) if isinstance(stats.get("fragmentation"), (int, float))
           else 0.0}
    for stat, column in _INT_STATS.items():
        row[column] = _int(stats.get(stat), -1 if column == "step" else 0)
    row["address"] = row["address"] & ((1 << 64) - 1)
    for stat, column in _STR_STATS.items():
        if row.get(column) is None:
            row[column] = _text(stats.get(stat))
    data_type = stats.get("data_type")
    row["data_type"] = _text(data_type) if isinstance(data_type, str) else None
    return row
