"""Read an XSpace file (``*.xplane.pb``, optionally gzipped) into its raw protobuf, and when it was captured."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError

from traceview.errors import TraceError
from traceview.parsers import compressed
from traceview.parsers.compressed import read_limited
from traceview.parsers.remote import url_of
from traceview.parsers.xspace.lenient import repair_utf8
from traceview.parsers.xspace.schema import WireError, XSpaceRaw, field_span

if TYPE_CHECKING:
    from traceview.parsers.xspace.mapped import MappedFile

# Files this large take the compiled reader when numba is installed: below it, loading numba costs a fresh
# process more than the compiled loops save (the measurements: docs/scale.md, "The compiled reader").
_FAST_MIN_BYTES = 16 << 20
# Once the kernels are loaded in this process (an earlier file, or forked from a parent that warmed them
# up), loading costs nothing more and the compiled reader wins from this size on.
_FAST_WARM_MIN_BYTES = 256 << 10

TASK_ENV_PLANE = "Task Environment"
_START_STAT = "profile_start_time"


def _parse_space(data: bytes, fast: bool | None, mapped: MappedFile | None = None):
    """XSpaceRaw (pure path), or xspace.fast's FastSpace for large files when numba is there (`fast`: force);
    `data` is `mapped`'s bytes when the file is mapped (its decoded pages are then dropped as it goes)."""
    if fast is None:
        fast = len(data) >= _FAST_MIN_BYTES
        if not fast and len(data) >= _FAST_WARM_MIN_BYTES:
            from traceview.parsers.native import loader as native_loader
            from traceview.parsers.xspace import fast as xspace_fast

            fast = native_loader.loaded()
    if fast:
        from traceview.parsers.native import loader as native_loader
        from traceview.parsers.xspace import fast as xspace_fast

        if native_loader.enabled():
            return xspace_fast.parse_space(data, mapped)
    space = XSpaceRaw()
    space.ParseFromString(data)
    return space


def load_xspace(path: str | Path, fast: bool | None = None) -> XSpaceRaw:
    """Parse a file as an XSpace (events left as raw bytes); compression is recognised by its magic bytes.

    Raises TraceError (one line, naming the file) for an empty, truncated or
    corrupt file, or one that is not an XSpace.
    """
    path = Path(path)
    mapped = _mapped(path, fast)
    data = mapped.map if mapped is not None else read_limited(path, error=TraceError, what="trace file")
    if not data:
        raise TraceError(f"{path}: file is empty")
    fixed = 0
    try:
        try:
            space = _parse_space(data, fast, mapped)
        except DecodeError as exc:
            if "UTF-8" not in str(exc):
                raise
            # A name that is not valid UTF-8 (e.g. a thread name cut mid-character) costs that name, not the file.
            data, fixed = repair_utf8(bytes(data), XSpaceRaw)
            space = XSpaceRaw()
            space.ParseFromString(data)
            space.warnings.append(f"{fixed} name(s) or string stat(s) not valid UTF-8; "
                                  "read with replacement characters")
    except DecodeError as exc:
        raise TraceError(f"{path}: not a readable XSpace protobuf (truncated or corrupt: {exc})") from exc
    except WireError as exc:
        raise TraceError(f"{path}: corrupt line ({exc})") from exc
    wrong = _wrong_wire_type(space)
    if wrong is not None:
        raise TraceError(f"{path}: not a readable XSpace protobuf (corrupt: {wrong})")
    if not space.planes or not any(p.name for p in space.planes):
        raise TraceError(f"{path}: not a profiler trace (no named XPlane in it)")
    return space


def _mapped(path: Path, fast: bool | None) -> MappedFile | None:
    """The file mapped (parsers/xspace/mapped.py) when the compiled reader will read it (a large file, numba
    there, not turned off); None: read it into memory."""
    if fast is False or url_of(path) is not None:
        return None
    if fast is None:
        try:
            if path.stat().st_size < _FAST_MIN_BYTES:
                return None     # read by the numpy decoder: the compiled one is not loaded for it
        except OSError:
            return None         # the read says what is wrong
    from traceview.parsers.native import loader as native_loader
    from traceview.parsers.xspace.mapped import map_file

    if not native_loader.enabled():
        return None
    return map_file(path, 0 if fast else _FAST_MIN_BYTES, compressed.PROTO_LIMIT)


def _wrong_wire_type(space) -> str | None:
    """A field XSpace declares but the file holds with another wire type (protobuf keeps such a field as
    an unknown one and reads on, through what is then garbage); None when there is none."""
    if not isinstance(space, XSpaceRaw):
        return None  # the compiled reader checks every tag's wire type itself
    from google.protobuf import unknown_fields

    declared = {f.number: f for f in XSpaceRaw.DESCRIPTOR.fields}
    for field in unknown_fields.UnknownFieldSet(space):
        if field.field_number in declared:
            return (f"field {field.field_number} ({declared[field.field_number].name}) has wire type "
                    f"{field.wire_type}, not the one XSpace declares")
    return None


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
    """:func:`capture_time` of a trace file; None when it does not say or cannot be read.

    Only the Task Environment plane is parsed: the walk reads the top-level
    fields and each plane's fields up to its name, skipping the (large) lines
    by their length, so picking the newest run does not parse every event of
    every file.
    """
    from types import SimpleNamespace

    from traceview.parsers.xspace.schema import XPlane

    try:
        data = read_limited(path, error=TraceError, what="trace file")
        raw = _find_plane(data, TASK_ENV_PLANE)
        if raw is None:
            return None
        return capture_time(SimpleNamespace(planes=[XPlane.FromString(raw)]))
    except (TraceError, DecodeError, IndexError, ValueError):
        return None


def _find_plane(data: bytes, name: str) -> bytes | None:
    """The serialized XPlane called `name` (XSpace field 1), or None; raises ValueError (WireError) on bad
    bytes."""
    want = name.encode()
    pos, n = 0, len(data)
    while pos < n:
        number, wire, start, end = field_span(data, pos)
        if end > n:
            raise ValueError("field past the end")
        if (number, wire) == (1, 2):  # planes
            p = start
            while p < end:
                pnumber, pwire, s, e = field_span(data, p)
                if e > end:
                    raise ValueError("field past the end of its plane")
                if (pnumber, pwire) == (2, 2):  # XPlane.name
                    if data[s:e] == want:
                        return data[start:end]
                    break
                p = e
        pos = end
    return None
