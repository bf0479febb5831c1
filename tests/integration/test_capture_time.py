"""`runs` orders and dates runs by when the profiler started (the trace's own record), not file mtimes."""

from __future__ import annotations

import os
from datetime import datetime, timezone

from traceview.parsers.discover import find_run, list_runs
from traceview.parsers.xspace.schema import XSpaceRaw


def _trace(path, start_ns: int | None) -> None:
    space = XSpaceRaw()
    host = space.planes.add()
    host.name = "/host:CPU"
    line = host.lines.add()
    line.name = "main"
    if start_ns is not None:
        env = space.planes.add()
        env.name = "Task Environment"
        env.stat_metadata[1].id = 1
        env.stat_metadata[1].name = "profile_start_time"
        stat = env.stats.add()
        stat.metadata_id = 1
        stat.uint64_value = start_ns
    path.parent.mkdir(parents=True)
    path.write_bytes(space.SerializeToString())


def test_runs_are_dated_and_ordered_by_the_traces_start_time(tmp_path):
    older, newer = 1_700_000_000 * 10**9, 1_750_000_000 * 10**9     # 2023-11-14 22:13:20, 2025-06-15 15:06:40 UTC
    _trace(tmp_path / "b" / "h.xplane.pb", older)
    _trace(tmp_path / "a" / "h.xplane.pb", newer)
    _trace(tmp_path / "c" / "h.xplane.pb", None)
    # file mtimes say the opposite: "b" was written last
    os.utime(tmp_path / "a" / "h.xplane.pb", (1_600_000_000, 1_600_000_000))
    os.utime(tmp_path / "b" / "h.xplane.pb", (1_800_000_000, 1_800_000_000))
    os.utime(tmp_path / "c" / "h.xplane.pb", (1_600_000_001, 1_600_000_001))
    runs = {r.name: r for r in list_runs(tmp_path)}
    assert runs["a"].time == datetime(2025, 6, 15, 15, 6, 40, tzinfo=timezone.utc)
    assert runs["b"].time == datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)
    assert runs["a"].time_source == runs["b"].time_source == "trace"
    assert runs["c"].time_source == "file time"
    assert [r.name for r in list_runs(tmp_path) if r.name != "c"] == ["b", "a"]
    assert find_run(tmp_path).name == "a"
    assert runs["a"].summary()["captured"] == "2025-06-15T15:06:40+00:00"


def test_sample_runs_have_trace_times(sample_traces):
    assert {r.time_source for r in list_runs(sample_traces)} == {"trace"}
