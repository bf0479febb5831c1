"""Op occurrences and times agree with independent references.

* Every real xplane: XProf's own HLO op stats tool (``hlo_stats``), per
  (program id, op): occurrences equal, total and self time within 0.5%.
* CPU traces, for which XProf's HLO op stats report nothing: the trace
  viewer JSON (``*.trace.json.gz``) the JAX profiler itself writes next to the
  xplane, per (module, op).
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

from traceview.parsers.tables.conventions import as_uint64
from traceview.parsers.xspace.reader import read_xplane

TOLERANCE = 0.005

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
XPLANES = sorted(SHARED.rglob("*.xplane.pb")) if SHARED.is_dir() else []


def _xprof_hlo_stats(path: Path) -> list[dict]:
    raw_to_tool_data = pytest.importorskip("xprof.convert.raw_to_tool_data")
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(path)], "hlo_stats", {"use_saved_result": False})
    if not data:
        return []
    table = json.loads(data)
    ids = [c["id"] for c in table["cols"]]
    return [dict(zip(ids, (cell.get("v") for cell in row["c"]))) for row in table["rows"]]


def _ours(path: Path) -> dict[tuple[str, str], tuple[int, float, float]]:
    ops = read_xplane(path).ops
    ops = ops[ops["program_id"] != -1]
    grouped = ops.groupby(["program_id", "op"], observed=True).agg(
        n=("duration_ps", "size"), total=("duration_ps", "sum"), self_=("self_ps", "sum"))
    return {(str(as_uint64(int(pid))), str(op)): (int(r.n), r.total / 1e6, r.self_ / 1e6)
            for (pid, op), r in grouped.iterrows()}


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TOLERANCE * abs(b) + 1e-3  # +1 ns: XProf rounds to ns


@pytest.mark.skipif(not XPLANES, reason=f"real traces not available in {SHARED}")
@pytest.mark.parametrize("rel", [str(p.relative_to(SHARED)) for p in XPLANES])
def test_hlo_op_stats_match_xprof(rel, tmp_path):
    # XProf caches its result beside the file it reads: give it a private copy.
    path = tmp_path / Path(rel).name
    shutil.copy(SHARED / rel, path)
    rows = _xprof_hlo_stats(path)
    if not rows:
        pytest.skip(f"XProf's hlo_stats reports no HLO ops for {rel} (e.g. a TensorFlow trace without XLA)")
    ours = _ours(path)
    theirs = {(str(r["program_id"]), str(r["hlo_op_name"])): r for r in rows}
    # XProf leaves out a command buffer's kernels, or keeps them on its pseudo-op (command_buffer_1);
    # traceview puts each on its instruction (tests/integration/test_nvidia_gpu.py checks those against the
    # same program run without command buffers). Where XProf has the pseudo-op, those instructions' kernels
    # and times add up to it.
    placed = set(ours) - set(theirs)
    buffers = set(theirs) - set(ours)
    assert all(op.startswith("command_buffer") for _, op in buffers), buffers
    for program in {p for p, _ in buffers}:
        mine = [ours[k] for k in placed if k[0] == program]
        xprof = [theirs[k] for k in buffers if k[0] == program]
        assert sum(n for n, _, _ in mine) == sum(int(r["occurrences"]) for r in xprof), program
        assert _close(sum(t for _, t, _ in mine), sum(float(r["total_time"]) for r in xprof)), program
    for key, r in theirs.items():
        if key in buffers:
            continue
        n, total, self_ = ours[key]
        assert n == int(r["occurrences"]), key
        assert _close(total, float(r["total_time"])), (key, total, r["total_time"])
        assert _close(self_, float(r["total_self_time"])), (key, self_, r["total_self_time"])


_CAPTURE = textwrap.dedent("""
    import sys, jax, jax.numpy as jnp

    @jax.jit
    def step(x, w1, w2):
        def body(i, h):
            return jnp.tanh(h @ w1) @ w2
        h = jax.lax.fori_loop(0, 3, body, x)
        return (h * h).sum()

    x = jnp.ones((64, 128)); w1 = jnp.ones((128, 128)) * 0.01; w2 = jnp.ones((128, 128)) * 0.01
    step(x, w1, w2).block_until_ready()
    with jax.profiler.trace(sys.argv[1]):
        for i in range(3):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                step(x, w1, w2).block_until_ready()
""")


@pytest.mark.slow
def test_cpu_trace_matches_profiler_trace_json(tmp_path):
    pytest.importorskip("jax")
    script = tmp_path / "capture.py"
    script.write_text(_CAPTURE)
    subprocess.run([sys.executable, str(script), str(tmp_path / "log")], check=True, timeout=300,
                   capture_output=True, env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    xplane = next((tmp_path / "log").rglob("*.xplane.pb"))
    trace_json = next((tmp_path / "log").rglob("*.trace.json.gz"))
    events = json.loads(gzip.decompress(trace_json.read_bytes()))["traceEvents"]
    ref: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    steps = set()
    for e in events:
        args = e.get("args", {})
        if e.get("ph") == "X" and "hlo_op" in args:
            ref[(args["hlo_module"], args["hlo_op"])][0] += 1
            ref[(args["hlo_module"], args["hlo_op"])][1] += float(e.get("dur", 0))
        if e.get("ph") == "X" and "step_num" in args:
            steps.add(int(args["step_num"]))
    assert ref, "the JAX profiler wrote no hlo_op events"
    td = read_xplane(xplane)
    got = td.ops.groupby(["module", "op"], observed=True)["duration_ps"].agg(["size", "sum"])
    ours = {(str(m), str(o)): (int(r["size"]), r["sum"] / 1e6) for (m, o), r in got.iterrows()}
    assert set(ours) == set(ref)
    for key, (n, total) in ref.items():
        assert ours[key][0] == n, key
        assert _close(ours[key][1], total), (key, ours[key][1], total)
    assert set(td.steps["step"]) == steps == {0, 1, 2}
    assert (td.ops.loc[td.ops["module"] == "jit_step", "step"] >= 0).all()
