"""Optional accelerator for large XSpace files: the line and event wire format decoded by numba.

With ``numba`` installed (``pip install 'traceview[fast]'``), a large file's
XLines are kept as raw bytes by protobuf (XSpaceLines) and each is walked by a
compiled loop: its event boundaries, then every event and kept stat, straight
into the same EventColumns the pure numpy decoder (xspace_schema.decode_events)
gives. The compiled code is cached on disk (numba's ``cache=True``), so only
the first use on a machine pays the compile. Without numba, or with
``TRACEVIEW_NO_NUMBA=1``, nothing here is used and the pure path reads the file;
tests/test_xspace_fast.py checks that both give identical tables.

Every length and offset is checked against the message that holds it: a
malformed file raises WireError, as the pure decoder does.
"""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

from traceview.parsers.xspace_schema import EventColumns, WireError

# Files at least this large take the compiled path (small ones: not worth importing numba).
MIN_BYTES = 4 << 20
_ERRORS = {1: "field tag runs past the end of its message", 2: "unsupported wire type", 3: "field number 0",
           4: "length-delimited field runs past the end of its message", 5: "field runs past the end of its message",
           6: "varint longer than 10 bytes", 7: "stat id runs past the end of its stat"}


def enabled() -> bool:
    """numba importable and not switched off."""
    if os.environ.get("TRACEVIEW_NO_NUMBA"):
        return False
    return _kernels() is not None


@lru_cache(maxsize=1)
def _kernels():
    try:
        from traceview.parsers import xspace_kernels
    except ImportError:  # numba absent
        return None
    return xspace_kernels


class EventRegion:
    """A line's events as (start, end) offsets into the line's bytes: what decode_events takes in place of a list."""

    def __init__(self, data: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self.data, self.buf, self.starts, self.ends = data, buf, starts, ends

    def __len__(self) -> int:
        return int(self.starts.size)

    def decode(self, keep_stats: np.ndarray | None) -> EventColumns:
        k = _kernels()
        keep = np.zeros(0, dtype=np.int64) if keep_stats is None else np.unique(np.asarray(keep_stats, np.int64))
        counts = k.count_stats(self.buf, self.starts, self.ends, keep, keep_stats is not None)
        err = int(counts[-1])
        if err:
            raise WireError(_ERRORS.get(err, "malformed event bytes"))
        out = k.decode(self.buf, self.starts, self.ends, keep, keep_stats is not None, int(counts[0]))
        if int(out[-1]):
            raise WireError(_ERRORS.get(int(out[-1]), "malformed event bytes"))
        return EventColumns(*out[:-1], buffer=self.data)


class RawLine:
    """An XLine whose events stay undecoded until asked for (the attributes the reader uses)."""

    def __init__(self, data: bytes) -> None:
        buf = np.frombuffer(data, dtype=np.uint8)  # no copy: the kernels read past the end as zeros
        head, starts, ends = _kernels().scan_line(buf, len(data))
        if head[-1]:
            raise WireError(_ERRORS.get(int(head[-1]), "malformed line bytes"))
        self.id, self.timestamp_ns, self.duration_ps, self.display_id = (int(v) for v in head[:4])
        try:
            self.name = data[head[4]:head[5]].decode("utf-8")
            self.display_name = data[head[6]:head[7]].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WireError(f"line name is not UTF-8 ({exc.reason})") from None
        self.events = EventRegion(data, buf, starts, ends)


class _Plane:
    """An XPlaneLines message with its lines parsed lazily into RawLines."""

    def __init__(self, plane) -> None:
        self._plane = plane
        self.lines = [RawLine(bytes(b)) for b in plane.lines]

    def __getattr__(self, name):
        return getattr(self._plane, name)


class FastSpace:
    """An XSpace read through XSpaceLines: planes, errors and warnings as the reader expects them."""

    def __init__(self, space) -> None:
        self.planes = [_Plane(p) for p in space.planes]
        self.errors, self.warnings, self.hostnames = space.errors, space.warnings, space.hostnames


def parse_space(data: bytes) -> FastSpace:
    """Parse a whole file (raises DecodeError from protobuf, WireError from the line walk)."""
    from traceview.parsers.xspace_schema import XSpaceLines

    space = XSpaceLines()
    space.ParseFromString(data)
    return FastSpace(space)


def distinct_strings(buffer: bytes, starts: np.ndarray, ends: np.ndarray) -> np.ndarray | None:
    """Object array of the UTF-8 strings at buffer[start:end], each distinct one decoded once.

    Slices are grouped by a 64-bit hash (compiled), every slice is checked
    byte for byte against its group's first; None when numba is off or a
    hash collides (then the caller decodes them one by one).
    """
    if not enabled():
        return None
    k = _kernels()
    buf = np.frombuffer(buffer, dtype=np.uint8)
    starts, ends = starts.astype(np.int64, copy=False), ends.astype(np.int64, copy=False)
    _, first, inverse = np.unique(k.slice_hashes(buf, starts, ends), return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not k.slices_equal(buf, starts, ends, starts[first][inverse], ends[first][inverse]):
        return None
    texts = np.empty(first.size, dtype=object)
    texts[:] = [buffer[s:e].decode("utf-8", "replace") for s, e in zip(starts[first].tolist(), ends[first].tolist())]
    return texts[inverse]
