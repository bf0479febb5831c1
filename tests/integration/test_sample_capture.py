"""The sample-trace capture script, checked with JAX's own XSpace reader.

The slow test re-captures the sharded sample into a temporary folder; the fast
tests check the committed samples under sample_traces/. References are
independent of traceview: jax.profiler.ProfileData reads the xplane, and the
HLO dumps are XLA's own text.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "sample_traces" / "capture.py"
SAMPLES = ("mlp", "transformer", "sharded", "fsdp", "tensor_parallel", "ring_attention", "pipeline", "moe", "mlp_repeat",
           "mlp_slow", "mlp_perfetto", "host_bound")
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter")


def _op_events(xplane: Path) -> tuple[list[dict], list[dict]]:
    """(HLO op events and "end: <op>" markers, step annotations) as dicts, via JAX's reader."""
    from jax.profiler import ProfileData

    ops, steps = [], []
    for plane in ProfileData.from_file(str(xplane)).planes:
        for line in plane.lines:
            for ev in line.events:
                st = {k: str(v) for k, v in ev.stats}
                if "hlo_op" in st or ev.name.startswith("end: "):
                    ops.append({"name": ev.name, **st})
                elif "step_num" in st:
                    steps.append({"name": ev.name, "duration_ns": ev.duration_ns, **st})
    return ops, steps


def _entry_instructions(hlo_text: str) -> dict[str, str]:
    """Instruction name -> opcode for the ENTRY computation of an HLO text dump."""
    entry = hlo_text[hlo_text.index("\nENTRY "):]
    entry = entry[: entry.index("\n}")]
    found = {}
    for m in re.finditer(r"^\s*(?:ROOT )?%([\w.\-]+) = .*?\s([a-z][\w\-]*)\(", entry, re.M):
        found[m.group(1)] = m.group(2)
    return found


def _instructions(hlo_text: str) -> set[str]:
    """Every instruction name of an HLO text dump (loop bodies' included)."""
    return set(re.findall(r"^\s*(?:ROOT )?%([\w.\-]+) = ", hlo_text, re.M))


def _check_sample(dest: Path, name: str) -> tuple[dict, str]:
    meta = json.loads((dest / "capture.json").read_text())
    xplane = dest / meta["xplane"]
    assert xplane == dest / "plugins" / "profile" / name / "localhost.xplane.pb"
    assert xplane.stat().st_size > 0

    after = [dest / f for f in meta["hlo_files"] if f.endswith(".cpu_after_optimizations.txt")]
    before = [dest / f for f in meta["hlo_files"] if f.endswith(".before_optimizations.txt")]
    assert len(after) == 1 and len(before) == 1, meta["hlo_files"]
    # The proto dumps of the same module sit beside the text ones.
    for f in after + before:
        assert f.with_name(f.name.removesuffix(".txt") + ".hlo.pb").stat().st_size > 0
    hlo = after[0].read_text()
    module = meta["traced_module"]
    assert hlo.startswith(f"HloModule {module},")

    events, steps = _op_events(xplane)
    ops = [e for e in events if "hlo_op" in e]
    assert ops, f"no events with hlo_op stats in {xplane}"
    # Each op's completion marker "end: <op>" is linked by flow id (_p -> _c);
    # traceview's reader relies on it for asynchronous CPU thunks.
    markers = {e["_c"]: e["name"] for e in events if "hlo_op" not in e}
    unmatched = [o["hlo_op"] for o in ops if markers.get(o["_p"]) != "end: " + o["hlo_op"]]
    # A marker can fall just outside the traced window when the session stops;
    # the reader then keeps the op's own end. Nearly all must link.
    assert len(unmatched) <= max(2, len(ops) // 50), unmatched
    # Every traced op belongs to the dumped module, with the dump's program id, and is an
    # instruction of its ENTRY computation or of a loop body (ring, pipeline schedule).
    program_id = int(after[0].name.split(".")[0].removeprefix("module_"))
    assert {(o["hlo_module"], int(o["program_id"])) for o in ops} == {(module, program_id)}
    entry = _entry_instructions(hlo)
    assert {o["hlo_op"] for o in ops} <= _instructions(hlo), {o["hlo_op"] for o in ops} - _instructions(hlo)

    # One "train" annotation per traced step, numbered 0..n-1.
    n_steps = len(meta["traced_step_times_s"])
    assert sorted(int(s["step_num"]) for s in steps if s["name"] == "train") == list(range(n_steps))
    # Each op of the ENTRY runs once per step per device (a loop body's once per iteration).
    n_dev = meta["device_count"]
    counts = Counter((o["hlo_op"], o["device_ordinal"]) for o in ops)
    assert {n for (op, _), n in counts.items() if op in entry} == {n_steps}
    assert all(n % n_steps == 0 for n in counts.values())
    assert {int(o["device_ordinal"]) for o in ops} == set(range(n_dev))

    assert meta["xla_cost_analysis"]["flops"] > 0
    return meta, hlo


@pytest.mark.slow
def test_capture_sharded_sample(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--only", "sharded"],
                   check=True, timeout=300)
    meta, hlo = _check_sample(tmp_path / "sharded", "sharded")
    assert meta["device_count"] == 8
    opcodes = set(_entry_instructions(hlo).values())
    for op in COLLECTIVES:
        assert op in opcodes, f"{op} missing from the optimized HLO"
    assert re.search(r"\sdot\(", hlo), "no dot in the optimized HLO"


@pytest.mark.parametrize("name", SAMPLES)
def test_committed_sample(name: str) -> None:
    pytest.importorskip("jax")
    dest = REPO / "sample_traces" / name
    if not (dest / "capture.json").exists():
        pytest.skip(f"{dest} has not been captured (run sample_traces/capture.py)")
    _, hlo = _check_sample(dest, name)
    assert re.search(r"\sdot\(", hlo)


def _check_mpmd_sample(dest: Path) -> dict:
    """The MPMD pipeline: one module per stage, each traced on its own device only, every ENTRY op of a stage's
    program run m times per step (once per microbatch), the stages' FLOPs by hand."""
    meta = json.loads((dest / "capture.json").read_text())
    cfg = meta["config"]
    p, m = cfg["stages"], cfg["microbatches"]
    after = sorted(dest / f for f in meta["hlo_files"] if f.endswith(".cpu_after_optimizations.txt"))
    assert len(after) == p and len([f for f in meta["hlo_files"] if f.endswith(".before_optimizations.txt")]) == p
    programs = {}
    for f in after:
        pid, module = f.name.split(".")[:2]
        programs[module] = (int(pid.removeprefix("module_")), f.read_text())
    assert sorted(programs) == [f"jit_stage{s}" for s in range(p)]
    events, steps = _op_events(dest / meta["xplane"])
    ops = [e for e in events if "hlo_op" in e]
    n_steps = len(meta["traced_step_times_s"])
    assert sorted(int(s["step_num"]) for s in steps if s["name"] == "train") == list(range(n_steps))
    for stage in range(p):
        module = f"jit_stage{stage}"
        pid, hlo = programs[module]
        mine = [o for o in ops if o["hlo_module"] == module]
        assert {(int(o["program_id"]), int(o["device_ordinal"])) for o in mine} == {(pid, stage)}
        entry = _entry_instructions(hlo)
        counts = Counter(o["hlo_op"] for o in mine)
        assert set(counts) <= set(entry) and {counts[op] for op in counts} == {m * n_steps}
    # each stage: layers_per_stage matmuls of [rows, D] x [D, D] per microbatch (2 rows D^2 FLOPs each)
    matmuls = 2 * cfg["rows"] * cfg["d_model"] ** 2 * cfg["layers_per_stage"] * p
    assert matmuls <= meta["xla_cost_analysis"]["flops"] <= 1.05 * matmuls
    return meta


def test_committed_mpmd_sample() -> None:
    pytest.importorskip("jax")
    dest = REPO / "sample_traces" / "pipeline_mpmd"
    if not (dest / "capture.json").exists():
        pytest.skip(f"{dest} has not been captured (run sample_traces/capture.py)")
    _check_mpmd_sample(dest)


@pytest.mark.slow
def test_capture_mpmd_sample(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--only", "pipeline_mpmd"],
                   check=True, timeout=300)
    assert _check_mpmd_sample(tmp_path / "pipeline_mpmd")["device_count"] == 8


def test_committed_regression_pair() -> None:
    """mlp_repeat is the same program as mlp; mlp_slow the same program, clearly slower."""
    root = REPO / "sample_traces"
    if not all((root / n / "capture.json").exists() for n in ("mlp", "mlp_repeat", "mlp_slow")):
        pytest.skip("the mlp samples have not been captured (run sample_traces/capture.py)")
    meta = {n: json.loads((root / n / "capture.json").read_text())
            for n in ("mlp", "mlp_repeat", "mlp_slow")}
    before = {n: (root / n / f).read_text() for n in meta for f in meta[n]["hlo_files"]
              if f.endswith(".before_optimizations.txt")}
    assert before["mlp"] == before["mlp_repeat"]
    assert before["mlp"] != before["mlp_slow"]
    # Same ops in the traced module, so a diff can compare op by op.
    ops = {n: set(_entry_instructions((root / n / f).read_text()))
           for n in meta for f in meta[n]["hlo_files"]
           if f.endswith(".cpu_after_optimizations.txt")}
    assert ops["mlp"] == ops["mlp_repeat"] == ops["mlp_slow"]
    med = {n: m["median_untraced_step_time_s"] for n, m in meta.items()}
    assert med["mlp_slow"] > 1.3 * med["mlp"]
    assert med["mlp_slow"] > 1.3 * med["mlp_repeat"]
    # The traces agree: their step annotations are slower too.
    traced = {}
    for n, m in meta.items():
        _, steps = _op_events(root / n / m["xplane"])
        durations = sorted(s["duration_ns"] for s in steps if s["name"] == "train")
        traced[n] = durations[len(durations) // 2]
    assert traced["mlp_slow"] > 1.3 * max(traced["mlp"], traced["mlp_repeat"])
