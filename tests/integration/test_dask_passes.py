"""A pod read on Dask: the analysis' per-host passes run on the workers that hold the hosts' parts
(trace.dask_parts), the outputs byte for byte those of one process, and the client measures no host."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from traceview.cache import tables as table_cache
from traceview.cli import main

pytestmark = pytest.mark.slow

# each host a different capture (their devices are named by the file, so every host's devices are its own)
HOSTS = {"hostA": "sharded", "hostB": "pipeline", "hostC": "host_bound", "hostD": "sharded"}


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as running:
        yield running


@pytest.fixture
def pod(sample_traces: Path, tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRACEVIEW_DASK", raising=False)
    run = tmp_path / "logs" / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    for host, sample in HOSTS.items():
        shutil.copyfile(next(sample_traces.glob(f"{sample}/plugins/profile/*/*.xplane.pb")), run / f"{host}.xplane.pb")
    return run


def _output(pod: Path, command: str, *flags: str) -> str:
    out = pod.parent / f"{command}{abs(hash(flags))}.json"
    assert main([command, str(pod), "--format", "json", "--no-cache", "-o", str(out), *flags]) == 0
    table_cache.flush()
    return out.read_text()


class _Count:
    """Calls of a function in this process (the Dask workers are other processes: theirs are not seen)."""

    def __init__(self, monkeypatch, module, name: str) -> None:
        self.calls = 0
        original = getattr(module, name)

        def counted(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)
        monkeypatch.setattr(module, name, counted)


def _held_tasks(client) -> int:
    """How many second-round tasks (trace.dask_parts) the cluster's scheduler has seen."""
    done = client.run_on_scheduler(lambda dask_scheduler: {k: v.state_counts["memory"]
                                                          for k, v in dask_scheduler.task_prefixes.items()})
    return done.get("run_held", 0)   # the prefix of trace.dask_parts._run_held


def test_passes_run_on_the_workers_and_outputs_equal_one_process(pod, cluster, monkeypatch):
    from distributed import Client

    from traceview.advice import idle
    from traceview.hostreduce import run_ops

    chunks = _Count(monkeypatch, run_ops, "_kept_rows")          # the kept rows' per-chunk measures
    devices = _Count(monkeypatch, idle, "_device_causes")        # the idle causes, device by device
    local = _output(pod, "analyze", "--jobs", "1")
    assert chunks.calls > 0 and devices.calls > 0                # one process measures every host itself
    chunks.calls = devices.calls = 0
    with Client(cluster) as client:
        before = _held_tasks(client)
        assert _output(pod, "analyze", "--dask", cluster.scheduler_address) == local
        assert _held_tasks(client) > before
    assert chunks.calls == 0 and devices.calls == 0              # ... and the Dask client none


@pytest.mark.parametrize("command", ["scopes", "parallelism", "memory"])
def test_other_commands_equal_one_process(pod, cluster, command):
    assert _output(pod, command, "--dask", cluster.scheduler_address) == _output(pod, command, "--jobs", "1")



class Piece:
    """A group's result that counts how many of its kind this process holds at once (each made or received
    from a worker counts, each let go counts off): what a caller gathering results holds."""

    live = 0
    most = 0

    def __init__(self, value: int) -> None:
        self.value = value
        Piece.live += 1
        Piece.most = max(Piece.most, Piece.live)

    def __del__(self) -> None:
        Piece.live -= 1

    def __reduce__(self):
        return Piece, (self.value,)


def _held_part(i: int) -> int:
    """A part held on a worker (here its number)."""
    return i


def _piece(group: list[int], held: list[int], scale: int) -> Piece:
    return Piece(scale * sum(held) + 1)


def _plus(a: Piece, b: Piece) -> Piece:
    return Piece(a.value + b.value)


def test_a_fold_adds_up_on_the_workers_and_the_caller_never_holds_every_result(cluster):
    """``PartWorkers.map(..., fold=)`` on Dask: the sum of every group's result, with the caller holding the
    running sum and one worker's sum at a time, not one result per group (a pod's thousands)."""
    from distributed import Client

    from traceview.trace.dask_parts import DaskParts

    n = 40
    with Client(cluster) as client:
        files = [f"host{i}" for i in range(n)]
        futures = {f: client.submit(_held_part, i, pure=False) for i, f in enumerate(files)}
        client.gather(list(futures.values()))
        holder = DaskParts(client, futures, own=False)
        holder.order = files
        groups = [[i] for i in range(n)]
        expected = sum(10 * i + 1 for i in range(n))
        Piece.live = Piece.most = 0
        [total] = holder.map(_piece, groups, 10, fold=_plus)
        assert total.value == expected
        assert Piece.most <= 3                   # the running sum, one worker's sum, their sum
        del total
        # without the fold every group's result comes to the caller at once: the count above can fail
        Piece.live = Piece.most = 0
        found = holder.map(_piece, groups, 10)
        assert [p.value for p in found] == [10 * i + 1 for i in range(n)]
        assert Piece.most == n
        assert holder.map(_piece, [], 10, fold=_plus) == []


def _in_memory(client) -> dict[str, int]:
    """Per task prefix, how many results the cluster's workers hold now."""
    def counted(dask_scheduler) -> dict[str, int]:
        out: dict[str, int] = {}
        for ts in dask_scheduler.tasks.values():
            if ts.state == "memory":
                out[ts.prefix.name] = out.get(ts.prefix.name, 0) + 1
        return out
    return client.run_on_scheduler(counted)


def test_the_workers_keep_only_the_held_parts_once_read(pod, cluster):
    """Once the caller has each host's result, the workers let the read task's pair (and the result in it) go
    and hold the parts alone, without the host's step spans summed up (folded by the caller)."""
    import time

    from distributed import Client

    from traceview.trace.hosts import read_hosts

    files = sorted(str(p) for p in pod.glob("*.xplane.pb"))
    with Client(cluster) as client:
        holders: list = []
        results = read_hosts(files, dask=client, keep_ops=False, hold=holders.append)
        assert [r.path for r in results] == files and all(r.part is not None for r in results)
        assert all(r.part.ops.activity.span_summary is not None for r in results)    # the caller's to fold
        deadline = time.monotonic() + 20
        while (_in_memory(client).get("read_and_hold", 0) or _in_memory(client).get("first", 0)) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        held = _in_memory(client)
        assert held.get("read_and_hold", 0) == 0 and held.get("first", 0) == 0
        assert held.get("second", 0) == len(files)
        parts = client.gather(list(holders[0].futures.values()))
        assert all(p.activity.span_summary is None and len(p.kept_start) for p in parts)
        del parts, holders
