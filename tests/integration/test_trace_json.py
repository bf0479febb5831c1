"""Trace-event JSON (parsers/trace_json/reader.py) against independent readings of the same run.

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
    xplane_ops, json_ops = _per_op(from_xplane.op_executions()), _per_op(from_json.op_executions())
    assert xplane_ops and set(json_ops) == set(xplane_ops)
    for key, (n, total) in xplane_ops.items():
        assert json_ops[key][0] == n, key
        assert json_ops[key][1] == pytest.approx(total, rel=0.01), key
    # Independently: every event carrying an hlo_op arg is one op row.
    with gzip.open(run / "perfetto_trace.json.gz") as fh:
        events = json.load(fh)["traceEvents"]
    assert len(from_json.op_executions()) == sum(1 for e in events if "hlo_op" in e.get("args", {}))
    # The same steps (host step annotations), the same host threads.
    assert from_json.steps["step"].tolist() == from_xplane.steps["step"].tolist()
    threads = [set(p.all_host_events()["thread"].astype(str)) for p in (from_json, from_xplane)]
    assert threads[0] == threads[1]


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
    executions = profile.op_executions()
    got = Counter({d.rsplit("/", 1)[-1]: n for d, n in executions.groupby("device", observed=True).size().items()})
    assert got == expected
    # The JSON's op table is the xplane's: ops, modules, program ids and device-clock times alike.
    xplane = load_profile(shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb", options=NO_CACHE)
    for column in ("op", "module", "program_id", "category", "duration_ps", "self_ps", "step"):
        assert executions[column].astype(str).tolist() == xplane.op_executions()[column].astype(str).tolist(), column
    assert len(profile.steps) == len(xplane.steps) > 0
    assert profile.all_host_events()["thread"].astype(str).str.startswith("main/").any()


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


# ---------------------------------------------------------------- hostile input, on a real H200 trace

H200_JSON = "h200/decode/plugins/profile/2026_11_28_19_49_02/vm.trace.json.gz"


def _h200_events(shared_traces: Path) -> dict:
    return json.loads(gzip.decompress((shared_traces / H200_JSON).read_bytes()))


def _traceview(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceview", *argv, "--no-cache"], capture_output=True, text=True,
                          timeout=300)


def test_lone_surrogates_in_names_are_read_and_written_out(shared_traces: Path, tmp_path: Path) -> None:
    """`"op\\ud800x"` in hlo_op args, thread and event names: the ops keep their place (U+FFFD for the lone
    surrogate) and every output can be written as UTF-8."""
    from traceview.parsers.trace_json.reader import read_trace_json

    doc = _h200_events(shared_traces)
    renamed = 0
    for event in doc["traceEvents"]:
        args = event.get("args")
        if isinstance(args, dict) and "hlo_op" in args:
            args["hlo_op"] = "op\ud800x"
            renamed += 1
        elif event.get("name") == "thread_name":
            event["args"]["name"] += "\udc00"      # a stream stays a stream: "Stream #..." + the surrogate
    path = tmp_path / "surrogates.trace.json"
    path.write_text(json.dumps(doc))          # ASCII: the lone surrogates as \u escapes
    ops = read_trace_json(path).ops
    assert renamed and (ops["op"] == "op\ufffdx").sum() == renamed
    done = _traceview("analyze", str(path), "--format", "json")
    assert done.returncode == 0, done.stderr
    assert any(op["name"] == "op\ufffdx" for op in json.loads(done.stdout)["ops"])


def test_times_that_are_not_numbers_are_refused_not_read(shared_traces: Path, tmp_path: Path) -> None:
    """Every `ts` set to `true` read as a trace of 1 us steps was garbage: it is now one line, exit 2; a few
    such events are dropped with a warning."""
    from traceview.parsers.trace_json.reader import read_trace_json

    doc = _h200_events(shared_traces)
    timed = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    for event in timed[:10]:
        event["ts"] = True
    few = tmp_path / "few.trace.json"
    few.write_text(json.dumps(doc))
    data = read_trace_json(few)
    assert any("dropped 10 event(s)" in w for w in data.warnings)
    for event in timed:
        event["ts"] = True
    every = tmp_path / "every.trace.json"
    every.write_text(json.dumps(doc))
    done = _traceview("analyze", str(every))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert str(every) in done.stderr and "not a JSON number" in done.stderr


@pytest.mark.parametrize("kind", ["gpu", "host"])
def test_many_threads_are_read_in_one_block_each(kind: str, tmp_path: Path) -> None:
    """20,000 streams (or host threads) of one event each: one row per event, each on its own line, with
    the self times of a line of its own (the read that took 95 s for 100,000 is a block of rows per device)."""
    from tests.support.fuzz_hostile import threads
    from traceview.parsers.trace_json.reader import read_trace_json

    _, data, _ = threads(20_000, kind)
    path = tmp_path / f"{kind}.trace.json"
    path.write_bytes(data)
    ops = read_trace_json(path).ops
    assert len(ops) == 20_000 and ops["line"].nunique() == 20_000
    assert (ops["self_ps"] == ops["duration_ps"]).all()
    assert sorted(ops["start_ps"]) == [t * 1_000_000 for t in range(20_000)]


def test_a_gzip_bomb_of_events_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    """1.4 MB of gzip inflating to 450 MiB of minimal events (8.9 M): exit 2 naming the file, from the values
    counted in the text, before the decoder makes an object of them."""
    from tests.support.fuzz_hostile import event_bomb

    _, data, _ = event_bomb(8_900_000)
    path = tmp_path / "bomb.trace.json.gz"
    path.write_bytes(data)
    done = subprocess.run([sys.executable, "-c", (
        "import resource, sys\n"
        "from traceview.cli import main\n"
        "code = main(['analyze', sys.argv[1], '--no-cache'])\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
        "sys.exit(code)\n"), str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "values" in done.stderr and str(path) in done.stderr
    assert int(done.stdout.split()[-1]) * 1024 < 2 << 30    # the 450 MiB text and little more
