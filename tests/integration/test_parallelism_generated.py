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
         "pipeline-interleaved", "mpmd-gpipe", "mpmd-1f1b")


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


@pytest.mark.parametrize("form", ["context-unrolled", "context-loop", "context-scan"])
def test_ring_passes_and_bytes_by_hand(generated, form):
    facts, axes = _program(generated, form, None)
    where = f"seed {SEED}, {facts['name']} ({facts})"
    ctx = axes[facts["axis"]].context
    x = facts["axis_size"]
    # a ring in a loop of its own permutes every iteration (X hops); unrolled, the last hop is left out
    looped = form == "context-loop" or facts["inner_loop"]
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


@pytest.mark.parametrize("form", ["pipeline-gpipe", "pipeline-interleaved"])
def test_a_real_pipeline_keeps_its_role_and_names_its_schedule(generated, form):
    facts, axes = _program(generated, form, None)
    where = f"seed {SEED}, {facts['name']} ({facts})"
    axis = axes[facts["axis"]]
    assert axis.role.role == "pipeline", (where, _roles(axes))
    found = axis.pipeline
    p, m, v = facts["axis_size"], facts["microbatches"], facts["virtual_stages"]
    assert (found.stages, found.microbatches, found.virtual_stages) == (p, m, v), where
    assert found.schedule_name == ("interleaved" if v > 1 else "GPipe"), where
    # the schedule's own formula: (p - 1)/(v m + p - 1), v = 1 for GPipe
    assert found.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1)), where
    assert found.formula_bubble_fraction == pytest.approx(facts["bubble"]), where
    assert any(found.schedule_name in e for e in axis.roles[0].evidence), where


@pytest.mark.parametrize("form", ["mpmd-gpipe", "mpmd-1f1b"])
def test_a_program_per_stage_names_its_schedule_from_the_timeline(generated, form):
    """Forward and backward programs per stage on their own devices, dispatched in GPipe's or 1F1B's order:
    the trace's stage timeline tells the two apart; both are compared with (p - 1)/(m + p - 1)."""
    out, manifest = generated
    facts = next(f for f in manifest if f["form"] == form)
    where = f"seed {SEED}, {facts}"
    report = from_analysis(traceview.load(out / facts["name"] / "trace").pipeline)
    (axis,) = [a for a in report.axes if a.pipeline is not None]
    found = axis.pipeline
    p, m = facts["stages"], facts["microbatches"]
    assert (found.stages, found.microbatches) == (p, m), where
    assert found.schedule_name == facts["schedule"], where
    assert found.formula_bubble_fraction == pytest.approx((p - 1) / (m + p - 1)), where
    assert 0 < found.bubble_fraction < 1 and found.schedule.steps == facts["traced_steps"], where
