"""Log dirs behind fsspec URLs (parsers/remote.py): fsspec's in-memory and local filesystems stand in
for gs:// and s3://. A log dir there reads like the same log dir on disk."""

from __future__ import annotations

import io
import json
import shutil
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from traceview.cli import main
from traceview.trace.read import ReadOptions, load_profile

fsspec = pytest.importorskip("fsspec")


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def _analyze(path: str, *extra: str) -> dict:
    rc, out, err = _cli("analyze", path, "--format", "json", *extra)
    assert rc == 0, err
    return json.loads(out)


@pytest.fixture
def memory_log_dir(sample_traces: Path):
    """sample_traces/mlp (trace and hlo/ dump) copied into fsspec's memory filesystem."""
    fs = fsspec.filesystem("memory")
    root = "/bucket-test/mlp"
    for f in (sample_traces / "mlp").rglob("*"):
        if f.is_file():
            fs.pipe(f"{root}/{f.relative_to(sample_traces / 'mlp')}", f.read_bytes())
    yield f"memory://{root.lstrip('/')}"
    fs.rm(root, recursive=True)


def _without_source(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "source"}


@pytest.mark.parametrize("cache", ["--no-cache", None])
def test_memory_log_dir_reads_like_the_local_one(sample_traces: Path, memory_log_dir: str, cache) -> None:
    extra = [cache] if cache else []
    local, remote = _analyze(str(sample_traces / "mlp"), *extra), _analyze(memory_log_dir, *extra)
    assert _without_source(remote) == _without_source(local)
    assert remote["source"]["files"] == [f"{memory_log_dir}/plugins/profile/mlp/localhost.xplane.pb"]
    assert remote["source"]["path"] == memory_log_dir
    assert any(op["flops"] for op in remote["ops"])  # costed from the dump beside the remote run


def test_local_filesystem_url_reads_like_the_path(sample_traces: Path, tmp_path: Path) -> None:
    shutil.copytree(sample_traces / "mlp", tmp_path / "mlp")
    local = _analyze(str(tmp_path / "mlp"), "--no-cache")
    url = _analyze(f"file://{tmp_path / 'mlp'}", "--no-cache")
    assert _without_source(url) == _without_source(local)
    rc, out, _ = _cli("runs", f"file://{tmp_path / 'mlp'}", "--format", "json")
    (run,) = json.loads(out)["runs"]
    assert rc == 0 and run["files"] == [f"file://{tmp_path}/mlp/plugins/profile/mlp/localhost.xplane.pb"]


def test_table_cache_keyed_by_the_objects_identity(sample_traces: Path, memory_log_dir: str, monkeypatch,
                                                   tmp_path: Path) -> None:
    import traceview.parsers.remote as remote

    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path / "cache"))
    first = load_profile(memory_log_dir, options=ReadOptions(cache=True, jobs=1))
    from traceview.cache import tables as table_cache

    table_cache.flush()
    reads: list[str] = []
    real_read = remote.read_bytes
    monkeypatch.setattr(remote, "read_bytes", lambda url, *a, **k: reads.append(url) or real_read(url, *a, **k))
    again = load_profile(memory_log_dir, options=ReadOptions(cache=True, jobs=1))
    assert not [u for u in reads if u.endswith(".xplane.pb")]  # the unchanged object: from the cache
    assert again.op_executions()["duration_ps"].sum() == first.op_executions()["duration_ps"].sum()
    # The object replaced (another capture under the same name): its identity changed, so it is read again.
    fsspec.filesystem("memory").pipe(memory_log_dir.removeprefix("memory://") + "/plugins/profile/mlp/localhost.xplane.pb",
                                     (sample_traces / "mlp_slow/plugins/profile/mlp_slow/localhost.xplane.pb").read_bytes())
    changed = load_profile(memory_log_dir, options=ReadOptions(cache=True, jobs=1))
    assert [u for u in reads if u.endswith(".xplane.pb")]
    assert changed.op_executions()["duration_ps"].sum() != first.op_executions()["duration_ps"].sum()


def test_remote_errors_are_one_line(memory_log_dir: str, monkeypatch) -> None:
    rc, _, err = _cli("analyze", "memory://bucket-test/nothing-here")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "no such file or directory" in err
    rc, _, err = _cli("analyze", "nosuchscheme://bucket/x")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "nosuchscheme" in err
    monkeypatch.setitem(sys.modules, "fsspec", None)  # fsspec not installed
    rc, _, err = _cli("analyze", "gs://bucket/logs")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "pip install 'traceview[remote]'" in err


def test_remote_log_dir_of_several_runs_lists_them_like_the_local_one(sample_traces: Path, tmp_path: Path) -> None:
    fs = fsspec.filesystem("memory")
    local = tmp_path / "logs" / "plugins" / "profile"
    for name in ("mlp_slow", "mlp"):
        xplane = sample_traces / name / "plugins" / "profile" / name / "localhost.xplane.pb"
        (local / name).mkdir(parents=True)
        shutil.copy(xplane, local / name)
        fs.pipe(f"/bucket-runs/logs/plugins/profile/{name}/localhost.xplane.pb", xplane.read_bytes())
    try:
        rc, out, _ = _cli("runs", "memory://bucket-runs/logs", "--format", "json")
        remote_runs = json.loads(out)["runs"]
        _, out, _ = _cli("runs", str(tmp_path / "logs"), "--format", "json")
        local_runs = json.loads(out)["runs"]
        assert rc == 0 and len(remote_runs) == 2
        # Ordered by the capture time the traces record, as locally.
        for key in ("name", "hosts", "total_bytes", "captured", "captured_from", "format"):
            assert [r[key] for r in remote_runs] == [r[key] for r in local_runs], key
        newest = _analyze("memory://bucket-runs/logs", "--no-cache")
        assert newest["source"]["run"] == local_runs[-1]["name"]
    finally:
        fs.rm("/bucket-runs", recursive=True)


@pytest.mark.slow
def test_dask_workers_read_a_url_log_dir_themselves(sample_traces: Path, tmp_path: Path) -> None:
    """A log dir named by a URL on a Dask cluster: each worker opens its hosts' files through fsspec (the URL
    travels as it is, not made a local path of the client's), and the analysis is the one read here."""
    distributed = pytest.importorskip("distributed")
    run = tmp_path / "pod" / "plugins" / "profile" / "run"
    run.mkdir(parents=True)
    xplane = next((sample_traces / "mlp").rglob("*.xplane.pb")).read_bytes()
    for host in ("hostA", "hostB"):
        (run / f"{host}.xplane.pb").write_bytes(xplane)
    url = f"file://{tmp_path / 'pod'}"
    here = _analyze(url, "--no-cache")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        assert _analyze(url, "--no-cache", "--dask", cluster.scheduler_address) == here
    assert here["source"]["files"] == [f"{url}/plugins/profile/run/{h}.xplane.pb" for h in ("hostA", "hostB")]
