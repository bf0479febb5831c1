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

