"""The XSpace wire format decoded by the compiled kernels (:mod:`traceview.parsers.native`).

With the kernels loaded (numba installed, or their machine code linked before),
a large file's XLines are kept as raw bytes by protobuf (XSpaceLines) and each
is walked by a compiled loop: every event and wanted stat in one pass, straight
into the same WideEvents the pure numpy decoder (:func:`traceview.parsers.xspace.schema.decode_wide`)
gives. Without them, or with ``TRACEVIEW_NO_NUMBA=1``, nothing here is used and
the pure path reads the file; tests/unit/test_xspace_fast.py checks that both
give identical tables.

Every length and offset is checked against the message that holds it: a
malformed file raises WireError, as the pure decoder does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from traceview.parsers.native import loader
from traceview.parsers.xspace.schema import WideEvents, WireError

if TYPE_CHECKING:
    import mmap

    from traceview.parsers.xspace.mapped import MappedFile

_ERRORS = {1: "field tag runs past the end of its message", 2: "unsupported wire type", 3: "field number 0",
           4: "length-delimited field runs past the end of its message", 5: "field runs past the end of its message",
           6: "varint longer than 10 bytes", 7: "stat id runs past the end of its stat",
           8: "more events than the line holds"}


_SPLIT_EVENTS = 200_000  # lines with this many events are decoded in parts at once, one per core (each >= half this)


_PIECE_EVENTS = 131_072  # a mapped file's line is decoded this many events at a time, each piece's pages then dropped


class EventRegion:
    """A line's events, undecoded: what decode_wide takes in place of a list of messages.

    ``pages``/``origin``: the mapped file the line lies in and where it starts there; its decoded ranges
    are then dropped from the process as each piece of the line is done (parsers/xspace/mapped.py).
    """

    def __init__(self, data: bytes | memoryview, buf: np.ndarray, count: int,
                 pages: MappedFile | None = None, origin: int = 0) -> None:
        self.data, self.buf, self.count = data, buf, count
        self.pages, self.origin = pages, origin

    def __len__(self) -> int:
        return self.count

    def decode_wide(self, stat_ids: np.ndarray) -> WideEvents:
        """Per-event columns and one column per wanted stat (schema.decode_wide), in one compiled pass;
        a large line in parts on as many threads as the process has cores (share_cores)."""
        k = loader.kernels()
        ids = np.ascontiguousarray(stat_ids, dtype=np.int64)
        n, count = self.buf.size, self.count
        mid, off, dur = (np.zeros(count, dtype=np.int64) for _ in range(3))
        kind = np.zeros((ids.size, count), dtype=np.int8)
        bits = np.zeros((ids.size, count), dtype=np.uint64)
        size = np.zeros((ids.size, count), dtype=np.uint32)
        columns: tuple[np.ndarray, ...] = (ids, mid, off, dur, kind, bits, size)
        parts = self._parts(k)
        if len(parts) == 1:
            results = [self._decode(k, 0, n, 0, columns)]
        else:  # the kernel releases the GIL: the parts run at once, each filling its own events' columns
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=len(parts)) as pool:
                futures = [pool.submit(self._decode, k, p0, p1, first, columns) for p0, p1, first, _ in parts]
                results = [f.result() for f in futures]
        for (read, err), (_, _, _, want) in zip(results, parts):
            if err:
                raise WireError(_ERRORS.get(int(err), "malformed event bytes"))
            if read != want:
                raise WireError(_ERRORS[8])
        return WideEvents(mid, off, dur, stat_ids=ids, kind=kind, bits=bits, size=size, buffer=self.data)

    def _decode(self, kernels, p0: int, p1: int, first: int, columns: tuple[np.ndarray, ...]) -> tuple[int, int]:
        """(events read, error code) of bytes [p0, p1) of the line, as events first, first + 1, ...; in a
        mapped file, in pieces of _PIECE_EVENTS events, each piece's pages dropped once it is decoded."""
        if self.pages is None:
            return kernels.decode_wide(self.buf, p0, p1, first, *columns)
        read, q = 0, p0
        while True:
            end = q + int(kernels.event_position(self.buf[q:p1], p1 - q, _PIECE_EVENTS))
            got, err = kernels.decode_wide(self.buf, q, end, first + read, *columns)
            self.pages.drop(self.origin + q, self.origin + end)
            read += int(got)
            if err or end >= p1:
                return read, int(err)
            q = end

    def _parts(self, kernels) -> list[tuple[int, int, int, int]]:
        """(first byte, end byte, first event, events) of each equal run of the line's events, one per
        thread this process may use and at least _SPLIT_EVENTS / 2 events each (one run when the line is
        under _SPLIT_EVENTS events); each boundary is found by walking on from the previous one."""
        n, count = self.buf.size, self.count
        ways = min(loader.split_threads(), count // (_SPLIT_EVENTS // 2))
        if count < _SPLIT_EVENTS or ways < 2:
            return [(0, n, 0, count)]
        firsts = [count * i // ways for i in range(ways + 1)]
        at = [0]
        for previous, target in zip(firsts[:-2], firsts[1:-1]):
            at.append(at[-1] + int(kernels.event_position(self.buf[at[-1]:], n - at[-1], target - previous)))
        at.append(n)
        return [(at[i], at[i + 1], firsts[i], firsts[i + 1] - firsts[i]) for i in range(ways)]


class RawLine:
    """An XLine whose events stay undecoded until asked for (the attributes the reader uses); ``pages``,
    ``origin``: see EventRegion."""

    def __init__(self, data: bytes | memoryview, pages: MappedFile | None = None, origin: int = 0) -> None:
        buf = np.frombuffer(data, dtype=np.uint8)  # no copy: every kernel read is bounded by its message
        head = loader.kernels().line_head(buf, len(data), np.zeros(10, dtype=np.int64))
        if head[-1]:
            raise WireError(_ERRORS.get(int(head[-1]), "malformed line bytes"))
        self.id, self.timestamp_ns, self.duration_ps, self.display_id = (int(v) for v in head[:4])
        try:
            self.name = str(data[head[4]:head[5]], "utf-8")
            self.display_name = str(data[head[6]:head[7]], "utf-8")
        except UnicodeDecodeError as exc:
            raise WireError(f"line name is not UTF-8 ({exc.reason})") from None
        self.events = EventRegion(data, buf, int(head[8]), pages, origin)


class _Plane:
    """A plane: its lines as RawLines (decoded lazily), everything else an XPlaneLines message."""

    def __init__(self, lines: list[RawLine], plane) -> None:
        self.lines, self._plane = lines, plane

    def __getattr__(self, name):
        return getattr(self._plane, name)


class FastSpace:
    """An XSpace read through its outline: planes, errors and warnings as the reader expects them."""

    def __init__(self, planes: list[_Plane], space, mapped: MappedFile | None = None) -> None:
        self.planes = planes
        self.errors, self.warnings, self.hostnames = list(space.errors), list(space.warnings), list(space.hostnames)
        self._mapped = mapped

    def close(self) -> None:
        """Done with the file's bytes: a mapped file is unmapped (its lease ends) once no view of it is left."""
        self.planes = []
        if self._mapped is not None:
            self._mapped.close()


def parse_space(data: bytes | mmap.mmap, mapped: MappedFile | None = None) -> FastSpace:
    """Parse a whole file (raises DecodeError from protobuf, WireError from the line walk); `data` is
    `mapped`'s bytes when the file is mapped (parsers/xspace/mapped.py).

    The compiled outline finds each plane's fields and lines in the file's bytes:
    protobuf parses only what is not a line (metadata, stats, the XSpace's own
    fields), and each line is a view of the file's bytes, never copied.
    A file whose outline is not the plain one is parsed whole by protobuf, as it
    always was (its errors are protobuf's).
    """
    return _space(data, mapped)


def _space(data: bytes | mmap.mmap, mapped: MappedFile | None) -> FastSpace:
    from traceview.parsers.xspace.schema import XPlaneLines, XSpaceLines

    buf = np.frombuffer(data, dtype=np.uint8)
    outline = _outline(buf)
    if outline is None:
        space = XSpaceLines()
        space.ParseFromString(bytes(data) if mapped is not None else data)
        return _from_message(space)
    view = memoryview(data)  # each line a view of the file's bytes: a slice of bytes would copy it
    plane_of, number, tag_at, value_at, end_at = (outline[:, k].tolist() for k in range(5))
    own: list[bytes] = []                              # the XSpace's fields but its planes
    rest: list[list[bytes]] = []                       # per plane, its fields but its lines
    lines: list[list[RawLine]] = []
    for plane, field, tag, start, end in zip(plane_of, number, tag_at, value_at, end_at):
        if plane < 0:
            if field == 1:
                rest.append([])
                lines.append([])
            else:
                own.append(data[tag:end])
        elif field == 3:
            lines[plane].append(RawLine(view[start:end], mapped, start))
        else:
            rest[plane].append(data[tag:end])
    planes = [_Plane(ls, XPlaneLines.FromString(b"".join(r))) for ls, r in zip(lines, rest)]
    return FastSpace(planes, XSpaceLines.FromString(b"".join(own)), mapped)


def parse_plane(raw: bytes) -> _Plane:
    """One XPlane's own bytes (a field's value, as parsers.xspace.allocator_events finds them) parsed as
    parse_space parses a plane: its lines left to the compiled line walk."""
    from traceview.parsers.xspace.schema import varint_bytes

    return _space(b"\x0a" + varint_bytes(len(raw)) + raw, None).planes[0]  # an XSpace of this plane (field 1)


def _outline(buf: np.ndarray) -> np.ndarray | None:
    """The kernels' space_outline rows (counted, then filled), or None where protobuf must parse."""
    k = loader.kernels()
    rows, odd = k.space_outline(buf, buf.size, np.zeros((0, 5), dtype=np.int64))
    if odd:
        return None
    out = np.zeros((int(rows), 5), dtype=np.int64)
    filled, odd = k.space_outline(buf, buf.size, out)
    return None if odd or filled != rows else out


def _from_message(space) -> FastSpace:
    """A FastSpace from an XSpaceLines protobuf parsed whole."""
    planes = []
    for plane in space.planes:
        lines = [RawLine(bytes(b)) for b in plane.lines]
        # The rest of the plane as a message of its own: protobuf's copy of the lines goes with the
        # parsed file instead of living as long as the plane.
        plane.ClearField("lines")
        planes.append(_Plane(lines, type(plane).FromString(plane.SerializeToString())))
    return FastSpace(planes, space)


def distinct_slices(buffer: bytes | memoryview, starts: np.ndarray,
                    ends: np.ndarray) -> tuple[np.ndarray, list[str]] | None:
    """(index of each buffer[start:end] into the distinct strings, the distinct strings decoded from UTF-8).

    Slices are grouped by a 64-bit hash (compiled), every slice is checked
    byte for byte against its group's first; None when numba is off or a
    hash collides (then the caller decodes them one by one).
    """
    if not loader.enabled():
        return None
    k = loader.kernels()
    buf = np.frombuffer(buffer, dtype=np.uint8)
    starts, ends = np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(ends, dtype=np.int64)
    with loader.loading():
        hashes = k.slice_hashes(buf, starts, ends, np.empty(starts.size, dtype=np.uint64))
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    with loader.loading():
        equal = k.slices_equal(buf, starts, ends, starts[first][inverse], ends[first][inverse])
    if not equal:
        return None
    texts = [str(buffer[s:e], "utf-8", "replace") for s, e in zip(starts[first].tolist(), ends[first].tolist())]
    return inverse, texts
