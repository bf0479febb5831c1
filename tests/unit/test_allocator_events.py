"""Allocator events read from the host plane's bytes alone equal those of the whole-file read."""

from __future__ import annotations

import gzip

import pandas as pd
import pytest

from traceview.errors import TraceError
from traceview.parsers.xspace import allocator_events
from traceview.parsers.xspace.schema import XSpace


def _trace_files(root):
    return sorted(root.rglob("*.xplane.pb"))


def _whole_file(path, monkeypatch) -> pd.DataFrame:
    with monkeypatch.context() as m:
        m.setattr(allocator_events, "_plane_bytes", lambda *a: None)
        return allocator_events.read_allocator_events(path)


def test_host_plane_alone_gives_the_whole_file_frames(shared_traces, sample_traces, monkeypatch):
    files = _trace_files(shared_traces) + _trace_files(sample_traces)
    with_events = 0
    for f in files:
        assert allocator_events._plane_bytes(f, allocator_events.HOST_PLANE) is not None, f
        alone = allocator_events.read_allocator_events(f)
        pd.testing.assert_frame_equal(alone, _whole_file(f, monkeypatch), check_exact=True)
        with_events += len(alone) > 0
    assert with_events


def test_odd_files_are_left_to_the_whole_file_read(shared_traces, tmp_path):
    (path,) = _trace_files(shared_traces / "AMD-AGI-TraceLens" / "jax08_gemm")
    data = path.read_bytes()
    for cut in (len(data) // 3, len(data) // 2, len(data) - 1):  # a truncated plane, wherever the host plane is
        bad = tmp_path / "cut.xplane.pb"
        bad.write_bytes(data[:cut])
        assert allocator_events._plane_bytes(bad, allocator_events.HOST_PLANE) is None
        with pytest.raises(TraceError, match="cut.xplane.pb"):
            allocator_events.read_allocator_events(bad)
    packed = tmp_path / "packed.xplane.pb"
    packed.write_bytes(gzip.compress(data))
    assert allocator_events._plane_bytes(packed, allocator_events.HOST_PLANE) is None
    assert allocator_events._plane_bytes(path, "no such plane") == b""


def test_a_plane_named_late_is_left_to_the_whole_file_read(tmp_path):
    plane = XSpace().planes.add(id=1)
    for i in range(allocator_events._NAME_FIELDS + 1):  # fields written before the name
        plane.stats.add(metadata_id=i, int64_value=i)
    fields = plane.SerializeToString()
    name = allocator_events.HOST_PLANE.encode()
    named = bytes([0x12, len(name)]) + name             # XPlane field 2, length-delimited
    path = tmp_path / "t.xplane.pb"
    for body, found in ((fields + named, None), (named + fields, named + fields)):
        assert len(body) < 128
        path.write_bytes(bytes([0x0A, len(body)]) + body)  # one plane: XSpace field 1
        assert allocator_events._plane_bytes(path, allocator_events.HOST_PLANE) == found


def test_a_file_of_many_small_fields_is_left_to_protobuf(tmp_path, monkeypatch):
    """Header reads are one seek each: a file of thousands of tiny top-level fields goes to protobuf."""
    monkeypatch.setattr(allocator_events, "_SPACE_FIELDS", 10)
    space = XSpace()
    space.planes.add(name=allocator_events.HOST_PLANE)
    for i in range(11):
        space.hostnames.append(f"h{i}")
    path = tmp_path / "many.xplane.pb"
    path.write_bytes(space.SerializeToString())
    assert allocator_events._plane_bytes(path, allocator_events.HOST_PLANE) is None
    del space.hostnames[5:]
    path.write_bytes(space.SerializeToString())
    assert allocator_events._plane_bytes(path, allocator_events.HOST_PLANE) == space.planes[0].SerializeToString()
