"""Allocator events read as columns (parsers/xspace/allocator_events.py) against the row-by-row reading of the same
events (each event's stats by name, then one dict per row): every stat kind, every real trace, both readers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from traceview.parsers.xspace import allocator_events as A
from traceview.parsers.xspace.schema import XSpaceRaw


def _by_rows(plane, host: str = "h") -> pd.DataFrame:
    """The reference: the row-by-row reading (the one kept for two stat ids of one name)."""
    md = {k: v.name for k, v in plane.event_metadata.items()}
    kinds = {k: ("alloc" if n == A.ALLOCATION else "free") for k, n in md.items() if n in (A.ALLOCATION, A.DEALLOCATION)}
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    wanted = np.array([k for k, n in stat_names.items() if n in A._WANTED], dtype=np.int64)
    rows = A._rows_by_name(plane, kinds, stat_names, wanted, host, "where")
    return A._frame(rows) if rows else A.empty_allocator_frame()


def _stat(event, sid: int, value) -> None:
    s = event.stats.add(metadata_id=sid)
    if value is None:
        return                                   # a stat with no value
    kind, v = value
    setattr(s, kind, v)


# Stats, each a (field, value) of XStat; per event a different mix: integers, large unsigned, doubles,
# texts that are numbers or not, empty texts, references to stat names, bytes, no value at all.
_NAMES = ["bytes_reserved", "bytes_allocated", "bytes_available", "fragmentation", "peak_bytes_in_use",
          "requested_bytes", "allocation_bytes", "addr", "group_id", "tf_op", "region_type", "tensor_shapes",
          "shape", "data_type", "allocator_name", "index_on_host", "device_ordinal", "other"]
_VALUES = [("int64_value", 123), ("int64_value", -5), ("uint64_value", 2**64 - 3), ("uint64_value", 7),
           ("double_value", 2.75), ("double_value", -1e3), ("str_value", "42"), ("str_value", " 17 "),
           ("str_value", "not a number"), ("str_value", ""), ("str_value", "f32[2,3]"), ("ref_value", 1),
           ("ref_value", 999), ("bytes_value", b"\x00\x01"), None]


def _plane_bytes(seed: int, events: int = 60) -> bytes:
    rng = np.random.default_rng(seed)
    space = XSpaceRaw()
    plane = space.planes.add(name=A.HOST_PLANE, id=1)
    plane.event_metadata[1].id, plane.event_metadata[1].name = 1, A.ALLOCATION
    plane.event_metadata[2].id, plane.event_metadata[2].name = 2, A.DEALLOCATION
    plane.event_metadata[3].id, plane.event_metadata[3].name = 3, "SomethingElse"
    for sid, name in enumerate(_NAMES, start=1):
        plane.stat_metadata[sid].id, plane.stat_metadata[sid].name = sid, name
    from traceview.parsers.xspace.schema import XEvent

    for li in range(3):
        line = plane.lines.add(id=li, name=f"line{li}", timestamp_ns=1000 + li)
        for _ in range(events):
            event = XEvent(metadata_id=int(rng.integers(1, 4)), offset_ps=int(rng.integers(0, 10**6)))
            for sid in rng.choice(len(_NAMES), size=int(rng.integers(0, 8)), replace=False):
                value = _VALUES[int(rng.integers(len(_VALUES)))]
                _stat(event, int(sid) + 1, value)
            line.events.append(event.SerializeToString())
    return space.SerializeToString()


def _planes(data: bytes):
    """The host plane read both ways: raw protobuf (events as bytes) and by the compiled reader."""
    from traceview.parsers.native import loader as native_loader
    from traceview.parsers.xspace import fast as xspace_fast

    raw = XSpaceRaw.FromString(data).planes[0]
    fast = xspace_fast.parse_space(data).planes[0] if native_loader.enabled() else None
    return raw, fast


@pytest.mark.parametrize("seed", range(6))
def test_every_stat_kind_reads_as_the_rows_read_it(seed):
    raw, fast = _planes(_plane_bytes(seed))
    want = _by_rows(raw)
    assert len(want) > 50
    pd.testing.assert_frame_equal(A.allocator_events_of_plane(raw, "h", "where"), want, check_exact=True)
    if fast is not None:
        pd.testing.assert_frame_equal(A.allocator_events_of_plane(fast, "h", "where"), want, check_exact=True)
    assert set(want["memory"]) - {"unknown"}      # some events named by their memory
    assert (want["address"] > np.uint64(2**63)).any()   # an unsigned address past int64 kept whole


def test_numbers_no_row_could_hold_become_the_default():
    """A double that is not a finite int64 (NaN, infinity, 1e30) as a byte count: the default (0; -1 for
    the step), where reading row by row failed (int(nan) raises)."""
    from traceview.parsers.xspace.schema import XEvent

    space = XSpaceRaw()
    plane = space.planes.add(name=A.HOST_PLANE)
    plane.event_metadata[1].id, plane.event_metadata[1].name = 1, A.ALLOCATION
    plane.stat_metadata[1].id, plane.stat_metadata[1].name = 1, "bytes_allocated"
    plane.stat_metadata[2].id, plane.stat_metadata[2].name = 2, "group_id"
    line = plane.lines.add(name="l", timestamp_ns=1)
    for value in (math.nan, math.inf, 1e30, 12.9):
        event = XEvent(metadata_id=1, offset_ps=5)
        _stat(event, 1, ("double_value", value))
        _stat(event, 2, ("double_value", value))
        line.events.append(event.SerializeToString())
    for p in _planes(space.SerializeToString()):
        if p is not None:
            got = A.allocator_events_of_plane(p, "h", "where")
            assert got["heap_bytes"].tolist() == [0, 0, 0, 12] and got["step"].tolist() == [-1, -1, -1, 12]


def test_a_malformed_event_elsewhere_on_the_line_is_not_read():
    """An event that is not an allocator event and does not parse: the compiled reader's whole-line decode
    fails, the line is then read as the raw path reads it (only its allocator events), same rows."""
    data = bytearray(_plane_bytes(1, events=20))
    raw = XSpaceRaw.FromString(bytes(data)).planes[0]
    # corrupt the first "SomethingElse" event (metadata id 3) of the first line: a length that runs past it
    event = next(e for e in raw.lines[0].events if e.startswith(b"\x08\x03"))
    at = bytes(data).find(event)
    bad = event[:2] + b"\x22\x7f" + event[4:] if len(event) > 4 else event[:2] + b"\x22\x7f"
    bad = bad[:len(event)].ljust(len(event), b"\x00")
    data[at:at + len(event)] = bad
    raw, fast = _planes(bytes(data))
    want = _by_rows(raw)
    if fast is not None:
        pd.testing.assert_frame_equal(A.allocator_events_of_plane(fast, "h", "where"), want, check_exact=True)


def test_real_traces_read_the_same_by_columns_and_by_rows(shared_traces, sample_traces):
    files = sorted(shared_traces.rglob("*.xplane.pb")) + sorted(sample_traces.rglob("*.xplane.pb"))
    found = 0
    for f in files:
        plane = A._host_plane_alone(f)
        if not plane:
            continue
        got = A.read_allocator_events(f)
        found += len(got) > 0
        pd.testing.assert_frame_equal(got, _by_rows(plane, A.host_of(f)), check_exact=True)
    assert found >= 5


def test_double_stat_names_read_row_by_row(monkeypatch):
    """Two stat ids named alike: which counts depends on their order in the event, which the columns do not
    keep: such a plane is read row by row."""
    from traceview.parsers.xspace.schema import XEvent

    space = XSpaceRaw()
    plane = space.planes.add(name=A.HOST_PLANE)
    plane.event_metadata[1].id, plane.event_metadata[1].name = 1, A.ALLOCATION
    for sid in (1, 2):
        plane.stat_metadata[sid].id, plane.stat_metadata[sid].name = sid, "bytes_allocated"
    line = plane.lines.add(name="l", timestamp_ns=1)
    for first, second in ((1, 2), (2, 1)):
        event = XEvent(metadata_id=1, offset_ps=first)
        _stat(event, first, ("int64_value", 100 * first))
        _stat(event, second, ("int64_value", 100 * second))
        line.events.append(event.SerializeToString())
    raw = XSpaceRaw.FromString(space.SerializeToString()).planes[0]
    monkeypatch.setattr(A, "_columns", None)          # not called
    got = A.allocator_events_of_plane(raw, "h", "w")
    assert len(got) == 2 and set(got["heap_bytes"]) <= {100, 200}
    pd.testing.assert_frame_equal(got, _by_rows(raw), check_exact=True)


def test_times_past_the_clock_are_dropped_without_overflow():
    from traceview.parsers.xspace.schema import XEvent

    space = XSpaceRaw()
    plane = space.planes.add(name=A.HOST_PLANE)
    plane.event_metadata[1].id, plane.event_metadata[1].name = 1, A.ALLOCATION
    for ts, offsets in ((-5, (10, 5000, 10000)), (2**62, (0, -2**62, 2**63 - 1)), (2**63 - 1, (0,)), (7, (-2**63,))):
        line = plane.lines.add(name=f"l{ts}", timestamp_ns=ts)
        for off in offsets:
            line.events.append(XEvent(metadata_id=1, offset_ps=off).SerializeToString())
    for p in _planes(space.SerializeToString()):
        if p is not None:
            got = A.allocator_events_of_plane(p, "h", "w")
            assert got["time_ps"].tolist() == [0, 5000]
            pd.testing.assert_frame_equal(got, _by_rows(XSpaceRaw.FromString(space.SerializeToString()).planes[0]))
