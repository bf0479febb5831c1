"""The what-if projection on the project's samples: today's configuration reproduces today's step, each term
is worked by hand from the trace's own tables (steps, ops, the parallelism view's axes), and the command's
JSON keeps the contract (DESIGN.md, docs/whatif.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import traceview
from traceview.hardware.database import get_chip, load_hardware
from traceview.render.whatif import whatif_json, whatif_markdown, whatif_text
from traceview.whatif.baseline import measure

SAMPLES = ["sharded", "fsdp", "tensor_parallel", "pipeline", "ring_attention", "moe", "mlp"]


def _today(report):
    """The projection of today's mesh at today's batch on today's chip (the defaults always hold it)."""
    t = report.today
    mesh = {r: s for r, s in t.mesh.items() if s > 1}
    found = [p for p in report.projections if {r: s for r, s in p.config.mesh.items() if s > 1} == mesh
             and p.config.batch == (t.batch if t.batch is not None else 1.0)
             and (p.config.chip.name if p.config.chip else None) == t.chip]
    assert len(found) == 1, [(p.config.mesh, p.config.batch) for p in report.projections]
    return found[0]


@pytest.mark.parametrize("sample", SAMPLES)
def test_today_projects_onto_todays_step_time(sample_traces, sample):
    analysis = traceview.load(sample_traces / sample)
    report = analysis.whatif()
    measured = float(analysis.pipeline.steps["time_ps"].mean())
    assert report.today.step_ps == pytest.approx(measured)
    today = _today(report)
    assert today.step_ps == pytest.approx(measured, rel=0.02)          # the 2%; exact by construction
    assert today.mfu == pytest.approx(analysis.summary.mfu, rel=0.02)
    # every term's baseline adds up to today's step: the decomposition loses nothing
    assert sum(t.baseline_ps or 0.0 for t in today.terms) == pytest.approx(measured, rel=1e-9)
    ranked = [p.step_ps for p in report.projections if p.step_ps is not None]
    assert ranked == sorted(ranked)


@pytest.fixture
def chip_model(monkeypatch):
    """The samples' devices are threads of one host, which the projection models as the host's work
    (whatif.host); these tests work the chip model by hand on the same traces, so they turn that off."""
    import traceview.whatif.baseline as baseline

    monkeypatch.setattr(baseline, "shared_host", lambda pipeline, chips: None)


def test_sharded_twice_the_batch_by_hand(sample_traces, chip_model):
    """FSDP 4 x tensor 2 at twice the batch: compute doubles, FSDP's volume is the parameters' (unchanged),
    the tensor axis's activations double; memory-bound ops scale by kind."""
    analysis = traceview.load(sample_traces / "sharded")
    base = measure(analysis.pipeline, analysis.parallelism(), analysis.memory())
    (p,) = analysis.whatif(meshes=[{"fsdp": 4, "tensor": 2}], batches=["x2"]).projections
    terms = {t.what: t for t in p.terms}
    steps = analysis.pipeline.steps
    assert terms["compute-bound ops"].time_ps == pytest.approx(2 * steps["compute_ps"].mean())
    ops = analysis.pipeline.ops
    own = ops[ops["collective_kind"].astype(str).isin(["", "None", "nan"]) & (ops["bound"] == "memory")]
    weight = {"activation bytes": 2.0, "parameter shard bytes": 1.0, "gathered parameter bytes": 1.0}
    kinds = dict(zip(base.ops["op"], base.ops["scale"]))
    ratio = sum(t * weight[kinds[o]] for o, t in zip(own["op"], own["total_time_ps"])) / own["total_time_ps"].sum()
    assert terms["memory-bound ops"].time_ps == pytest.approx(steps["memory_ps"].mean() * ratio)
    axes = {a.role.role: a for a in analysis.parallelism().axes}
    device_steps = base.chips * len(steps)
    assert terms["fsdp collectives (exposed)"].time_ps == pytest.approx(axes["fsdp"].exposed_ps / device_steps)
    assert terms["tensor collectives (exposed)"].time_ps == pytest.approx(2 * axes["tensor"].exposed_ps / device_steps)
    assert terms["idle"].time_ps == pytest.approx(steps["idle_ps"].mean())
    assert p.step_ps == pytest.approx(sum(t.time_ps for t in p.terms))
    assert p.tokens_per_s_per_chip == pytest.approx(2 * base.batch_tokens / (p.step_ps * 1e-12) / 8)


def test_a_role_the_program_lacks_is_the_books_formula_and_says_so(sample_traces, chip_model):
    analysis = traceview.load(sample_traces / "fsdp")
    (p,) = analysis.whatif(meshes=[{"fsdp": 4, "tensor": 2}], batches=["x1"]).projections
    tensor = next(t for t in p.terms if t.role == "tensor")
    assert tensor.measured is False and "fully exposed" in tensor.formula
    assert any("tensor: the program does not use it" in n for n in p.notes)
    (pp,) = analysis.whatif(meshes=[{"fsdp": 4, "pipeline": 2}], batches=["x1"]).projections
    bubble = next(t for t in pp.terms if t.what == "pipeline bubble")
    work = sum(t.time_ps for t in pp.terms if t is not bubble)
    assert bubble.measured is False and bubble.time_ps == pytest.approx(work * (1 / 9) / (8 / 9))   # p 2, m 8
    assert any("GPipe" in n for n in pp.notes)


def test_a_changed_tensor_split_names_the_matmul_shapes_the_trace_did_not_measure(sample_traces):
    """Same kernels is assumed at shapes the trace never ran: a config with other tensor ways says which (each
    device's token rows and hidden columns, today's and the config's); one with today's tensor ways does not."""
    import random

    from traceview.whatif.book import batch_ways

    analysis = traceview.load(sample_traces / "fsdp")
    base = measure(analysis.pipeline, analysis.parallelism(), analysis.memory())
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    tensor, factor = rng.choice((2, 4, 8)), rng.choice((0.5, 1, 2, 4))
    mesh = {"fsdp": 8 // tensor, "tensor": tensor} if tensor < 8 else {"tensor": 8}
    (changed,) = analysis.whatif(meshes=[mesh], batches=[f"x{factor}"]).projections
    (kept,) = analysis.whatif(meshes=[{"fsdp": 8}], batches=[f"x{factor}"]).projections
    rows_now = base.batch_tokens / batch_ways(base.mesh)
    rows_new = factor * base.batch_tokens / batch_ways(mesh)
    (note,) = [n for n in changed.notes if n.startswith("same kernels at another shape")]
    assert (f"tensor 1 -> {tensor} turns each device's MLP matmuls from {rows_now:.4g} token rows x "
            f"{base.ffn:.4g} hidden columns into {rows_new:.4g} x {base.ffn / tensor:.4g}") in note, (mesh, factor)
    assert not [n for n in kept.notes if n.startswith("same kernels at another shape")]


def test_a_note_several_configs_share_is_one_line_naming_their_ranks(sample_traces):
    """The text and markdown views print each distinct note once: shared by every config (the one-host note),
    it names all their ranks; a config's own (the matmul shapes of its tensor split) keeps its mesh."""
    analysis = traceview.load(sample_traces / "fsdp")
    meshes = [{"fsdp": 8}, {"fsdp": 4, "tensor": 2}, {"fsdp": 2, "tensor": 4}]
    report = analysis.whatif(meshes=meshes, batches=["x1", "x2"])
    text = whatif_text(report)
    host = [line for line in text.splitlines() if "threads of one host" in line]
    ranks = ", ".join(f"#{i}" for i in range(1, len(report.projections) + 1))
    assert len(host) == 1 and host[0].startswith(f"{ranks}: "), host
    shaped = [(i, p) for i, p in enumerate(report.projections, 1) if p.config.mesh.get("tensor", 1) > 1]
    for i, p in shaped:
        (note,) = [n for n in p.notes if n.startswith("same kernels at another shape")]
        tensor = p.config.mesh["tensor"]
        mesh = f"fsdp {p.config.mesh['fsdp']} x tensor {tensor}"
        assert f"#{i} {mesh}: {note}" in text.splitlines()
    assert len(shaped) == 4
    assert sum("same kernels at another shape" in line for line in whatif_markdown(report).splitlines()) == 4


def test_virtual_devices_of_one_host_are_projected_as_the_hosts_work(sample_traces):
    """The sharded sample's 8 devices are threads of one process: every term is the host's work over the rate
    today's step got through today's, idle kept; by hand from the op executions and the book's bytes."""
    from traceview.whatif.host import WORK_QUANTILE, host_collective_bytes

    analysis = traceview.load(sample_traces / "sharded")
    base = measure(analysis.pipeline, analysis.parallelism(), analysis.memory())
    assert base.host is not None and base.host.devices == 8
    runs = analysis.pipeline.profile
    ops = runs.op_executions() if hasattr(runs, "op_executions") else runs.ops
    steps = len(analysis.pipeline.steps)
    dot = ops[ops["op"] == "dot"]
    key = (str(dot["module"].iloc[0]), "dot")
    assert base.host.work[key] == pytest.approx(dot["duration_ps"].quantile(WORK_QUANTILE) / 1e12 * len(dot) / steps)
    (p,) = analysis.whatif(meshes=[{"fsdp": 8}], batches=["x2"]).projections
    terms = {t.what: t for t in p.terms}
    idle = float(analysis.pipeline.steps["idle_ps"].mean())
    assert terms["idle"].time_ps == pytest.approx(idle) == terms["idle"].baseline_ps
    assert sum(t.baseline_ps for t in p.terms) == pytest.approx(base.step_ps)
    # today's work: every op's, and each role's copies at the host's rate; c = that work / (step - idle)
    work = {b: sum(base.host.work[(m, o)] for m, o, bb in zip(base.ops["module"], base.ops["op"], base.ops["bound"])
                   if bb == b) for b in ("compute", "memory")}
    copies = sum(host_collective_bytes(r, base.mesh, base.batch_tokens, base.param_bytes,
                                       base.activation_bytes_per_token, 8) for r in base.mesh) / base.host.byte_rate
    per_second = (base.step_ps - idle) / (work["compute"] + work["memory"] + copies)
    assert terms["compute-bound ops"].baseline_ps == pytest.approx(work["compute"] * per_second)
    # every compute-bound op scales with the FLOPs: twice the batch on as many chips, twice the work
    assert terms["compute-bound ops"].time_ps == pytest.approx(2 * terms["compute-bound ops"].baseline_ps)
    # the tensor axis is gone; FSDP 8 copies the book's bytes for 8 ways without tensor sharding
    assert terms["tensor collectives (host copies)"].time_ps == 0.0
    fsdp = terms["fsdp collectives (host copies)"]
    ratio = host_collective_bytes("fsdp", {"fsdp": 8}, 2 * base.batch_tokens, base.param_bytes, 0.0, 8) / \
        host_collective_bytes("fsdp", base.mesh, base.batch_tokens, base.param_bytes, 0.0, 8)
    assert fsdp.time_ps == pytest.approx(fsdp.baseline_ps * ratio) and ratio == pytest.approx(1.75 / 0.75)
    assert any("threads of one host" in n for n in p.notes)
    # a role the program lacks: the book's bytes, marked as not measured
    (q,) = traceview.load(sample_traces / "fsdp").whatif(meshes=[{"fsdp": 4, "tensor": 2}], batches=["x1"]).projections
    tensor = next(t for t in q.terms if t.role == "tensor")
    assert tensor.measured is False and tensor.baseline_ps == 0.0 and tensor.time_ps > 0


def test_the_assumptions_listed_are_the_model_that_ran(sample_traces, monkeypatch):
    """One host's virtual devices hide nothing and price collectives as copies: their report must not also
    claim the chip model's overlap per role and measured collective times; the chip model's report must not
    claim the host's."""
    from traceview.whatif.view import ASSUMPTIONS, HOST_ASSUMPTIONS

    analysis = traceview.load(sample_traces / "sharded")
    host = analysis.whatif(meshes=[{"fsdp": 8}], batches=["x1"]).assumptions
    assert host == HOST_ASSUMPTIONS
    assert not any(a.startswith("same overlap per role") for a in host)
    assert any(a.startswith("one host's virtual devices") for a in host)
    import traceview.whatif.baseline as baseline

    monkeypatch.setattr(baseline, "shared_host", lambda pipeline, chips: None)
    chip = traceview.load(sample_traces / "sharded").whatif(meshes=[{"fsdp": 8}], batches=["x1"]).assumptions
    assert chip == ASSUMPTIONS and any(a.startswith("same overlap per role") for a in chip)
    assert not any(a.startswith("one host's virtual devices") for a in chip)


def test_another_chip_scales_compute_by_peak_and_checks_memory(sample_traces):
    analysis = traceview.load(sample_traces / "sharded")
    v5p = get_chip("tpu-v5p", load_hardware(None))
    (p,) = analysis.whatif(meshes=[{"fsdp": 4, "tensor": 2}], batches=["x1"], target="tpu-v5p").projections
    cpu = analysis.target
    compute = next(t for t in p.terms if t.what == "compute-bound ops")
    dtype = analysis.pipeline.judged.summary["mfu_dtype"]
    assert compute.time_ps == pytest.approx(compute.baseline_ps * cpu.peak_flops_for(dtype) / v5p.peak_flops_for(dtype))
    assert p.capacity_bytes == v5p.hbm_capacity and p.fits is True
    assert p.headroom_bytes == pytest.approx(v5p.hbm_capacity - p.memory_per_chip_bytes)


def test_memory_per_chip_scales_with_the_sharding(sample_traces):
    analysis = traceview.load(sample_traces / "fsdp")
    base = measure(analysis.pipeline, analysis.parallelism(), analysis.memory())
    (p,) = analysis.whatif(meshes=[{"fsdp": 4}], batches=["x1"], chips=None).projections
    # half the FSDP ways: each shard of the state twice as large, the batch per chip twice as large
    m = base.memory
    assert p.memory_per_chip_bytes == pytest.approx(2 * m["parameter shard bytes"] + m["gathered parameter bytes"]
                                                    + 2 * m["activation bytes"])


def test_renderers_and_command(sample_traces, tmp_path):
    trace = sample_traces / "tensor_parallel"
    report = traceview.load(trace).whatif()
    record = whatif_json(report)
    assert set(record) >= {"baseline", "configs", "assumptions", "warnings"}
    assert set(record["baseline"]) >= {"mesh", "batch", "chips", "step_time_us", "mfu", "memory_per_chip_bytes"}
    for c in record["configs"]:
        assert set(c) >= {"mesh", "batch", "chips", "target", "step_time_us", "mfu", "memory_per_chip_bytes", "fits",
                          "dominant_change", "terms"}
        assert all(set(t) >= {"what", "role", "time_us", "formula"} for t in c["terms"])
    steps = [c["step_time_us"] for c in record["configs"]]
    assert steps == sorted(steps)
    jsonschema = pytest.importorskip("jsonschema")
    from traceview.config.files import schema

    jsonschema.validate(record, schema("whatif"))
    for c in record["configs"]:
        assert sum(t["time_us"] for t in c["terms"]) == pytest.approx(c["step_time_us"])
    assert "today: data 2 x tensor 4" in whatif_text(report) and "## What if" in whatif_markdown(report)
    out = subprocess.run([sys.executable, "-m", "traceview", "whatif", str(trace), "--mesh", "data=8",
                          "--mesh", "data=4,tensor=2", "--batch", "x2", "--format", "json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    cli = json.loads(out.stdout)
    assert sorted(tuple(sorted(c["mesh"].items())) for c in cli["configs"]) == [
        (("data", 4), ("tensor", 2)), (("data", 8),)]
    assert all(c["batch"] == 2 * cli["baseline"]["batch"] for c in cli["configs"])
    bad = subprocess.run([sys.executable, "-m", "traceview", "whatif", str(trace), "--mesh", "model=8"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--mesh" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("sample, d_model, ffn", [("sharded", "d_in", "hidden"), ("fsdp", "d_in", "hidden"),
                                                  ("tensor_parallel", "d_in", "hidden")])
def test_parameters_and_widths_read_from_the_state(sample_traces, sample, d_model, ffn):
    """P, D and F against the capture script's configuration: two f32 matrices D x F and F x D."""
    analysis = traceview.load(sample_traces / sample)
    cfg = json.loads((sample_traces / sample / "capture.json").read_text())["config"]
    base = measure(analysis.pipeline, analysis.parallelism(), analysis.memory())
    assert base.param_bytes == 2 * cfg[d_model] * cfg[ffn] * 4
    assert base.ffn == cfg[ffn]
    assert base.activation_bytes_per_token == 2 * cfg[d_model] * 4      # forward + backward, one matmul pair
    assert base.batch_tokens == cfg["batch"]


def test_gpu_roles_past_a_node_run_over_the_data_centre_network(sample_traces):
    """On H100s the roles fill a node of 8 inner role first: data 4 x tensor 4 puts data across nodes."""
    from traceview.parallelism.rules import GPUS_PER_NODE, axis_link

    h100 = get_chip("h100-sxm", load_hardware(None))
    analysis = traceview.load(sample_traces / "tensor_parallel")
    report = analysis.whatif(meshes=[{"data": 2, "tensor": 4}, {"data": 4, "tensor": 4}], batches=["x1"],
                             target="h100-sxm")
    by_mesh = {tuple(sorted(p.config.mesh.items())): p for p in report.projections}
    inside = next(t for t in by_mesh[(("data", 2), ("tensor", 4))].terms if t.role == "data")
    across = next(t for t in by_mesh[(("data", 4), ("tensor", 4))].terms if t.role == "data")
    nvlink, dcn = axis_link(h100).bandwidth, axis_link(h100, crosses_dcn=True).bandwidth
    cpu = axis_link(analysis.target).bandwidth
    assert f"link ratio {cpu / nvlink:.3g}" in inside.formula and GPUS_PER_NODE == 8
    assert f"link ratio {cpu / dcn:.3g}" in across.formula
    # today's in-flight time x bytes ratio (2 (n-1)/n: 1/2 -> 3/4) x the links' ratio, exposed as measured
    assert across.time_ps == pytest.approx(inside.time_ps * (3 / 4) / (1 / 2) * nvlink / dcn)
