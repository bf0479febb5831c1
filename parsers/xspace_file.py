"""Read an XSpace file (``*.xplane.pb``, optionally gzipped) into its raw protobuf, and when it was captured."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from google.protobuf.message import DecodeError

from traceview.errors import TraceError
from traceview.parsers.compressed import read_limited
from traceview.parsers.xspace_lenient import repair_utf8
from traceview.parsers.xspace_schema import WireError, XSpaceRaw

_FAST_MIN_BYTES = 4 << 20  # files this large take the compiled reader when numba is installed

TASK_ENV_PLANE = "Task Environment"
_START_STAT = "profile_start_time"


def _parse_space(data: bytes, fast: bool | None):
    """XSpaceRaw (pure path), or xspace_fast's FastSpace for large files when numba is there (`fast`: force)."""
    if fast is None:
        fast = len(data) >= _FAST_MIN_BYTES
    if fast:
        from traceview.parsers import xspace_fast

        if xspace_fast.enabled():
            return xspace_fast.parse_space(data)
    space = XSpaceRaw()
    space.ParseFromString(data)
    return space


def load_xspace(path: str | Path, fast: bool | None = None) -> XSpaceRaw:
    """Parse a file as an XSpace (events left as raw bytes); compression is recognised by its magic bytes.

    Raises TraceError (one line, naming the file) for an empty, truncated or
    corrupt file, or one that is not an XSpace.
    """
    path = Path(path)
    data = read_limited(path, error=TraceError, what="trace file")
    if not data:
        raise TraceError(f"{path}: file is empty")
    fixed = 0
    try:
        try:
            space = _parse_space(data, fast)
        except DecodeError as exc:
            if "UTF-8" not in str(exc):
                raise
            # A name that is not valid UTF-8 (e.g. a thread name cut mid-character) costs that name, not the file.
            data, fixed = repair_utf8(data, XSpaceRaw)
            space = XSpaceRaw()
            space.ParseFromString(data)
            space.warnings.append(f"{fixed} name(s) or string stat(s) not valid UTF-8; "
                                  "read with replacement characters")
    except DecodeError as exc:
        raise TraceError(f"{path}: not a readable XSpace protobuf (truncated or corrupt: {exc})") from exc
    except WireError as exc:
        raise TraceError(f"{path}: corrupt line ({exc})") from exc
    if not space.planes or not any(p.name for p in space.planes):
        raise TraceError(f"{path}: not a profiler trace (no named XPlane in it)")
    return space


def capture_time(space: XSpaceRaw) -> datetime | None:
    """When the profiler started, from the ``Task Environment`` plane's ``profile_start_time``
    (ns since the epoch, UTC); None when the trace does not say (older profilers)."""
    for plane in space.planes:
        if plane.name != TASK_ENV_PLANE:
            continue
        names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for stat in plane.stats:
            if names.get(stat.metadata_id) == _START_STAT:
                ns = stat.uint64_value or stat.int64_value
                if ns > 0:
                    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)
    return None


def file_capture_time(path: str | Path) -> datetime | None:
    """:func:`capture_time` of a trace file; None when it does not say or cannot be read."""
    try:
        return capture_time(load_xspace(path))
    except TraceError:
        return None
