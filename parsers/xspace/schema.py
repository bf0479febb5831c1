"""The XSpace wire format (profiler ``*.xplane.pb`` files), defined by traceview itself.

The messages and field numbers follow tsl/profiler/protobuf/xplane.proto; the
descriptors are built at import time so no protoc step or generated module
from another project is needed. The proto package is ``traceview.xspace`` so
these classes never clash with TensorFlow's or XProf's own ``XSpace`` when
both are loaded in one process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "traceview.xspace"

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_I64, _U64, _DBL = _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_DOUBLE
_STR, _BYTES, _MSG = _F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE

# (message, [(field name, number, type, label, message type or None, oneof index or None)])
_MESSAGES: list[tuple[str, list[tuple]]] = [
    ("XSpace", [
        ("planes", 1, _MSG, _REP, "XPlane", None),
        ("errors", 2, _STR, _REP, None, None),
        ("warnings", 3, _STR, _REP, None, None),
        ("hostnames", 4, _STR, _REP, None, None),
    ]),
    ("XPlane", [
        ("id", 1, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("lines", 3, _MSG, _REP, "XLine", None),
        ("event_metadata", 4, _MSG, _REP, "XPlane.EventMetadataEntry", None),
        ("stat_metadata", 5, _MSG, _REP, "XPlane.StatMetadataEntry", None),
        ("stats", 6, _MSG, _REP, "XStat", None),
    ]),
    ("XLine", [
        ("id", 1, _I64, _OPT, None, None),
        ("display_id", 10, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("display_name", 11, _STR, _OPT, None, None),
        ("timestamp_ns", 3, _I64, _OPT, None, None),
        ("duration_ps", 9, _I64, _OPT, None, None),
        ("events", 4, _MSG, _REP, "XEvent", None),
    ]),
    ("XEvent", [
        ("metadata_id", 1, _I64, _OPT, None, None),
        ("offset_ps", 2, _I64, _OPT, None, 0),
        ("num_occurrences", 5, _I64, _OPT, None, 0),
        ("duration_ps", 3, _I64, _OPT, None, None),
        ("stats", 4, _MSG, _REP, "XStat", None),
    ]),
    ("XStat", [
        ("metadata_id", 1, _I64, _OPT, None, None),
        ("double_value", 2, _DBL, _OPT, None, 0),
        ("uint64_value", 3, _U64, _OPT, None, 0),
        ("int64_value", 4, _I64, _OPT, None, 0),
        ("str_value", 5, _STR, _OPT, None, 0),
        ("bytes_value", 6, _BYTES, _OPT, None, 0),
        ("ref_value", 7, _U64, _OPT, None, 0),
    ]),
    ("XEventMetadata", [
        ("id", 1, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("display_name", 4, _STR, _OPT, None, None),
        ("metadata", 3, _BYTES, _OPT, None, None),
        ("stats", 5, _MSG, _REP, "XStat", None),
        ("child_id", 6, _I64, _REP, None, None),
    ]),
    ("XStatMetadata", [
        ("id", 1, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("description", 3, _STR, _OPT, None, None),
    ]),
]

# The same wire format with each line's events left as raw bytes: the reader
# decodes them as numpy columns (decode_wide, decode_events below) instead of
# creating one Python message per event. Derived from the messages above.
_RAW_NAMES = {"XSpace": "XSpaceRaw", "XPlane": "XPlaneRaw", "XLine": "XLineRaw"}


# And with each plane's lines left as raw bytes, for the compiled line walk (xspace.fast).
_LINES_NAMES = {"XSpace": "XSpaceLines", "XPlane": "XPlaneLines"}


def _raw_variant(fields: list[tuple], names: dict[str, str], raw_type: str) -> list[tuple]:
    out = []
    for name, number, ftype, label, type_name, oneof in fields:
        if type_name == raw_type:  # keep these messages' bytes
            ftype, type_name = _BYTES, None
        elif type_name:
            head, _, tail = type_name.partition(".")
            type_name = names.get(head, head) + (f".{tail}" if tail else "")
        out.append((name, number, ftype, label, type_name, oneof))
    return out


_MESSAGES += ([(_RAW_NAMES[name], _raw_variant(fields, _RAW_NAMES, "XEvent"))
               for name, fields in _MESSAGES if name in _RAW_NAMES]
              + [(_LINES_NAMES[name], _raw_variant(fields, _LINES_NAMES, "XLine"))
                 for name, fields in _MESSAGES if name in _LINES_NAMES])

_ONEOFS = {"XEvent": "data", "XStat": "value"}
_MAP_ENTRIES = {plane: [("EventMetadataEntry", "XEventMetadata"), ("StatMetadataEntry", "XStatMetadata")]
                for plane in ("XPlane", "XPlaneRaw", "XPlaneLines")}


def _add_field(msg: descriptor_pb2.DescriptorProto, name, number, ftype, label, type_name, oneof) -> None:
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = f".{_PACKAGE}.{type_name}"
    if oneof is not None:
        f.oneof_index = oneof


def _build_file() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(name="traceview/xspace.proto", package=_PACKAGE, syntax="proto3")
    for name, fields in _MESSAGES:
        msg = fdp.message_type.add(name=name)
        if name in _ONEOFS:
            msg.oneof_decl.add(name=_ONEOFS[name])
        for field in fields:
            _add_field(msg, *field)
        for entry_name, value_type in _MAP_ENTRIES.get(name, []):
            entry = msg.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            _add_field(entry, "key", 1, _I64, _OPT, None, None)
            _add_field(entry, "value", 2, _MSG, _OPT, value_type, None)
    return fdp


def _build_classes() -> dict[str, type]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_build_file())
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
        for name, _ in _MESSAGES
    }


_CLASSES = _build_classes()
XSpace = _CLASSES["XSpace"]
XPlane = _CLASSES["XPlane"]
XLine = _CLASSES["XLine"]
XEvent = _CLASSES["XEvent"]
XStat = _CLASSES["XStat"]
XEventMetadata = _CLASSES["XEventMetadata"]
XStatMetadata = _CLASSES["XStatMetadata"]
XSpaceRaw = _CLASSES["XSpaceRaw"]
XPlaneRaw = _CLASSES["XPlaneRaw"]
XLineRaw = _CLASSES["XLineRaw"]
XSpaceLines = _CLASSES["XSpaceLines"]
XPlaneLines = _CLASSES["XPlaneLines"]

__all__ = ["XSpace", "XPlane", "XLine", "XEvent", "XStat", "XEventMetadata", "XStatMetadata", "XSpaceRaw",
           "XPlaneRaw", "XLineRaw", "XSpaceLines", "XPlaneLines", "EventColumns", "decode_events", "WideEvents", "decode_wide", "WireError"]


# ------------------------------------------------------------------ columnar decoding
#
# Each event of a line is a small protobuf message. Rather than one Python
# object per event, all of a line's events are decoded at once: one cursor
# per event, and each round reads the next field of every event that has one,
# so the Python-level loop runs (fields per event) times, not (events) times.

_WT_VARINT, _WT_I64, _WT_LEN, _WT_I32 = 0, 1, 2, 5
# XStat value fields (the oneof): field number -> kind
STAT_DOUBLE, STAT_UINT64, STAT_INT64, STAT_STR, STAT_BYTES, STAT_REF = 2, 3, 4, 5, 6, 7


class WireError(ValueError):
    """Event bytes that do not decode as XEvent / XStat messages."""


@dataclass
class EventColumns:
    """A line's events as columns; stats as a long table (one row per event stat)."""

    metadata_id: np.ndarray      # int64 per event
    offset_ps: np.ndarray        # int64 per event
    duration_ps: np.ndarray      # int64 per event
    stat_event: np.ndarray       # event index of each stat
    stat_id: np.ndarray          # stat metadata id of each stat
    stat_kind: np.ndarray        # STAT_* (0: no value)
    stat_bits: np.ndarray        # uint64: varint value, or the double's bits
    stat_start: np.ndarray       # str/bytes value: slice of `buffer`
    stat_end: np.ndarray
    buffer: bytes | memoryview  # a file's bytes, or a view of them (the compiled reader)

    def __len__(self) -> int:
        return self.metadata_id.size

    def stat_bytes(self, i: int) -> bytes:
        return bytes(self.buffer[int(self.stat_start[i]):int(self.stat_end[i])])


STAT_NO_VALUE = 1  # WideEvents.kind of a stat that has a metadata id but no value (0: no such stat)


@dataclass
class WideEvents:
    """A line's events as columns, and one column per wanted stat (the reader's form).

    For wanted stat k (``stat_ids[k]``) and event i: ``kind[k, i]`` is 0 when
    the event has no such stat, STAT_NO_VALUE when it has no value, else the
    STAT_* value kind; ``bits[k, i]`` the varint or fixed value (a double's
    bits), or for STAT_STR / STAT_BYTES the start of the value in ``buffer``,
    ``size[k, i]`` its length. A stat repeated in one event: the last one counts.
    """

    metadata_id: np.ndarray      # int64 per event
    offset_ps: np.ndarray        # int64 per event
    duration_ps: np.ndarray      # int64 per event
    stat_ids: np.ndarray         # int64 [K]
    kind: np.ndarray             # int8 [K, events]
    bits: np.ndarray             # uint64 [K, events]
    size: np.ndarray             # uint32 [K, events]
    buffer: bytes | memoryview

    def __len__(self) -> int:
        return self.metadata_id.size


def decode_wide(raw_events, stat_ids: np.ndarray) -> WideEvents:
    """A line's events (XLineRaw.events, or xspace.fast's EventRegion) with the given stats as columns.

    A stat is kept when its leading metadata id (if it starts with one) and
    its last metadata id are wanted; the compiled decoder follows the same rule.
    """
    ids = np.ascontiguousarray(stat_ids, dtype=np.int64)
    if hasattr(raw_events, "decode_wide"):
        return raw_events.decode_wide(ids)
    data, buf, starts, ends = _joined(raw_events)
    n, k_count = starts.size, ids.size
    mid, off, dur = (np.zeros(n, dtype=np.int64) for _ in range(3))
    kind = np.zeros((k_count, n), dtype=np.int8)
    bits = np.zeros((k_count, n), dtype=np.uint64)
    size = np.zeros((k_count, n), dtype=np.uint32)
    order = np.argsort(ids, kind="stable")
    try:
        for i in range(0, n, _BATCH):  # each batch straight into the columns: no table of every stat
            part = _decode_batch(buf, starts[i:i + _BATCH], ends[i:i + _BATCH], i, ids)
            stop = i + part[0].size
            mid[i:stop], off[i:stop], dur[i:stop] = part[0], part[1], part[2]
            if k_count:
                _scatter_stats(part[3:], ids, order, i, stop - i, kind, bits, size)
    except (IndexError, OverflowError) as exc:  # a bound the checks above missed: still a corrupt file
        raise WireError(f"malformed event bytes ({type(exc).__name__})") from exc
    return WideEvents(mid, off, dur, ids, kind, bits, size, data)


def _scatter_stats(stats: tuple, ids: np.ndarray, order: np.ndarray, first: int, count: int,
                   kind: np.ndarray, bits: np.ndarray, size: np.ndarray) -> None:
    """A batch's kept stats (event, id, kind, bits, start, end: in event order, then stat order) into
    the wide columns; the last stat of an (event, id) wins."""
    stat_event, stat_id, stat_kind, stat_bits, stat_start, stat_end = stats
    if not stat_id.size:
        return
    k_count = ids.size
    pos = np.minimum(np.searchsorted(ids[order], stat_id), k_count - 1)
    column = order[pos]
    rows = np.flatnonzero(ids[column] == stat_id)
    column = column[rows]
    key = (stat_event[rows] - first) * k_count + column
    seen = np.zeros(count * k_count, dtype=bool)
    seen[key] = True
    if np.count_nonzero(seen) != rows.size:  # some stat repeated in an event
        _, first_rev = np.unique(key[::-1], return_index=True)
        last = np.zeros(rows.size, dtype=bool)
        last[rows.size - 1 - first_rev] = True
        rows, column = rows[last], column[last]
    event = stat_event[rows]
    skind = stat_kind[rows]
    text = (skind == STAT_STR) | (skind == STAT_BYTES)
    kind[column, event] = np.where(skind == 0, STAT_NO_VALUE, skind).astype(np.int8)
    bits[column, event] = np.where(text, stat_start[rows].astype(np.uint64), stat_bits[rows])
    size[column, event] = np.where(text, stat_end[rows] - stat_start[rows], 0).astype(np.uint32)


def _joined(raw_events) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
    """A line's event messages end to end: (bytes, zero-padded uint8 view, start and end of each)."""
    # One pass over protobuf's repeated field (each access makes a new bytes object).
    raw_events = list(raw_events)
    n = len(raw_events)
    lengths = np.fromiter(map(len, raw_events), dtype=np.int64, count=n)
    data = b"".join(raw_events)
    del raw_events
    # Zero padding: a varint begun inside a message always ends inside the
    # buffer; every read past a message's end is then caught by the checks.
    buf = np.frombuffer(data + bytes(_PAD), dtype=np.uint8)
    ends = np.cumsum(lengths)
    return data, buf, ends - lengths, ends


def varint_bytes(value: int) -> bytes:
    """A number's protobuf varint (its low 64 bits)."""
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, position after it) of the protobuf varint at ``pos``; WireError when it runs past ``data``
    or over 10 bytes. One at a time, in Python: for the few fields read outside the line decoders (the
    vectorized :func:`_varints` reads one varint at each of many positions, the compiled kernels their own)."""
    value = shift = 0
    stop = min(len(data), pos + 10)
    for i in range(pos, stop):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    raise WireError("varint longer than 10 bytes" if stop == pos + 10 else "varint runs past its message")


def field_span(data: bytes | memoryview, pos: int) -> tuple[int, int, int, int]:
    """(field number, wire type, value start, value end) of the field whose tag is at ``pos``; WireError
    when a varint is malformed or the wire type is none of varint, fixed64, length-delimited, fixed32.
    The end may lie past ``data``: the caller checks it against the message that holds the field."""
    tag, at = read_varint(data, pos)
    number, wire = tag >> 3, tag & 7
    if wire == 0:
        return number, wire, at, read_varint(data, at)[1]
    if wire in (1, 5):
        return number, wire, at, at + (8 if wire == 1 else 4)
    if wire == 2:
        length, start = read_varint(data, at)
        return number, wire, start, start + length
    raise WireError("unsupported wire type")


def _varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode one varint at each position: (values as uint64, positions after them).

    Byte by byte over the shrinking set of varints still going on: most are
    one or two bytes long.
    """
    byte = buf[pos]
    values = (byte & 0x7F).astype(np.uint64)
    end = pos + 1
    going = np.flatnonzero(byte >= 0x80)
    shift = np.uint64(7)
    for _ in range(9):
        if going.size == 0:
            return values, end
        byte = buf[end[going]]
        values[going] |= (byte & 0x7F).astype(np.uint64) << shift
        end[going] += 1
        going = going[byte >= 0x80]
        shift += np.uint64(7)
    if going.size:
        raise WireError("varint longer than 10 bytes")
    return values, end


def _fields(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """Yield (message index, field number, wire type, varint/fixed value, value start, value end) per round."""
    pos = starts.copy()
    live = np.flatnonzero(pos < ends)
    while live.size:
        tag, p = _varints(buf, pos[live])
        if (p > ends[live]).any():
            raise WireError("field tag runs past the end of its message")
        field, wire = (tag >> np.uint64(3)).astype(np.int64), (tag & np.uint64(7)).astype(np.int64)
        if not np.isin(wire, (_WT_VARINT, _WT_I64, _WT_LEN, _WT_I32)).all():
            raise WireError("unsupported wire type")
        if (field == 0).any():
            raise WireError("field number 0")
        value = np.zeros(live.size, dtype=np.uint64)
        v_start, v_end = p.copy(), p.copy()
        is_var = wire == _WT_VARINT
        if is_var.any():
            value[is_var], v_end[is_var] = _varints(buf, p[is_var])
        is_len = wire == _WT_LEN
        if is_len.any():
            length, v_start[is_len] = _varints(buf, p[is_len])
            # Compared unsigned before any arithmetic: a huge length must not wrap around.
            room = np.maximum(ends[live][is_len] - v_start[is_len], 0).astype(np.uint64)
            if (length > room).any():
                raise WireError("length-delimited field runs past the end of its message")
            v_end[is_len] = v_start[is_len] + length.astype(np.int64)
        for wt, size in ((_WT_I64, 8), (_WT_I32, 4)):
            fixed = wire == wt
            if fixed.any():
                raw = buf[p[fixed][:, None] + np.arange(size)].astype(np.uint64)
                value[fixed] = np.bitwise_or.reduce(raw << (np.arange(size, dtype=np.uint64) * np.uint64(8)), axis=1)
                v_end[fixed] = p[fixed] + size
        if (v_end > ends[live]).any():
            raise WireError("field runs past the end of its message")
        yield live, field, wire, value, v_start, v_end
        pos[live] = v_end
        live = live[pos[live] < ends[live]]


_BATCH = 1 << 15  # events decoded together: keeps the working set in cache
_PAD = 16  # > the longest varint (10 bytes)


def decode_events(raw_events, keep_stats: np.ndarray | None = None) -> EventColumns:
    """Decode a line's raw XEvent messages (XLineRaw.events) into columns.

    `keep_stats`: stat metadata ids to keep (None: all). Stats of other ids
    are dropped as soon as their id is read, which saves time and memory.
    """
    data, buf, starts, ends = _joined(raw_events)
    n = starts.size
    try:
        parts = [_decode_batch(buf, starts[i:i + _BATCH], ends[i:i + _BATCH], i, keep_stats)
                 for i in range(0, n, _BATCH)]
        if not parts:
            parts = [_decode_batch(buf, starts, ends, 0, keep_stats)]
    except (IndexError, OverflowError) as exc:  # a bound the checks above missed: still a corrupt file
        raise WireError(f"malformed event bytes ({type(exc).__name__})") from exc
    cols = [np.concatenate(c) for c in zip(*parts)]
    return EventColumns(*cols, buffer=data)  # type: ignore[misc, arg-type]  # nine arrays, then the buffer


def _decode_batch(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, first: int,
                  keep_stats: np.ndarray | None) -> tuple:
    n = starts.size
    mid = np.zeros(n, dtype=np.uint64)
    off = np.zeros(n, dtype=np.uint64)
    dur = np.zeros(n, dtype=np.uint64)
    s_event, s_start, s_end = [], [], []
    for live, field, wire, value, v_start, v_end in _fields(buf, starts, ends):
        for number, column in ((1, mid), (2, off), (3, dur)):
            sel = (field == number) & (wire == _WT_VARINT)
            column[live[sel]] = value[sel]
        sel = (field == 4) & (wire == _WT_LEN)
        if sel.any():
            s_event.append(live[sel])
            s_start.append(v_start[sel])
            s_end.append(v_end[sel])
    if s_event:
        stat_event = np.concatenate(s_event)
        st_starts, st_ends = np.concatenate(s_start), np.concatenate(s_end)
        order = np.argsort(st_starts, kind="stable")  # byte order = event order, then stat order
        stat_event, st_starts, st_ends = stat_event[order], st_starts[order], st_ends[order]
    else:
        stat_event = st_starts = st_ends = np.zeros(0, dtype=np.int64)
    # The metadata id comes first in every stat the profiler writes: read it,
    # drop unwanted stats, and decode the rest from just after it.
    first_id = np.zeros(stat_event.size, dtype=np.uint64)
    if stat_event.size:
        tag, after_tag = _varints(buf, st_starts)
        leads = np.flatnonzero((tag == 8) & (after_tag < st_ends))
        first_id[leads], after_id = _varints(buf, after_tag[leads])
        if (after_id > st_ends[leads]).any():
            raise WireError("stat id runs past the end of its stat")
        st_starts = st_starts.copy()
        st_starts[leads] = after_id
        if keep_stats is not None:
            keep = np.ones(stat_event.size, dtype=bool)
            keep[leads] = np.isin(first_id[leads].view(np.int64), keep_stats)
            stat_event, st_starts, st_ends, first_id = stat_event[keep], st_starts[keep], st_ends[keep], first_id[keep]
    m = stat_event.size
    stat_id = first_id
    kind = np.zeros(m, dtype=np.int8)
    bits = np.zeros(m, dtype=np.uint64)
    v_s = np.zeros(m, dtype=np.int64)
    v_e = np.zeros(m, dtype=np.int64)
    for live, field, wire, value, v_start, v_end in _fields(buf, st_starts, st_ends):
        sel = (field == 1) & (wire == _WT_VARINT)
        stat_id[live[sel]] = value[sel]
        sel = (field >= STAT_DOUBLE) & (field <= STAT_REF)
        if sel.any():
            rows = live[sel]
            kind[rows] = field[sel]
            bits[rows] = value[sel]
            v_s[rows] = v_start[sel]
            v_e[rows] = v_end[sel]
    return (mid.view(np.int64), off.view(np.int64), dur.view(np.int64), stat_event + first,
            stat_id.view(np.int64), kind, bits, v_s, v_e)
