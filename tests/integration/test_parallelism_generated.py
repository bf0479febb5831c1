"""The parallelism rules on generated programs no one tuned them to.

tests/support/parallel_programs.py draws JAX programs at random from a seed (function names, mesh axis names
and their order, sizes) in every form real programs write context parallelism (a ring unrolled into a chain of
permutes, a ring in a loop of its own, a ring inside the scan over layers, K/V all-gathered along the
sequence), a layer scan alone, and SPMD pipelines (GPipe, interleaved). The references are the generator's own
draws (manifest.json) and the book's formulas worked here, never traceview's output. The seed is random per
run and printed in every failure; TRACEVIEW_GENERATED_SEED=N replays one.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import traceview
from traceview.hardware.database import get_chip, load_hardware
from traceview.parallelism.diagnose import from_analysis, from_hlo
from traceview.parallelism.rules import axis_link, critical_ratio

SEED = int(os.environ.get("TRACEVIEW_GENERATED_SEED") or random.SystemRandom().randrange(1 << 30))
GENERATOR = Path(__file__).resolve().parents[1] / "support" / "parallel_programs.py"
FORMS = ("context-unrolled", "context-loop", "context-scan", "context-allgather", "layer-scan", "pipeline-gpipe",
         "pipeline-interleaved", "mpmd-gpipe", "mpmd-1f1b", "pipeline-sendrecv", "context-sendrecv",
         "mpmd-interleaved", "mpmd-interleaved-1f1b")


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, list[dict]]:
    pytest.importorskip("jax")
    out = tmp_path_factory.mktemp("generated_parallel")
    proc = subprocess.run([sys.executable, str(GENERATOR), "--seed", str(SEED), "--out", str(out), "--forms",
                           *FORMS], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"seed {SEED}: the generator failed:\n{proc.stderr[-3000:]}"
    return out, json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def h100():
    return get_chip("h100-sxm", load_hardware(None))


def _program(generated, form: str, chip) -> tuple[dict, dict]:
    out, manifest = generated
    facts = next(f for f in manifest if f["form"] == form)
    report = from_hlo(out / facts["name"], chip)
    return facts, {a.name: a for a in report.axes}


def _roles(axes) -> dict[str, list[str]]:
    return {name: [r.role for r in a.roles] for name, a in axes.items()}


@pytest.mark.parametrize("form", [f for f in FORMS if f.startswith("context")])
def test_context_parallelism_is_found_by_data_flow(generated, h100, form):
    facts, axes = _program(generated, form, h100)
    where = f"seed {SEED}, {facts['name']} ({facts})"
    roles = _roles(axes)
    axis = axes.get(facts["axis"])
    assert axis is not None, where
    assert axis.role.role == "context" and axis.roles[0].role == "context", (where, roles)
    assert not any("pipeline" in r for r in roles.values()), (where, roles)
    ctx = axis.context
    assert ctx.attention.seq_per_chip == facts["seq_per_chip"], where
    assert ctx.attention.head_dim == facts["head_dim"], where
    assert ctx.attention.heads_per_kv_head == facts["heads_per_kv_head"], where
    assert ctx.style == ("all-gather" if form == "context-allgather" else "ring"), where
    assert ctx.how and any("attention product" in line for line in axis.roles[0].evidence), where
    # the book's rule with the shapes found: s > (C/W) b H_kv / (2 H), f32 (b = 4)
    ratio = critical_ratio(h100, axis_link(h100, False, 1, facts["axis_size"]), "f32")
    verdict = axis.roles[0].verdict
    assert verdict.value == facts["seq_per_chip"], where
    assert verdict.threshold == pytest.approx(ratio * 4 * facts["kv_heads"] / (2 * facts["heads"])), where
    assert verdict.verdict == ("compute-bound" if verdict.value > verdict.threshold else "communication-bound")


@pytest.mark.parametrize("form", ["context-unrolled", "context-loop", "context-scan", "context-sendrecv"])
def test_ring_passes_and_bytes_by_hand(generated, form):
    facts, axes = _program(generated, form, None)
    where = f"seed {SEED}, {facts['name']} ({facts})"
    ctx = axes[facts["axis"]].context
    x = facts["axis_size"]
    # a ring in a loop of its own permutes every iteration (X hops); unrolled, the last hop is left out; as
    # send/recv, the ring's back edge and the rest are two sends of one block (one hop)
    looped = form in ("context-loop", "context-sendrecv") or facts["inner_loop"]
    assert ctx.passes == (x if looped else x - 1), where
    # one hop moves one K and one V block of this chip: 2 x [b, s, H_kv, d] f32
    block = facts["batch_per_chip"] * facts["seq_per_chip"] * facts["kv_heads"] * facts["head_dim"] * 4
    assert ctx.bytes_per_pass == 2 * block, where


def test_a_layer_scan_alone_is_no_pipeline(generated):
    facts, axes = _program(generated, "layer-scan", None)
    where = f"seed {SEED}, {facts['name']} ({facts})"
    roles = _roles(axes)
    assert not any("pipeline" in r for r in roles.values()), (where, roles)
    assert all(a.pipeline is None for a in axes.values()), where
    axis = axes[facts["axis"]]
    assert "fsdp" in roles[facts["axis"]], (where, roles)
    if facts["halo"]:      # the permute inside the scan is named and why it is no pipeline is said
        assert any("a scan over layers, not a pipeline" in e and f"{facts['layers']} layers" in e
                   for e in axis.role.evidence), (where, axis.role.evidence)


@pytest.mark.parametrize("form", ["pipeline-gpipe", "pipeline-interleaved", "pipeline-sendrecv"])
def test_a_real_pipeline_keeps_its_role_and_names_its_schedule(generated, form):
    facts, axes = _program(generated, form, None)
    where = f"seed {SEED}, {facts['name']} ({facts})"
    axis = axes[facts["axis"]]
    assert axis.role.role == "pipeline", (where, _roles(axes))
    assert [a for a, r in _roles(axes).items() if "pipeline" in r] == [facts["axis"]], (where, _roles(axes))
    if form == "pipeline-sendrecv":      # the transfer named; XLA's validation read and agreeing when written
        assert "send/recv pair" in axis.pipeline.how, where
        assert ("it agrees" in axis.pipeline.how) == facts["send_recv"]["annotated"], (where, axis.pipeline.how)
    found = axis.pipeline
    p, m, v = facts["axis_size"], facts["microbatches"], facts["virtual_stages"]
    assert (found.stages, found.microbatches, found.virtual_stages) == (p, m, v), where
    assert found.schedule_name == ("interleaved" if v > 1 else "GPipe"), where
    # the schedule's own formula: (p - 1)/(v m + p - 1), v = 1 for GPipe
    assert found.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1)), where
    assert found.formula_bubble_fraction == pytest.approx(facts["bubble"]), where
    assert any(found.schedule_name in e for e in axis.roles[0].evidence), where


@pytest.mark.parametrize("form", ["mpmd-gpipe", "mpmd-1f1b", "mpmd-interleaved", "mpmd-interleaved-1f1b"])
def test_a_program_per_stage_names_its_schedule_from_the_timeline(generated, form):
    """Forward and backward programs per stage (and model chunk) on their own devices, dispatched in GPipe's,
    1F1B's or their interleaved orders: the trace's stage timeline tells them apart; each is compared with
    (p - 1)/(v·m + p - 1), v = 1 without chunks."""
    out, manifest = generated
    facts = next(f for f in manifest if f["form"] == form)
    where = f"seed {SEED}, {facts}"
    report = from_analysis(traceview.load(out / facts["name"] / "trace").pipeline)
    (axis,) = [a for a in report.axes if a.pipeline is not None]
    found = axis.pipeline
    p, m, v = facts["stages"], facts["microbatches"], facts["virtual_stages"]
    assert (found.stages, found.microbatches, found.virtual_stages) == (p, m, v), where
    assert found.schedule_name == facts["schedule"], where
    assert found.formula_bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1)), where
    assert 0 < found.bubble_fraction < 1 and found.schedule.steps == facts["traced_steps"], where


def _stage_of_device(facts: dict, device: int) -> int:
    """The device's coordinate on the pipeline axis, as the generator laid the mesh out (devices in order,
    reshaped to the axes in ``mesh_order``)."""
    import numpy as np

    sizes = {facts["axis"]: facts["axis_size"]}
    order = facts["mesh_order"]
    shape = [sizes.get(name, 8 // facts["axis_size"]) for name in order]
    return int(np.unravel_index(device, shape)[order.index(facts["axis"])])


@pytest.mark.parametrize("equal", [True, False])
def test_a_send_recv_pipeline_measures_its_bubble_from_its_ticks(generated, equal):
    """The generated send/recv pipeline's loop body, its ops put on a timeline of 8 devices for 2 runs of the
    loop (tick lengths drawn, or equal): the bubble measured from the ticks equals the hand count, stage s idle
    in its first s and last p - 1 - s ticks; with equal ticks, the schedule's formula."""
    import numpy as np
    import pandas as pd

    from traceview.parallelism.diagnose import DiagnoseInputs, diagnose, naming_modules
    from traceview.parsers.hlo.dump import load_hlo_modules

    out, manifest = generated
    facts = next(f for f in manifest if f["form"] == "pipeline-sendrecv")
    where = f"seed {SEED}, {facts}"
    folder = out / facts["name"]
    after, _ = load_hlo_modules(folder, stage="after")
    found = {a.name: a for a in from_hlo(folder, None).axes}[facts["axis"]].pipeline
    module, body, n = found.loop
    p = facts["axis_size"]
    assert n == facts["ticks"], where
    insts = [i for i in next(m for m in after if m.name == module).computations[body].instructions
             if i.opcode not in ("parameter", "get-tuple-element", "tuple", "constant", "bitcast", "after-all")]
    assert {"send", "recv", "recv-done", "send-done"} <= {i.opcode for i in insts}, where
    ops = [i.name for i in insts]
    rng = np.random.default_rng(SEED)
    rows, shares = [], []
    for device in range(8):
        stage, t = _stage_of_device(facts, device), 0
        for _ in range(2):
            ticks = np.full(n, 10.0) if equal else rng.uniform(5.0, 20.0, n)
            idle = [k for k in range(n) if k < stage or k > stage + n - p]
            shares.append(ticks[idle].sum() / ticks.sum())
            for length in ticks:
                for i, op in enumerate(ops):
                    rows.append({"device": f"/device:GPU:{device}", "module": module, "op": op, "step": 0,
                                 "start_ps": int((t + i * length / len(ops)) * 1e6),
                                 "duration_ps": int(length / len(ops) * 1e6)})
                t += length
            t += 50.0
    table = pd.DataFrame(rows)
    report = diagnose(DiagnoseInputs(after, naming_modules(folder), ops=table.assign(occurrences=1),
                                     executions=lambda: table))
    measured = {a.name: a for a in report.axes}[facts["axis"]].pipeline.measured
    assert measured is not None and measured.runs == 2, where
    assert measured.bubble_fraction == pytest.approx(float(np.mean(shares)), rel=1e-4), where
    if equal:
        assert measured.bubble_fraction == pytest.approx(found.formula_bubble_fraction, rel=1e-4), where
