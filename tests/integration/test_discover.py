"""parsers.discover and traceview.trace.read: which files PATH means, and merging hosts."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest

from traceview.errors import TraceError, UserError
from traceview.parsers.discover import find_run, list_runs
from traceview.parsers.profile import OP_COLUMNS
from traceview.trace.read import load_profile

GEMM = "AMD-AGI-TraceLens/jax08_gemm/tw003.xplane.pb"
ELEMENTWISE = "AMD-AGI-TraceLens/jax08_elementwise/tw003.xplane.pb"


def _touch(path: Path, data: bytes = b"x", mtime: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


@pytest.fixture
def logdir(tmp_path) -> Path:
    """Two timestamped runs (two hosts in the newer one) and an HLO proto file."""
    profile = tmp_path / "logs" / "plugins" / "profile"
    _touch(profile / "2024_01_31_12_00_00" / "hostA.xplane.pb", b"a" * 10)
    _touch(profile / "2024_02_01_09_30_00" / "hostA.xplane.pb", b"b" * 20)
    _touch(profile / "2024_02_01_09_30_00" / "hostB.xplane.pb.gz", b"c" * 30)
    _touch(profile / "2024_02_01_09_30_00" / "jit_f(3).hlo_proto.pb", b"p")
    _touch(profile / "2024_02_01_09_30_00" / "hostA.trace.json.gz", b"ignored")
    return tmp_path / "logs"


def test_log_dir_lists_runs_oldest_first(logdir):
    runs = list_runs(logdir)
    assert [r.name for r in runs] == ["2024_01_31_12_00_00", "2024_02_01_09_30_00"]
    newest = runs[-1].summary()
    assert newest["hosts"] == ["hostA", "hostB"]
    assert newest["total_bytes"] == 50
    assert len(newest["files"]) == 2


@pytest.mark.parametrize("below", ["", "plugins", "plugins/profile"])
def test_newest_run_by_default_from_any_level(logdir, below):
    run = find_run(logdir / below if below else logdir)
    assert run.name == "2024_02_01_09_30_00"
    assert [f.name for f in run.hlo_proto_files] == ["jit_f(3).hlo_proto.pb"]


def test_named_run_and_run_dir_and_file(logdir):
    assert find_run(logdir, run="2024_01_31_12_00_00").hosts == ["hostA"]
    run_dir = logdir / "plugins" / "profile" / "2024_01_31_12_00_00"
    assert find_run(run_dir).files == [run_dir / "hostA.xplane.pb"]
    single = find_run(run_dir / "hostA.xplane.pb")
    assert single.files == [run_dir / "hostA.xplane.pb"]


def test_unknown_run_names_the_runs_that_exist(logdir):
    with pytest.raises(UserError) as info:
        find_run(logdir, run="nope")
    msg = str(info.value)
    assert "nope" in msg and "2024_01_31_12_00_00" in msg and "2024_02_01_09_30_00" in msg


def test_mtime_orders_runs_without_timestamp_names(tmp_path):
    _touch(tmp_path / "profile" / "zzz_old" / "h.xplane.pb", mtime=1_000_000)
    _touch(tmp_path / "profile" / "aaa_new" / "h.xplane.pb", mtime=2_000_000)
    assert find_run(tmp_path).name == "aaa_new"


def test_missing_path_empty_dir_and_wrong_file(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        list_runs(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no profiler trace"):
        list_runs(tmp_path / "empty")
    with pytest.raises(UserError, match="not a trace file"):
        list_runs(_touch(tmp_path / "notes.txt"))


def test_same_run_names_in_two_log_dirs_are_told_apart(tmp_path):
    _touch(tmp_path / "a" / "plugins" / "profile" / "run1" / "h.xplane.pb")
    _touch(tmp_path / "b" / "plugins" / "profile" / "run1" / "h.xplane.pb")
    names = sorted(r.name for r in list_runs(tmp_path))
    assert names == [str(Path("a/plugins/profile/run1")), str(Path("b/plugins/profile/run1"))]


# ------------------------------------------------------------------ load_profile


def _two_host_run(shared_traces: Path, root: Path) -> Path:
    run = root / "plugins" / "profile" / "2025_05_05_05_05_05"
    run.mkdir(parents=True)
    shutil.copy(shared_traces / GEMM, run / "host1.xplane.pb")
    (run / "host2.xplane.pb.gz").write_bytes(gzip.compress((shared_traces / ELEMENTWISE).read_bytes()))
    return run


def test_load_merges_hosts(shared_traces, tmp_path):
    _two_host_run(shared_traces, tmp_path)
    seen = []
    prof = load_profile(tmp_path, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 2), (2, 2)]
    assert prof.source.run == "2025_05_05_05_05_05"
    assert prof.source.hosts == ["host1", "host2"]
    assert set(prof.op_executions()["host"]) == {"host1", "host2"}
    assert {str(c): str(prof.op_executions()[c].dtype) for c in prof.op_executions().columns} == OP_COLUMNS
    # each host keeps its rows: totals are the sum of the single-file reads
    one = load_profile(tmp_path / "plugins/profile/2025_05_05_05_05_05/host1.xplane.pb")
    assert (prof.op_executions()["host"] == "host1").sum() == len(one.op_executions())
    assert len({d.id for d in prof.devices}) == len(prof.devices) == 16


def test_one_broken_host_is_a_warning(shared_traces, tmp_path):
    run = _two_host_run(shared_traces, tmp_path)
    (run / "host2.xplane.pb.gz").write_bytes(b"\x1f\x8b broken")
    prof = load_profile(tmp_path)
    assert prof.source.hosts == ["host1"]
    assert any("host2.xplane.pb.gz" in w for w in prof.warnings)
    assert len(prof.op_executions()) > 0


def test_all_hosts_broken_is_an_error(tmp_path):
    run = tmp_path / "run"
    _touch(run / "a.xplane.pb", b"")
    _touch(run / "b.xplane.pb", b"\x1f\x8b nope")
    with pytest.raises(UserError) as info:
        load_profile(run)
    assert "none of the 2" in str(info.value)
    _touch(tmp_path / "single" / "c.xplane.pb", b"")
    with pytest.raises(TraceError, match="empty"):
        load_profile(tmp_path / "single")


def test_load_adds_hlo_proto_files_beside(shared_traces):
    prof = load_profile(shared_traces / "AMD-AGI-TraceLens" / "jax_conv_minimal_legacy")
    assert "jit_forward_3d_conv(15)" in prof.hlo_protos
    assert len(prof.hlo_protos) == 8


def test_non_regular_trace_name_is_a_warning_in_the_analysis(sample_traces, tmp_path):
    """A directory named like a host's trace file is reported in the analysis's warnings; the real host is read."""
    import shutil

    import traceview

    run = tmp_path / "plugins" / "profile" / "r1"
    run.mkdir(parents=True)
    for f in (sample_traces / "mlp").rglob("*.xplane.pb"):
        shutil.copy(f, run / f.name)
    (run / "ghost.xplane.pb").mkdir()
    analysis = traceview.load(tmp_path)
    assert any("ghost.xplane.pb" in w and "directory" in w for w in analysis.warnings)
    assert analysis.summary.device_time_us and analysis.summary.device_time_us > 0


def test_a_single_run_is_found_without_reading_capture_times(logdir, monkeypatch):
    """Ordering runs reads each host file's start time; with one run there is nothing to order (a pod's
    run of hundreds of host files must not be opened once more just to be picked)."""
    from traceview.parsers.xspace import file as xspace_file

    calls: list[Path] = []
    real = xspace_file.file_capture_time
    monkeypatch.setattr(xspace_file, "file_capture_time", lambda f: calls.append(f) or real(f))
    run = find_run(logdir / "plugins" / "profile" / "2024_02_01_09_30_00")
    assert run.name == "2024_02_01_09_30_00" and len(run.files) == 2
    assert calls == []
    assert [r.name for r in list_runs(logdir)] == ["2024_01_31_12_00_00", "2024_02_01_09_30_00"]
    assert calls  # several runs: ordered by their capture times


def test_a_reading_that_keeps_no_execution_says_so_and_reads_them_again_on_demand(shared_traces, tmp_path):
    """keep_ops=False leaves ``Profile.kept`` None (not empty tables that could be a run with no op); the
    executions and host events are then read again from the files, equal to those a full reading keeps."""
    import pandas as pd

    from traceview.trace.read import ReadOptions

    _two_host_run(shared_traces, tmp_path)
    full = load_profile(tmp_path, options=ReadOptions(cache=False, jobs=1))
    lean = load_profile(tmp_path, options=ReadOptions(cache=False, jobs=1, keep_ops=False))
    assert lean.kept is None and full.kept is not None and len(full.kept.ops) > 0
    assert full.op_executions() is full.kept.ops and full.all_host_events() is full.kept.host_events
    pd.testing.assert_frame_equal(lean.op_executions().reset_index(drop=True), full.kept.ops.reset_index(drop=True))
    pd.testing.assert_frame_equal(lean.all_host_events().reset_index(drop=True),
                                  full.kept.host_events.reset_index(drop=True))
