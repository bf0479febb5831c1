"""Reading at scale: the parsed-table cache, hosts in parallel, Dask; every way gives the same output."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from traceview.cache import tables as table_cache
from traceview.cli import main
from traceview.errors import UserError
from traceview.hostreduce.spill import spilled
from traceview.parsers.xspace.reader import read_xplane
from traceview.trace.read import ReadOptions, load_profile

TPU = "openxla-xprof/tpu_inference_2.xplane.pb"
MI300X = "AMD-AGI-TraceLens/jax08_gemm/tw003.xplane.pb"
V100 = "tensorflow-profiler/GPU-multi-worker/34.83.195.179_6003.xplane.pb"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(d))
    monkeypatch.delenv("TRACEVIEW_NO_CACHE", raising=False)
    monkeypatch.delenv("TRACEVIEW_DASK", raising=False)
    return d


@pytest.fixture
def pod(shared_traces, tmp_path) -> Path:
    """A run of three hosts (copies of real single-host traces under other host names)."""
    run = tmp_path / "logs" / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    for host, src in (("hostA", MI300X), ("hostB", MI300X), ("hostC", TPU)):
        shutil.copyfile(shared_traces / src, run / f"{host}.xplane.pb")
    return run


def _same_trace_data(a, b) -> None:
    for table in ("ops", "host_events", "steps"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table), check_exact=True)
    assert a.devices == b.devices and a.hlo_protos == b.hlo_protos
    assert a.environment == b.environment and a.warnings == b.warnings and a.host == b.host


@pytest.mark.parametrize("trace", [TPU, MI300X, V100])
def test_cache_round_trip_gives_identical_tables(shared_traces, cache_dir, trace):
    f = shared_traces / trace
    read = read_xplane(f)
    assert table_cache.get(f) is None
    assert table_cache.put(f, read)
    _same_trace_data(table_cache.get(f), read)


def test_cpu_sample_round_trip(sample_traces, cache_dir):
    f = next(sample_traces.glob("sharded/plugins/profile/*/*.xplane.pb"))
    read = read_xplane(f)
    assert table_cache.put(f, read)
    _same_trace_data(table_cache.get(f), read)


def test_changed_file_is_a_miss(shared_traces, cache_dir, tmp_path):
    f = tmp_path / "h.xplane.pb"
    shutil.copyfile(shared_traces / MI300X, f)
    assert table_cache.put(f, read_xplane(f))
    assert table_cache.get(f) is not None
    f.write_bytes(f.read_bytes())  # same content, new mtime
    import os

    os.utime(f, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert table_cache.get(f) is None


def _alone_where_the_pool_cannot_fork(request) -> bool:
    """Run this test again in a fresh interpreter when this one cannot fork (JAX or another threaded runtime
    was loaded by an earlier test): the pool's workers then start from a fork server and would not see the
    test's monkeypatches. True when it ran there (and passed); the caller returns."""
    from traceview.runtime.forked import fork_is_safe

    if fork_is_safe():
        return False
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", request.node.nodeid],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return True


def _analyze_json(path, *flags) -> str:
    out = Path(str(path)).parent / f"out{abs(hash(flags))}.json"
    assert main(["analyze", str(path), "--format", "json", "-o", str(out), *flags]) == 0
    table_cache.flush()  # the entry is written in the background
    return out.read_text()


def test_output_identical_without_cache_cold_and_warm(shared_traces, cache_dir, tmp_path):
    f = tmp_path / "h.xplane.pb"
    shutil.copyfile(shared_traces / TPU, f)
    plain = _analyze_json(f, "--no-cache")
    assert not cache_dir.exists() or not list(cache_dir.glob("*" + table_cache.SUFFIX))
    cold = _analyze_json(f)
    assert len(list(cache_dir.glob("*" + table_cache.SUFFIX))) == 1
    warm = _analyze_json(f)
    assert plain == cold == warm


def test_corrupt_or_truncated_entry_is_a_miss(shared_traces, cache_dir, tmp_path):
    f = tmp_path / "h.xplane.pb"
    shutil.copyfile(shared_traces / MI300X, f)
    reference = _analyze_json(f, "--no-cache")
    _analyze_json(f)
    (entry,) = cache_dir.glob("*" + table_cache.SUFFIX)
    entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    assert table_cache.get(f) is None
    assert _analyze_json(f) == reference
    (entry,) = cache_dir.glob("*" + table_cache.SUFFIX)
    entry.write_bytes(b"not a zip at all")
    assert _analyze_json(f) == reference


def test_unwritable_cache_dir_is_a_miss(shared_traces, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("the cache dir cannot be created under a file")
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(blocker / "traceview"))
    f = tmp_path / "h.xplane.pb"
    shutil.copyfile(shared_traces / MI300X, f)
    assert not table_cache.put(f, read_xplane(f))
    assert _analyze_json(f) == _analyze_json(f, "--no-cache")


def test_size_limit_evicts_the_oldest(shared_traces, cache_dir, monkeypatch, tmp_path):
    files = []
    for k in range(3):
        f = tmp_path / f"h{k}.xplane.pb"
        shutil.copyfile(shared_traces / MI300X, f)
        files.append(f)
    data = read_xplane(files[0])
    assert table_cache.put(files[0], data)
    one = next(cache_dir.glob("*" + table_cache.SUFFIX)).stat().st_size
    monkeypatch.setenv("TRACEVIEW_CACHE_MAX_MB", str(2.5 * one / 2**20))  # room for two entries
    for f in files[1:]:
        time.sleep(0.02)
        assert table_cache.put(f, data)
    assert len(list(cache_dir.glob("*" + table_cache.SUFFIX))) == 2
    assert table_cache.get(files[0]) is None and table_cache.get(files[2]) is not None
    monkeypatch.setenv("TRACEVIEW_CACHE_MAX_MB", "0")  # nothing fits: nothing kept
    f = tmp_path / "h9.xplane.pb"
    shutil.copyfile(shared_traces / MI300X, f)
    table_cache.put(f, data)
    assert table_cache.get(f) is None


# ------------------------------------------------------------------ hosts in parallel


def test_pool_and_serial_give_identical_output(pod, cache_dir):
    serial = _analyze_json(pod, "--no-cache", "--jobs", "1")
    pooled = _analyze_json(pod, "--no-cache", "--jobs", "2")
    cached = _analyze_json(pod, "--jobs", "2")
    warm = _analyze_json(pod)
    assert serial == pooled == cached == warm
    assert sorted(json.loads(serial)["source"]["hosts"]) == ["hostA", "hostB", "hostC"]


def _peak_rows(peaks) -> list[dict]:
    """Runtime peaks as comparable rows (every field, packed or not; the timeline's columns as lists)."""
    return [{**{k: v for k, v in vars(p).items() if k != "detail"}, "timeline": p.timeline.to_dict("list"),
             "timeline_dtypes": p.timeline.dtypes.to_dict(), "at_peak": p.at_peak} for p in peaks]


@pytest.mark.parametrize("jobs", [1, 2])
def test_allocator_peaks_reduced_with_the_hosts_equal_those_of_every_event_at_once(pod, cache_dir, jobs):
    """analyze reduces each host's allocator events to their peaks where it reads the host (a pool worker):
    the peaks, their order and the first event's time are those of one table of every file's events."""
    from traceview.hostreduce.memory_peaks import runtime_peaks
    from traceview.parsers.xspace.allocator_events import read_allocator_events
    from traceview.trace.read import runtime_memory

    frames = [read_allocator_events(f) for f in sorted(pod.glob("*.xplane.pb"))]
    assert all(len(frame) for frame in frames)
    everything = pd.concat(frames, ignore_index=True)
    expected = runtime_peaks(everything)
    assert len({p.host for p in expected}) == 3
    opts = ReadOptions(cache=False, jobs=jobs, keep_ops=False, allocator_events=True)
    profile = load_profile(pod, options=opts)
    memory = [part.memory for part in profile.parts]
    assert len(memory) == 3 and all(m is not None for m in memory)
    assert [sum(p.events for p in m.peaks) for m in memory] == [len(f) for f in frames]
    peaks, first = runtime_memory(profile)
    assert _peak_rows(peaks) == _peak_rows(expected)
    assert first == int(everything["time_ps"].min())
    plain = load_profile(pod, options=ReadOptions(cache=False, jobs=jobs))
    assert all(part.memory is None for part in plain.parts)   # not asked for: the memory view reads the files
    assert _peak_rows(runtime_memory(plain)[0]) == _peak_rows(expected)


def test_merged_peaks_keep_the_order_of_one_table_and_refuse_a_host_split_over_files(shared_traces):
    """Hosts given out of order come out in the order of one table; two files holding one host's allocator
    give no merged peaks (only their events together tell its peak)."""
    from traceview.hostreduce.memory_peaks import host_peaks, merged_peaks, runtime_peaks
    from traceview.parsers.xspace.allocator_events import read_allocator_events

    events = read_allocator_events(shared_traces / MI300X)
    assert events["memory"].nunique() > 1
    named = [events.assign(host=pd.Categorical([h] * len(events))) for h in ("zeta", "alpha", "mid")]
    merged = merged_peaks([host_peaks(frame) for frame in named])
    assert merged is not None and [p.host for p in merged][0] == "alpha"
    assert _peak_rows(merged) == _peak_rows(runtime_peaks(pd.concat(named, ignore_index=True)))
    half = len(events) // 2
    split = [events.iloc[:half].reset_index(drop=True), events.iloc[half:].reset_index(drop=True)]
    assert merged_peaks([host_peaks(frame) for frame in split]) is None


def test_allocator_events_from_the_table_cache_equal_a_read_of_the_files(pod, cache_dir, monkeypatch, request):
    """A host read from the table cache brings its allocator events from the cache too (no read of its file
    for the memory view): the same peaks as read from the files, and the same analyze output."""
    if _alone_where_the_pool_cannot_fork(request):
        return
    from traceview.parsers.xspace import allocator_events
    from traceview.trace.read import runtime_memory

    files = sorted(str(f) for f in pod.glob("*.xplane.pb"))
    expected = {f: allocator_events.read_allocator_events(Path(f)) for f in files}
    assert all(len(frame) for frame in expected.values())
    plain = _analyze_json(pod, "--no-cache")
    read_now = runtime_memory(load_profile(pod, options=ReadOptions(cache=False, jobs=1)))
    cold = _analyze_json(pod)                           # reads the files, stores tables and allocator events
    assert len(list(cache_dir.glob("*" + table_cache.ALLOCATOR_SUFFIX))) == 3
    for f in files:
        pd.testing.assert_frame_equal(table_cache.get_allocator(f), expected[f], check_exact=True)

    def no_read(*args, **kwargs):
        raise AssertionError("allocator events read from the file on a cache hit")
    with monkeypatch.context() as patch:
        patch.setattr(allocator_events, "read_allocator_events", no_read)
        profile = load_profile(pod, options=ReadOptions(keep_ops=False, allocator_events=True))
        peaks, first = runtime_memory(profile)
        assert _peak_rows(peaks) == _peak_rows(read_now[0]) and first == read_now[1]
        warm = _analyze_json(pod)
    assert plain == cold == warm

    # tables cached before their allocator events were (an older entry): read from the file once, then kept
    for entry in cache_dir.glob("*" + table_cache.ALLOCATOR_SUFFIX):
        entry.unlink()
    profile = load_profile(pod, options=ReadOptions(keep_ops=False, allocator_events=True))
    assert [sum(p.events for p in part.peaks) for part in (p.memory for p in profile.parts)] == \
        [len(expected[f]) for f in profile.source.files]
    table_cache.flush()
    assert len(list(cache_dir.glob("*" + table_cache.ALLOCATOR_SUFFIX))) == 3


def test_allocator_entry_round_trips_strings_none_and_empty(tmp_path, cache_dir):
    from traceview.parsers.xspace.allocator_events import empty_allocator_frame

    f = tmp_path / "h.xplane.pb"
    f.write_bytes(b"x")
    empty = empty_allocator_frame()
    assert table_cache.put_allocator(f, empty)
    pd.testing.assert_frame_equal(table_cache.get_allocator(f), empty, check_exact=True)
    frame = pd.DataFrame({"host": pd.Categorical(["h", "h", "h"]), "time_ps": [3, 1, 2],
                          "tf_op": pd.Series(["dot", None, "é\udc80"], dtype=object),
                          "shape": pd.Series([None, None, None], dtype=object)})
    assert table_cache.put_allocator(f, frame)
    got = table_cache.get_allocator(f)
    pd.testing.assert_frame_equal(got, frame, check_exact=True)
    assert got["tf_op"][1] is None and got["shape"][0] is None
    assert not table_cache.put_allocator(f, frame.assign(tf_op=pd.Series([1, "a", None], dtype=object)))
    entry = table_cache.entry_path(f).with_suffix(table_cache.ALLOCATOR_SUFFIX)
    entry.write_bytes(entry.read_bytes()[:-5])        # truncated: a miss, and removed
    assert table_cache.get_allocator(f) is None and not entry.exists()


@pytest.mark.parametrize("jobs", [1, 2])
def test_host_threads_cut_where_read_equal_the_run_cut_in_the_parent(pod, cache_dir, jobs):
    """Each host's threads are cut into interval sets where it is read; the idle causes from them equal those
    from every host's events cut at once."""
    import dataclasses

    from traceview.advice.idle import idle_causes
    from traceview.hostreduce.activity import merge_activity

    profile = load_profile(pod, options=ReadOptions(jobs=jobs, cache=False))
    activity = merge_activity([p.ops.activity for p in profile.parts])
    assert activity.hosts is not None and set(activity.hosts) == {"hostA", "hostB", "hostC"}
    assert any(activity.hosts.values())
    a = idle_causes(activity, profile.all_host_events())
    b = idle_causes(dataclasses.replace(activity, hosts=None), profile.all_host_events())
    assert a.causes == b.causes and a.evidence == b.evidence and a.feeding_threads == b.feeding_threads
    assert sum(a.causes.values()) == a.idle_ps > 0
    pd.testing.assert_frame_equal(a.per_device, b.per_device)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_pods_kept_rows_wait_on_disk_with_identical_output(pod, cache_dir, monkeypatch, jobs):
    """`analyze` keeps no op table: each host's kept rows and device intervals are moved to the run's spill
    file as the host comes in (memory maps, dropped from the process after use); the output is the same
    byte for byte as with every array in memory."""
    profile = load_profile(pod, options=ReadOptions(jobs=jobs, cache=False, keep_ops=False))
    kept = [p.ops for p in profile.parts if p.ops.kept_start.size]
    assert kept and all(spilled(p.kept_start) for p in kept)
    assert all(spilled(d.busy[0]) for p in profile.parts for d in p.ops.activity.devices.values())
    on_disk = _analyze_json(pod, "--no-cache", "--jobs", str(jobs))
    monkeypatch.setenv("TRACEVIEW_NO_SPILL", "1")
    in_memory = _analyze_json(pod, "--no-cache", "--jobs", str(jobs))
    assert on_disk == in_memory and json.loads(on_disk)["summary"]["idle_causes"]


FORKED_EQUALS_ONE = """
import dataclasses, json, sys
import pandas as pd
from traceview.advice.view import advice_report
from traceview.analysis.build import build_analysis
from traceview.render.record import analysis_json
from traceview.memory.view import memory_from_analysis
from traceview.runtime import forked
from traceview.trace.read import ReadOptions, load_profile

profile = load_profile(sys.argv[1], options=ReadOptions(jobs=2, cache=False, keep_ops=False))
assert profile.jobs == 2 and forked._can_fork()              # the measures below do fork
one = dataclasses.replace(profile, jobs=1)
a, b = build_analysis(profile), build_analysis(one)
assert a.run_ops.jobs == 2 and b.run_ops.jobs == 1
assert json.dumps(analysis_json(a)) == json.dumps(analysis_json(b))
x, y = advice_report(a), advice_report(b)
assert x.idle.causes == y.idle.causes and x.idle.evidence == y.idle.evidence and sum(x.idle.causes.values())
pd.testing.assert_frame_equal(x.idle.per_device, y.idle.per_device)
pd.testing.assert_frame_equal(x.idle.per_step, y.idle.per_step)
pd.testing.assert_frame_equal(x.stragglers.steps, y.stragglers.steps)
m, n = memory_from_analysis(a).memories, memory_from_analysis(b).memories
assert len(m) == len(n) >= 2 and [p.device for p in m] == [p.device for p in n]
for p, q in zip(m, n):
    assert (p.peak_bytes, p.peak_time_ps, p.at_peak) == (q.peak_bytes, q.peak_time_ps, q.at_peak)
    pd.testing.assert_frame_equal(p.timeline, q.timeline)
assert forked._can_fork()
print("same")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork_map forks on Linux only")
def test_a_pods_advice_measured_in_forked_processes_equals_one_process(pod, cache_dir):
    """The per-chunk measures of the analysis, the idle causes (device by device), the stragglers (host by
    host) and the allocators' peaks computed in two forked processes equal those of one. In a fresh
    interpreter: this one may hold threads under which fork_map rightly declines to fork."""
    done = subprocess.run([sys.executable, "-c", FORKED_EQUALS_ONE, str(pod)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "same"


def test_two_files_of_one_host_have_their_threads_cut_together(shared_traces, cache_dir, tmp_path):
    """A host written twice (a file and its gzip copy): its threads cannot be cut file by file, so `analyze`
    (which keeps no host events) reads them again; the idle causes equal those of a read that kept them."""
    import gzip

    from traceview.advice.view import advice_report
    from traceview.analysis.build import build_analysis

    run = tmp_path / "dup" / "plugins" / "profile" / "r1"
    run.mkdir(parents=True)
    raw = (shared_traces / MI300X).read_bytes()
    (run / "hostA.xplane.pb").write_bytes(raw)
    (run / "hostA.xplane.pb.gz").write_bytes(gzip.compress(raw))
    lean = load_profile(run, options=ReadOptions(jobs=1, cache=False, keep_ops=False))
    full = load_profile(run, options=ReadOptions(jobs=1, cache=False))
    assert lean.kept is None and not full.kept.host_events.empty
    a, b = advice_report(build_analysis(lean)).idle, advice_report(build_analysis(full)).idle
    assert a.causes == b.causes and a.evidence == b.evidence and sum(a.causes.values()) == a.idle_ps > 0
    assert a.feeding_threads and a.feeding_threads == b.feeding_threads


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_broken_host_is_a_warning_naming_it(pod, cache_dir, jobs):
    (pod / "hostB.xplane.pb").write_bytes(b"\x0a\x05garbage")
    profile = load_profile(pod, options=ReadOptions(cache=False, jobs=jobs))
    assert profile.source.hosts == ["hostA", "hostC"]
    assert any("hostB" in w and "hostB.xplane.pb" in w for w in profile.warnings)


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_internal_error_on_one_host_is_a_warning(pod, cache_dir, monkeypatch, jobs, request):
    if jobs > 1 and _alone_where_the_pool_cannot_fork(request):
        return
    import traceview.parsers.xspace.reader as xplane

    real = xplane.read_xplane

    def flaky(path, host=None):
        if Path(path).name.startswith("hostA"):
            raise ZeroDivisionError("a bug")
        return real(path, host)

    monkeypatch.setattr(xplane, "read_xplane", flaky)  # the pool's forked workers inherit it
    profile = load_profile(pod, options=ReadOptions(cache=False, jobs=jobs))
    assert profile.source.hosts == ["hostB", "hostC"]
    (warning,) = [w for w in profile.warnings if "hostA" in w]
    assert "internal error" in warning and "ZeroDivisionError" in warning


def test_every_host_broken_is_a_user_error(pod, cache_dir):
    for f in pod.glob("*.xplane.pb"):
        f.write_bytes(b"")
    with pytest.raises(UserError, match="none of the 3 trace files"):
        load_profile(pod, options=ReadOptions(cache=False, jobs=2))


def test_bad_jobs_value(pod, cache_dir, capsys):
    assert main(["analyze", str(pod), "--jobs", "0"]) == 2
    assert "--jobs" in capsys.readouterr().err


# ------------------------------------------------------------------------- Dask


@pytest.mark.slow
def test_dask_local_cluster_equals_local(pod, cache_dir, monkeypatch):
    distributed = pytest.importorskip("distributed")
    (pod / "hostB.xplane.pb").write_bytes(b"")  # a broken host: the same warning either way
    monkeypatch.chdir(pod.parent)  # a relative path: the workers get absolute ones, the output names it as given
    local = _analyze_json(pod.name, "--no-cache")
    assert "hostB" in local
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        assert _analyze_json(pod.name, "--no-cache", "--dask", cluster.scheduler_address) == local
        # with the cache: the workers send each host's allocator events too, stored here beside its tables
        assert _analyze_json(pod.name, "--dask", cluster.scheduler_address) == local
        table_cache.flush()
        assert len(list(cache_dir.glob("*" + table_cache.ALLOCATOR_SUFFIX))) == 2
        monkeypatch.setenv("TRACEVIEW_DASK", cluster.scheduler_address)
        assert _analyze_json(pod.name, "--no-cache") == local


def _pretend_eight_cores() -> None:
    from traceview.parsers.native import loader as native_loader

    native_loader._cores = lambda: 8


def _split_threads() -> int:
    from traceview.parsers.native import loader as native_loader

    return native_loader.split_threads()


@pytest.mark.slow
def test_dask_workers_split_lines_over_their_share_of_the_machine(pod, cache_dir):
    """Two workers of two threads on one (8-core) machine: four hosts may be read at once there, so
    each reading process splits a large line over 8 / 4 = 2 threads, not over all 8."""
    distributed = pytest.importorskip("distributed")
    from traceview.trace import hosts

    paths = sorted(str(p) for p in pod.glob("*.xplane.pb"))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)
        assert hosts._readers_by_machine(client) == {"127.0.0.1": 4}
        client.run(_pretend_eight_cores)
        assert set(client.run(_split_threads).values()) == {8}   # before any reading: every core
        readers = hosts._readers_by_machine(client)
        futures = [client.submit(hosts._read_on_dask_worker, path, None, False, readers, workers=[address], pure=False)
                   for path, address in zip(paths, client.scheduler_info()["workers"])]  # one task on each worker
        assert [f.result().error for f in futures] == [None, None]
        assert set(client.run(_split_threads).values()) == {2}
        results = hosts.read_hosts(paths, dask=client, keep_ops=False)   # the whole way, every host
        assert [r.error for r in results] == [None] * len(paths)
        # workers on this machine see the spill folder: they write their hosts' arrays there themselves
        from traceview.hostreduce.spill import RowSpill

        spill = RowSpill()
        try:
            results = hosts.read_hosts(paths, dask=client, keep_ops=False, spill=spill)
            assert all(r.spilled is not None for r in results)
            assert all(spilled(r.part.ops.kept_start) for r in results if r.part.ops.kept_start.size)
        finally:
            spill.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_dask_scheduler_and_worker_processes_equal_local(pod, cache_dir, tmp_path):
    pytest.importorskip("distributed")
    local = _analyze_json(pod, "--no-cache")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [subprocess.Popen([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port",
                               str(port), "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for k in range(2):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "dask", "worker", address, "--nthreads", "1", "--no-dashboard",
                 "--local-directory", str(tmp_path / f"w{k}")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from distributed import Client

        with Client(address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=60)
        assert _analyze_json(pod, "--no-cache", "--dask", address) == local
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def test_unreachable_dask_scheduler_is_a_user_error(pod, cache_dir, capsys):
    pytest.importorskip("distributed")
    port = _free_port()
    assert main(["analyze", str(pod), "--no-cache", "--dask", f"tcp://127.0.0.1:{port}"]) == 2
    assert "--dask" in capsys.readouterr().err


def test_trace_data_with_unknown_fields_is_not_stored(shared_traces, cache_dir):
    """A field added to TraceData later must not be dropped silently by the cache."""
    from dataclasses import dataclass

    from traceview.parsers.tables.trace_data import TraceData

    @dataclass
    class Wider(TraceData):
        memory: int = 0

    f = shared_traces / MI300X
    assert not table_cache.put(f, Wider(**vars(read_xplane(f)), memory=1))
    assert table_cache.get(f) is None


def test_many_threads_use_a_fork_server(pod, cache_dir, monkeypatch):
    """From a process with many threads (the dashboard) the pool does not fork; the output is the same."""
    import threading

    from traceview.runtime.pool import start_method as _start_method

    expected = load_profile(pod, options=ReadOptions(cache=False, jobs=1))
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr("traceview.runtime.forked.threaded_runtime", lambda: None)  # JAX run by other tests
    assert _start_method() == "fork"
    monkeypatch.setattr(threading, "active_count", lambda: 6)  # e.g. a Streamlit server
    assert _start_method() == "forkserver"
    got = load_profile(pod, options=ReadOptions(cache=False, jobs=2))
    pd.testing.assert_frame_equal(got.op_executions(), expected.op_executions())
    assert got.source.hosts == expected.source.hosts


@pytest.mark.slow
def test_a_script_without_a_main_guard_reads_hosts_in_a_pool_after_running_jax(pod, cache_dir, tmp_path):
    """The way people write a quick script: JAX used, then traceview.load with a pool, at top level and with
    no ``if __name__ == "__main__"``. Nothing forks after JAX started: the fork server re-runs the script, the
    pool breaks, and the hosts are read in this process instead (with a warning): the same tables."""
    pytest.importorskip("jax")
    script = tmp_path / "quick_look.py"
    script.write_text(
        "import sys\n"
        "import jax.numpy as jnp\n"
        "jnp.ones(4).sum().block_until_ready()\n"
        "from traceview.trace.read import ReadOptions, load_profile\n"
        "two = load_profile(sys.argv[1], options=ReadOptions(cache=False, jobs=2))\n"
        "one = load_profile(sys.argv[1], options=ReadOptions(cache=False, jobs=1))\n"
        "print(two.op_executions().equals(one.op_executions()), len(two.source.hosts),\n"
        "      len(two.warnings) == len(one.warnings))\n"
    )
    out = subprocess.run([sys.executable, str(script), str(pod)], capture_output=True, text=True, timeout=240,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "3", "True"]


def test_a_program_that_ran_jax_reads_hosts_in_a_fork_server_without_forking_itself(pod, cache_dir, tmp_path):
    """After JAX started, the pool's workers come from a fork server (no os.fork of this multithreaded
    process: JAX's fork warning would be an error here) and give the tables one process gives."""
    pytest.importorskip("jax")
    script = tmp_path / "guarded.py"
    script.write_text(
        "import sys\n"
        "def main():\n"
        "    import jax.numpy as jnp\n"
        "    jnp.ones(4).sum().block_until_ready()\n"
        "    from traceview.runtime.pool import start_method as _start_method\n"
        "    from traceview.trace.read import ReadOptions, load_profile\n"
        "    two = load_profile(sys.argv[1], options=ReadOptions(cache=False, jobs=2))\n"
        "    one = load_profile(sys.argv[1], options=ReadOptions(cache=False, jobs=1))\n"
        "    print(_start_method(), two.op_executions().equals(one.op_executions()), len(two.source.hosts))\n"
        "if __name__ == '__main__':\n"
        "    main()\n"
    )
    out = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", str(script), str(pod)],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["forkserver", "True", "3"]


def test_capture_time_without_parsing_the_events(shared_traces, sample_traces):
    """Picking the newest run reads only the Task Environment plane: same time as a full parse."""
    from traceview.parsers.xspace.file import capture_time, file_capture_time, load_xspace

    files = sorted(shared_traces.rglob("*.xplane.pb")) + sorted(sample_traces.rglob("*.xplane.pb"))
    times = [(file_capture_time(f), capture_time(load_xspace(f))) for f in files]
    assert all(light == full for light, full in times)
    assert any(light is not None for light, _ in times)  # some traces do say when they were taken


def test_capture_time_of_broken_files_is_none(tmp_path):
    from traceview.parsers.xspace.file import file_capture_time

    for k, data in enumerate([b"", b"\x0a\xff\xff\xff\xff\x0f", b"\x0a\x05\x12\x10Task", b"\xff" * 12]):
        f = tmp_path / f"h{k}.xplane.pb"
        f.write_bytes(data)
        assert file_capture_time(f) is None
