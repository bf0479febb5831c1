"""Trace-event JSON (parsers/trace_json.py) against independent readings of the same run.

* JAX's Perfetto JSON of the mlp_perfetto sample against the xplane of the same
  capture (both written by one ``jax.profiler.trace(..., create_perfetto_trace=True)``);
* a Chrome trace that XProf's own converter (the ``trace_viewer`` tool) makes from a
  real TPU serving xplane, its op rows counted independently with ``json``.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from traceview.parsers.discover import find_run, list_runs
from traceview.trace.read import ReadOptions, load_profile

NO_CACHE = ReadOptions(cache=False, jobs=1)


def _perfetto_run(sample_traces: Path) -> Path:
    return sample_traces / "mlp_perfetto" / "plugins" / "profile" / "mlp_perfetto"


def _per_op(ops) -> dict[tuple, tuple[int, int]]:
    """(device ordinal, module, op, step) -> (count, total duration ps); the host part of the device differs."""
    table = ops.assign(dev=ops["device"].astype(str).str.rsplit("/", n=1).str[-1])
    grouped = table.groupby(["dev", "module", "op", "step"], observed=True)["duration_ps"].agg(["size", "sum"])
    return {key: (int(n), int(total)) for key, (n, total) in grouped.iterrows()}


def test_perfetto_json_gives_the_xplanes_op_table(sample_traces: Path) -> None:
    run = _perfetto_run(sample_traces)
    from_xplane = load_profile(run / "localhost.xplane.pb", options=NO_CACHE)
    from_json = load_profile(run / "perfetto_trace.json.gz", options=NO_CACHE)
    xplane_ops, json_ops = _per_op(from_xplane.ops), _per_op(from_json.ops)
    assert xplane_ops and set(json_ops) == set(xplane_ops)
    for key, (n, total) in xplane_ops.items():
        assert json_ops[key][0] == n, key
        assert json_ops[key][1] == pytest.approx(total, rel=0.01), key
    # Independently: every event carrying an hlo_op arg is one op row.
    with gzip.open(run / "perfetto_trace.json.gz") as fh:
        events = json.load(fh)["traceEvents"]
    assert len(from_json.ops) == sum(1 for e in events if "hlo_op" in e.get("args", {}))
    # The same steps (host step annotations), the same host threads.
    assert from_json.steps["step"].tolist() == from_xplane.steps["step"].tolist()
    assert set(from_json.host_events["thread"].astype(str)) == set(from_xplane.host_events["thread"].astype(str))


def test_analyze_reads_the_perfetto_json_like_the_xplane(sample_traces: Path, tmp_path: Path) -> None:
    run = _perfetto_run(sample_traces)
    out = {}
    for name in ("localhost.xplane.pb", "perfetto_trace.json.gz"):
        proc = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(run / name), "--format", "json",
                               "--no-cache"], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        out[name] = json.loads(proc.stdout)
    xplane, perfetto = out["localhost.xplane.pb"], out["perfetto_trace.json.gz"]
    # Costs come from the dump beside the run for both: the same FLOPs per op.
    flops = {(o["module"], o["name"]): o["flops"] for o in xplane["ops"]}
    assert {(o["module"], o["name"]): o["flops"] for o in perfetto["ops"]} == flops
    assert any(f for f in flops.values())


def test_discovery_prefers_the_xplane_and_lists_json_runs(sample_traces: Path, tmp_path: Path) -> None:
    run = _perfetto_run(sample_traces)
    both = find_run(run)
    assert [f.name for f in both.files] == ["localhost.xplane.pb"] and both.format == "xplane"
    only_json = tmp_path / "logs" / "plugins" / "profile" / "r1"
    only_json.mkdir(parents=True)
    shutil.copy(run / "perfetto_trace.json.gz", only_json)
    shutil.copy(run / "perfetto_trace.json.gz", only_json / "worker0.trace.json.gz")
    (found,) = list_runs(tmp_path / "logs")
    # JAX writes <host>.trace.json.gz and perfetto_trace.json.gz with the same events: the host one is read.
    assert [f.name for f in found.files] == ["worker0.trace.json.gz"] and found.format == "trace-json"
    proc = subprocess.run([sys.executable, "-m", "traceview", "runs", str(tmp_path / "logs"), "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (listed,) = json.loads(proc.stdout)["runs"]
    assert listed["format"] == "trace-json" and listed["hosts"] == ["worker0"]


@pytest.fixture(scope="module")
def xprof_chrome_trace(shared_traces: Path, tmp_path_factory) -> Path:
    """tpu_inference_2.xplane.pb converted by XProf's trace viewer tool to a gzipped Chrome trace."""
    raw_to_tool_data = pytest.importorskip("xprof.convert.raw_to_tool_data")
    work = tmp_path_factory.mktemp("xprof_chrome")
    xplane = work / "tpu_inference_2.xplane.pb"
    shutil.copy(shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb", xplane)
    data, content_type = raw_to_tool_data.xspace_to_tool_data([str(xplane)], "trace_viewer",
                                                              {"use_saved_result": False})
    assert content_type == "application/json" and data
    out = work / "serving" / "tpu_inference_2.trace.json.gz"
    out.parent.mkdir()
    with gzip.open(out, "wt") as fh:
        fh.write(data if isinstance(data, str) else data.decode())
    return out


def _xla_op_events(path: Path) -> list[tuple[str, dict]]:
    """(device, event) for each event (complete or instant) on a TPU process's "XLA Ops" thread, straight
    from the JSON."""
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e["name"] == "thread_name"}
    return [(processes[e["pid"]].removeprefix("/device:"), e) for e in events
            if e.get("ph") in ("X", "i") and threads.get((e["pid"], e.get("tid"))) == "XLA Ops"
            and processes.get(e["pid"], "").startswith("/device:TPU:")]


def test_xprof_chrome_trace_op_counts(xprof_chrome_trace: Path, shared_traces: Path) -> None:
    profile = load_profile(xprof_chrome_trace.parent, options=NO_CACHE)
    expected = Counter(device for device, _ in _xla_op_events(xprof_chrome_trace))
    assert len(expected) == 4 and min(expected.values()) > 1000
    got = Counter({d.rsplit("/", 1)[-1]: n for d, n in profile.ops.groupby("device", observed=True).size().items()})
    assert got == expected
    # The JSON's op table is the xplane's: ops, modules, program ids and device-clock times alike.
    xplane = load_profile(shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb", options=NO_CACHE)
    for column in ("op", "module", "program_id", "category", "duration_ps", "self_ps", "step"):
        assert profile.ops[column].astype(str).tolist() == xplane.ops[column].astype(str).tolist(), column
    assert len(profile.steps) == len(xplane.steps) > 0
    assert profile.host_events["thread"].astype(str).str.startswith("main/").any()


def test_xprof_chrome_trace_analyzed_with_the_costs_it_reports(xprof_chrome_trace: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(xprof_chrome_trace), "--target", "v6e",
                           "--format", "json", "--no-cache"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    warnings = " ".join(record["warnings"])
    assert "the trace reports itself" in warnings
    # The bytes of the largest op are what its events report (bytes_accessed args), summed over devices.
    top = max(record["ops"], key=lambda o: o["self_time_us"])
    reported = [float(e["args"]["bytes_accessed"]) for _, e in _xla_op_events(xprof_chrome_trace)
                if e["name"] == top["name"]]
    assert len(reported) == top["occurrences"]
    assert top["bytes_accessed"] == pytest.approx(sum(reported), rel=1e-9) and top["bound"] == "memory"
