"""Optional accelerator for large XSpace files: the line and event wire format decoded by numba.

With ``numba`` installed (a core dependency where it has wheels), a large file's
XLines are kept as raw bytes by protobuf (XSpaceLines) and each is walked by a
compiled loop: every event and wanted stat in one pass, straight into the
same WideEvents the pure numpy decoder (xspace_schema.decode_wide) gives. The compiled code is kept on disk,
by numba (``cache=True``) and as one object file linked without numba (xspace_native), so only the first
use on a machine pays the compile. Without numba, or with
``TRACEVIEW_NO_NUMBA=1``, nothing here is used and the pure path reads the file;
tests/unit/test_xspace_fast.py checks that both give identical tables.

Every length and offset is checked against the message that holds it: a
malformed file raises WireError, as the pure decoder does.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

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


def loaded() -> bool:
    """Whether the kernels are already loaded in this process (and not switched off): using them is free."""
    return not os.environ.get("TRACEVIEW_NO_NUMBA") and _kernels.cache_info().currsize > 0 and _kernels() is not None


def enabled() -> bool:
    """numba importable and not switched off."""
    if os.environ.get("TRACEVIEW_NO_NUMBA"):
        return False
    return _kernels() is not None


_LOAD_LOCK = threading.Lock()

# Called (from the loading thread) with True when a kernel is about to be compiled, not loaded from
# numba's cache (the first use on a machine: tens of seconds), and with False once the loading is over.
# The CLI's progress bar sets it to say so.
on_compile: Callable[[bool], None] | None = None


@lru_cache(maxsize=1)
def _kernels():
    """The kernels: their machine code linked without numba where a process built it before
    (xspace_native), else through numba (which then builds that file for the next processes)."""
    from traceview.parsers.native import linker as xspace_native

    with _LOAD_LOCK:
        native = xspace_native.load()
        if native is not None:
            _drop_compiler_pages()  # loading llvmlite's library touched 45-50 MB of it
            return native
        try:
            from traceview.parsers.native import kernels as xspace_kernels
        except ImportError:  # numba absent
            return None
        with _cache_loading_without_refresh():
            if xspace_native.supported():
                _announce(True)
                native = xspace_native.build(xspace_kernels)
                _announce(False)
            if native is None:
                _call_each(xspace_kernels)
        _drop_compiler_pages()
        return native or xspace_kernels


def _announce(compiling: bool) -> None:
    if on_compile is not None:
        on_compile(compiling)


_COMPILER_LIBRARY = "libllvmlite"
_MADV_DONTNEED = 4  # Linux <sys/mman.h>


def _drop_compiler_pages() -> None:
    """Once the kernels are loaded, take LLVM's own code out of this process's resident set.

    Loading a cached kernel runs LLVM (libllvmlite: 65-70 MB of its code and
    read-only data touched); the loaded kernels never call into it again. Its
    read-only mappings that hold no page of their own (smaps ``Anonymous: 0``:
    every page is the file's, as it is on disk) are released with
    ``madvise(MADV_DONTNEED)``; the pages stay in the kernel's page cache, and
    a later compile (a kernel not in numba's cache) maps them again. Linux
    only; anything unexpected leaves the mappings as they are.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        madvise = ctypes.CDLL(None, use_errno=True).madvise
        madvise.argtypes, madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
        for start, end in _read_only_file_pages(_COMPILER_LIBRARY):
            madvise(start, end - start, _MADV_DONTNEED)
    except (OSError, ValueError, AttributeError):
        pass


def _read_only_file_pages(library: str) -> list[tuple[int, int]]:
    """(start, end) of each mapping of a file named like `library` that is not writable and holds no
    anonymous (copied-on-write) page, from /proc/self/smaps."""
    found: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head, _, rest = line.partition(" ")
            if not head.endswith(":"):                 # a mapping's first line: range, permissions, ..., path
                fields = rest.split()
                current = None
                if len(fields) >= 5 and library in fields[-1] and "w" not in fields[0]:
                    lo, hi = head.split("-")
                    current = (int(lo, 16), int(hi, 16))
            elif head == "Anonymous:" and current is not None:
                if int(rest.split()[0]) == 0:
                    found.append(current)
                current = None
    return found


@contextmanager
def _loading():
    """Around a kernel's first calls: load it from numba's cache the light way."""
    with _LOAD_LOCK, _cache_loading_without_refresh():
        yield


@contextmanager
def _cache_loading_without_refresh():
    """While our kernels load from numba's disk cache, skip numba's full target set-up.

    Loading a cached kernel makes numba "refresh" its CPU target first:
    import every typing and lowering registry (and scipy.linalg, to probe
    BLAS) in each process (docs/scale.md has the cost), all of it needed only to *compile*.
    Loading machine code needs only the runtime (NRT), which is initialized
    here. A kernel not in the cache is compiled as usual (the compiler
    refreshes the target itself). The patch is undone before this returns, and
    anything unexpected in numba's internals leaves numba's own path in place.
    """
    try:
        from numba.core import caching
        from numba.core.runtime import rtsys

        cache = caching.Cache
        original = cache.load_overload
        guard, load = cache._guard_against_spurious_io_errors, cache._load_overload
    except (ImportError, AttributeError):
        yield
        return

    announced = []

    def load_overload(self, sig, target_context):
        rtsys.initialize(target_context)
        loaded = None
        with guard(self):
            loaded = load(self, sig, target_context)
        if loaded is None and on_compile is not None:  # not cached (or unreadable): numba compiles it now
            announced.append(on_compile)
            on_compile(True)
        return loaded

    cache.load_overload = load_overload
    try:
        yield
    finally:
        cache.load_overload = original
        if announced:
            announced[-1](False)


_threads: int | None = None  # set by share_cores() in a process that is one of several reading at once


def share_cores(processes: int) -> None:
    """This process is one of `processes` reading at once: it splits lines over its share of the cores
    only (a pool worker splitting a line over every core would make the pool's workers fight for them)."""
    global _threads
    _threads = max(1, _cores() // max(1, processes))


def _split_threads() -> int:
    return _cores() if _threads is None else _threads


@lru_cache(maxsize=1)
def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _call_each(k) -> None:
    """Call every kernel the reader uses once, with the argument types it uses (a buffer of bytes is
    read-only to numba: another type would be another compiled version)."""
    line = b"\x12\x01l\x22\x08\x08\x01\x22\x04\x08\x02\x2a\x00"  # one event: metadata id 1, stat 2 = ""
    buf = np.frombuffer(line, dtype=np.uint8)
    head = k.line_head(buf, buf.size, np.zeros(10, dtype=np.int64))
    count = int(head[8])
    k.event_position(buf, buf.size, count)
    k.decode_wide(buf, 0, buf.size, 0, np.array([2], dtype=np.int64), *(np.zeros(count, np.int64) for _ in range(3)),
                  np.zeros((1, count), np.int8), np.zeros((1, count), np.uint64), np.zeros((1, count), np.uint32))
    k.space_outline(buf, buf.size, np.zeros((0, 5), dtype=np.int64))
    two = (np.zeros(2, np.int64) for _ in range(3))
    k.nested_children(np.array([0, 1], dtype=np.int64), np.array([3, 2], dtype=np.int64), np.array([2, 3], dtype=np.int64),
                      np.zeros(2, np.int64), np.full(2, -1, np.int64))
    k.self_times_in_order(np.array([0, 1], dtype=np.int64), np.array([3, 1], dtype=np.int64), *two)


def self_times_in_order(start: np.ndarray, duration: np.ndarray) -> np.ndarray | None:
    """xspace_kernels.self_times_in_order: the self times of a line in (start, longest first) order, in one
    compiled pass and no temporary column; None when its events are not in that order."""
    start = np.ascontiguousarray(start, dtype=np.int64)
    duration = np.ascontiguousarray(duration, dtype=np.int64)
    out, heap, last = (np.empty(duration.size, dtype=np.int64) for _ in range(3))  # untouched room costs nothing
    return out if _kernels().self_times_in_order(start, duration, out, heap, last) else None


def nested_children(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """xspace_kernels.nested_children of events in (start, longest first) order (numpy sorts the ends faster)."""
    s, e = np.ascontiguousarray(s, dtype=np.int64), np.ascontiguousarray(e, dtype=np.int64)
    children = np.zeros(s.size, dtype=np.int64)
    _kernels().nested_children(s, e, np.sort(e), children, np.full(s.size, -1, dtype=np.int64))
    return children


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
        """Per-event columns and one column per wanted stat (xspace_schema.decode_wide), in one compiled pass;
        a large line in parts on as many threads as the process has cores (share_cores)."""
        k = _kernels()
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
        ways = min(_split_threads(), count // (_SPLIT_EVENTS // 2))
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
        head = _kernels().line_head(buf, len(data), np.zeros(10, dtype=np.int64))
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
    """xspace_kernels.space_outline's rows (counted, then filled), or None where protobuf must parse."""
    k = _kernels()
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
    if not enabled():
        return None
    k = _kernels()
    buf = np.frombuffer(buffer, dtype=np.uint8)
    starts, ends = np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(ends, dtype=np.int64)
    with _loading():
        hashes = k.slice_hashes(buf, starts, ends, np.empty(starts.size, dtype=np.uint64))
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    with _loading():
        equal = k.slices_equal(buf, starts, ends, starts[first][inverse], ends[first][inverse])
    if not equal:
        return None
    texts = [str(buffer[s:e], "utf-8", "replace") for s, e in zip(starts[first].tolist(), ends[first].tolist())]
    return inverse, texts


def warm_up() -> bool:
    """Load the compiled kernels in this process (before forking workers: they inherit them
    instead of each loading numba and its cache again). False when numba is off."""
    return enabled()
