"""Context, pipeline and expert parallelism, axes with two roles, and weights read through TPU matmuls.

References are independent of the code under test: the capture script's configuration of each sample
(capture.json: mesh, sequence, heads, microbatches, experts, top-k, capacity, widths), the book's formulas
worked by hand below, and MaxText's own test configuration for its reference HLO
(tests/integration/hlo_diff_test.py: per_device_batch_size=1, max_target_length=128, v6e-4).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import traceview
from traceview.hardware.database import get_chip, load_hardware
from traceview.parallelism.diagnose import DiagnoseInputs, diagnose, from_analysis, from_hlo
from traceview.parallelism.rules import axis_link, critical_ratio
from traceview.parsers.hlo.text import parse_hlo_text
from traceview.render.parallelism import parallelism_json, parallelism_markdown, parallelism_text, summary_line

MAXTEXT_TPU = Path("AI-Hypercomputer-maxtext")


def _sample(sample_traces: Path, name: str, chip: str | None = None):
    analysis = traceview.load(sample_traces / name).pipeline
    if chip is not None:
        analysis = traceview.Analysis(analysis).retarget(get_chip(chip, load_hardware(None))).pipeline
    meta = json.loads((sample_traces / name / "capture.json").read_text())
    report = from_analysis(analysis)
    return report, {a.name: a for a in report.axes}, meta["config"]


def _h100_ratio(dtype: str = "f32") -> float:
    h100 = get_chip("h100-sxm", load_hardware(None))
    return critical_ratio(h100, axis_link(h100), dtype)


def _schema_valid(report) -> dict:
    record = parallelism_json(report)
    jsonschema = pytest.importorskip("jsonschema")
    from traceview.config.files import schema

    jsonschema.validate(record, schema("parallelism"))
    return record


# --- context parallelism: ring attention --------------------------------------------------------

def test_ring_attention_sample_is_context_parallel(sample_traces):
    report, axes, cfg = _sample(sample_traces, "ring_attention")
    ring = axes["context"]
    # the collective-permutes are K/V passes of the attention loop: context, not pipeline (nor FSDP)
    assert ring.role.role == "context" and [r.role for r in ring.roles] == ["context"]
    assert any("K/V ring pass" in e for e in ring.roles[0].evidence)
    assert ring.pipeline is None
    ctx = ring.context
    n = cfg["mesh"]["context"]
    assert ctx.style == "ring"
    assert ctx.attention.seq_per_chip == cfg["seq"] / n                    # 384 / 4 = 96
    assert ctx.attention.head_dim == cfg["head_dim"]
    assert ctx.attention.heads_per_kv_head == cfg["heads"] / cfg["kv_heads"]
    assert ctx.passes == n                                                 # fori_loop over the ring
    # one pass sends this chip's K and V blocks: 2 x [B/data, s, H_kv, d] f32
    block = cfg["batch"] / cfg["mesh"]["data"] * cfg["seq"] / n * cfg["kv_heads"] * cfg["head_dim"] * 4
    assert ctx.bytes_per_pass == 2 * block
    # the weights' gradient all-reduce runs over both axes: data parallelism on context+data
    assert axes["context+data"].role.role == "data"
    record = _schema_valid(report)
    rec = next(a for a in record["axes"] if a["name"] == "context")
    assert rec["context"]["seq_per_chip"] == 96 and rec["roles"][0]["role"] == "context"
    assert rec["context"]["exposed_time_us"] == rec["exposed_time_us"] is not None


def test_ring_attention_rule_by_hand_on_h100(sample_traces):
    _, axes, cfg = _sample(sample_traces, "ring_attention", "h100-sxm")
    v = axes["context"].verdict
    # s > (C/W) b H_kv / (2 H): f32 (b = 4), H = 4, H_kv = 2 -> threshold = C/W
    threshold = _h100_ratio() * 4 * cfg["kv_heads"] / (2 * cfg["heads"])
    assert v.threshold == pytest.approx(threshold)
    assert v.value == cfg["seq"] / cfg["mesh"]["context"]
    # H100 in f32: C/W = 6.7e13 / 4.5e11 ~ 149 > 96 tokens per chip
    assert v.verdict == "communication-bound" and v.suggestions
    assert v.rule.startswith("context parallel (ring)")


# --- pipeline parallelism ----------------------------------------------------------------------

def test_pipeline_sample_bubble_is_p_minus_1_over_m_plus_p_minus_1(sample_traces):
    report, axes, cfg = _sample(sample_traces, "pipeline")
    p, m = cfg["mesh"]["stage"], cfg["microbatches"]
    stage = axes["stage"]
    assert stage.role.role == "pipeline"
    assert any("stage activation pass" in e for e in stage.roles[0].evidence)
    assert stage.pipeline.stages == p and stage.pipeline.microbatches == m
    assert stage.pipeline.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
    v = stage.verdict
    # GPipe: m >= 4p keeps the bubble small; m = 6 < 16 here
    assert v.threshold == pytest.approx((p - 1) / (5 * p - 1)) and v.verdict == "bubble-bound"
    assert any("microbatches" in s for s in v.suggestions)
    assert axes["data"].role.role == "data"
    record = _schema_valid(report)
    assert record["axes"][0]["pipeline"] == {"stages": p, "microbatches": m,
                                             "bubble_fraction": pytest.approx((p - 1) / (m + p - 1)),
                                             "how": stage.pipeline.how,
                                             "formula_bubble_fraction": pytest.approx((p - 1) / (m + p - 1)),
                                             "schedule": "GPipe", "virtual_stages": 1,
                                             "measured_bubble_fraction": pytest.approx(stage.pipeline.measured
                                                                                       .bubble_fraction),
                                             "measured_how": stage.pipeline.measured.how,
                                             "measured_per_stage": {str(k): pytest.approx(v) for k, v in
                                                                    stage.pipeline.measured.per_stage.items()},
                                             "measured": None}     # no program per stage
    # the ticks measured in the trace: every device's 9 ticks per run, both traced steps, all 4 stages
    measured = stage.pipeline.measured
    assert measured.runs == cfg["traced_steps"] and sorted(measured.per_stage) == list(range(p))
    assert 0 < measured.bubble_fraction < 1 and "9 ticks each" in measured.how
    assert "bubble 33.3%" in summary_line(report)
    assert "stage: pipeline (bubble 33.3%)" in summary_line(traceview.load(sample_traces / "pipeline").mesh())
    assert "6 microbatches" in parallelism_text(report)


# --- expert parallelism ------------------------------------------------------------------------

def test_moe_sample_reads_experts_top_k_and_capacity(sample_traces):
    report, axes, cfg = _sample(sample_traces, "moe")
    expert = axes["expert"]
    # an axis with two roles: the routing (expert) and the router's gradient all-reduce (data)
    assert [r.role for r in expert.roles] == ["expert", "data"]
    assert all(r.verdict.rule for r in expert.roles)
    found = expert.expert
    assert found.routing.experts == cfg["experts"] and found.routing.top_k == cfg["top_k"]
    assert found.capacity == cfg["capacity"]
    assert found.width == cfg["d_model"] and found.ffn == cfg["d_ff"]
    # the per-chip batch is the tokens the router scores (512 / 8), not the experts' slots (8 x 16)
    assert report.per_chip_tokens.value == cfg["batch"] / cfg["mesh"]["expert"]
    record = _schema_valid(report)
    assert record["axes"][0]["expert"]["experts"] == 8 and record["axes"][0]["roles"][1]["role"] == "data"


def test_moe_rule_by_hand_on_h100(sample_traces):
    _, axes, cfg = _sample(sample_traces, "moe", "h100-sxm")
    v = axes["expert"].verdict
    # F > (C/W) b / n: f32 (b = 4), n = 2 matmuls per expert
    threshold = _h100_ratio() * 4 / 2
    assert v.threshold == pytest.approx(threshold) and v.value == cfg["d_ff"]
    assert v.verdict == "communication-bound" and v.suggestions    # f32 on H100: 128 < 2 x 149


# --- mixed FSDP x TP on a 2-D mesh -------------------------------------------------------------

def test_fsdp_with_tensor_parallel_mixed_rule_by_hand(sample_traces):
    _, axes, cfg = _sample(sample_traces, "sharded", "h100-sxm")
    mesh = cfg["mesh"]
    fsdp, tp = axes["data"], axes["model"]
    assert [r.role for r in fsdp.roles] == ["fsdp"] and [r.role for r in tp.roles] == ["tensor"]
    ratio = _h100_ratio()
    # the book's mixed rule: B/N > 2 (C/W)^2 / F, F the full MLP width
    assert fsdp.verdict.threshold == pytest.approx(2 * ratio ** 2 / cfg["hidden"])
    assert fsdp.verdict.value == cfg["batch"] / mesh["data"]
    assert tp.verdict.value == cfg["hidden"] / mesh["model"] and tp.verdict.threshold == pytest.approx(ratio)


# --- two roles on one axis (synthetic HLO: FSDP over the devices that run the ring) --------------

TWO_ROLES = """HloModule two_roles, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%cond (c: (s32[], f32[2,64,2,32], f32[2,2,64,32])) -> pred[] {
  %c = (s32[], f32[2,64,2,32], f32[2,2,64,32]) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %cn = s32[] constant(4)
  ROOT %lt = pred[] compare(%ci, %cn), direction=LT
}

%body (p: (s32[], f32[2,64,2,32], f32[2,2,64,32])) -> (s32[], f32[2,64,2,32], f32[2,2,64,32]) {
  %p = (s32[], f32[2,64,2,32], f32[2,2,64,32]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %k = f32[2,64,2,32]{3,2,1,0} get-tuple-element(%p), index=1
  %q = f32[2,2,64,32]{3,2,1,0} get-tuple-element(%p), index=2
  %kt = f32[2,2,32,64]{3,2,1,0} transpose(%k), dimensions={0,2,3,1}
  %scores = f32[2,2,64,64]{3,2,1,0} dot(%q, %kt), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}
  %next = f32[2,64,2,32]{3,2,1,0} collective-permute(%k), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  ROOT %t = (s32[], f32[2,64,2,32], f32[2,2,64,32]) tuple(%i2, %next, %q)
}

ENTRY %main (w: f32[16,32], k0: f32[2,64,2,32], q0: f32[2,2,64,32]) -> f32[16,32] {
  %w = f32[16,32]{1,0} parameter(0)
  %k0 = f32[2,64,2,32]{3,2,1,0} parameter(1)
  %q0 = f32[2,2,64,32]{3,2,1,0} parameter(2)
  %wg = f32[64,32]{1,0} all-gather(%w), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  %zero = s32[] constant(0)
  %init = (s32[], f32[2,64,2,32], f32[2,2,64,32]) tuple(%zero, %k0, %q0)
  %loop = (s32[], f32[2,64,2,32], f32[2,2,64,32]) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"4"}}
  ROOT %g = f32[16,32]{1,0} reduce-scatter(%wg), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=%add
}
"""


def test_an_axis_with_two_roles_gets_both_verdicts():
    h100 = get_chip("h100-sxm", load_hardware(None))
    report = diagnose(DiagnoseInputs([parse_hlo_text(TWO_ROLES)], chip=h100, target_source="--target"))
    (axis,) = report.axes
    assert axis.role.role == "context"                       # the ring leads; the gathers do not outvote it
    assert [r.role for r in axis.roles] == ["context", "fsdp"]
    ctx, fsdp = axis.roles
    assert ctx.verdict.value == 64 and ctx.verdict.threshold == pytest.approx(_h100_ratio() * 4 / 2)
    assert ctx.verdict.verdict == "communication-bound"
    # FSDP judged too: no dot reads a weight here, so no per-chip batch, the reason said
    assert fsdp.verdict.rule.startswith("FSDP") and fsdp.verdict.value is None and fsdp.verdict.reason
    assert fsdp.verdict.threshold == pytest.approx(_h100_ratio())
    assert axis.context.passes == 4
    record = _schema_valid(report)
    assert record["target"] == {"name": h100.name, "source": "--target", "projected": False, "measured_on": None}
    assert [r["role"] for r in record["axes"][0]["roles"]] == ["context", "fsdp"]
    assert "context parallel + FSDP" in parallelism_markdown(report)


def test_point_to_point_outside_a_loop_is_no_pipeline_and_all_to_all_without_router_no_expert():
    text = TWO_ROLES.replace('  %loop = (s32[], f32[2,64,2,32], f32[2,2,64,32]) while(%init), condition=%cond, '
                             'body=%body, backend_config={"known_trip_count":{"n":"4"}}\n',
                             '  %lone = f32[2,64,2,32]{3,2,1,0} collective-permute(%k0), channel_id=4, '
                             'source_target_pairs={{0,1},{1,2},{2,3},{3,0}}\n'
                             '  %a2a = f32[2,64,2,32]{3,2,1,0} all-to-all(%k0), channel_id=5, '
                             'replica_groups={{0,1,2,3}}, dimensions={1}\n')
    report = diagnose(DiagnoseInputs([parse_hlo_text(text)]))
    (axis,) = report.axes
    assert [r.role for r in axis.roles] == ["fsdp"]
    patterns = {c.attribution.site.name: c.pattern for c in report.collectives}
    assert patterns["lone"] == "point-to-point" and patterns["a2a"] == "all-to-all"


# --- TPU programs: matmuls as convolutions, weights through wrappers -------------------------------

@pytest.mark.parametrize("model", ["llama3_8b", "qwen3_1.7b", "deepseek3"])
def test_maxtext_tpu_scanned_fsdp_gets_its_per_chip_batch(shared_traces, model):
    v6e = get_chip("tpu-v6e", load_hardware(None))
    report = from_hlo(shared_traces / MAXTEXT_TPU / f"reference_hlo_{model}.txt", v6e)
    # MaxText's hlo_diff_test: per_device_batch_size=1, max_target_length=128 -> 128 tokens per chip
    assert report.per_chip_tokens.value == 1 * 128
    (axis,) = [a for a in report.axes if a.role.role == "fsdp"]
    assert axis.verdict.value == 128 and axis.verdict.verdict == "communication-bound"
    assert axis.verdict.threshold == pytest.approx(critical_ratio(v6e, axis_link(v6e), "bf16"))
    # the text is cut before its ENTRY: the layers' loop and its trip count are lost, so no bytes per step
    assert axis.bytes_per_step is None and axis.bytes_per_execution > 0


SPARSECORE_GATHER = """HloModule sc, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%gather (w1: f32[1,16,32]) -> f32[1,64,32] {
  %w1 = f32[1,16,32]{2,1,0} parameter(0)
  ROOT %ag = f32[1,64,32]{2,1,0} all-gather(%w1), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true
}

ENTRY %main (ws: f32[3,16,32], x: f32[96,64]) -> f32[3,16,32] {
  %ws = f32[3,16,32]{2,1,0} parameter(0)
  %x = f32[96,64]{1,0} parameter(1)
  %i = s32[] constant(1)
  %z = s32[] constant(0)
  %layer = f32[1,16,32]{2,1,0} dynamic-slice(%ws, %i, %z, %z), dynamic_slice_sizes={1,16,32}
  %start = ((f32[1,16,32]), f32[1,64,32], u32[]) async-start(%layer), async_execution_thread="sparsecore", calls=%gather
  %done = f32[1,64,32]{2,1,0} async-done(%start)
  %wg = f32[64,32]{1,0} bitcast(%done)
  %y = f32[96,32]{1,0} dot(%x, %wg), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %gw = f32[64,32]{1,0} dot(%x, %y), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %g = f32[16,32]{1,0} reduce-scatter(%gw), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=%add
  ROOT %r = f32[3,16,32]{2,1,0} copy(%ws)
}
"""


def test_sparsecore_wrapped_gather_of_a_stacked_layer_gives_the_per_chip_batch():
    """The gather runs in an async SparseCore call of a dynamic slice of the stacked layers' weights; the dot
    reads its bitcast. Per-chip batch: x[96, 64] @ w[64, 32] -> 96 tokens."""
    h100 = get_chip("h100-sxm", load_hardware(None))
    report = diagnose(DiagnoseInputs([parse_hlo_text(SPARSECORE_GATHER)], chip=h100))
    assert report.per_chip_tokens.value == 96
    (axis,) = report.axes
    assert axis.role.role == "fsdp"
    patterns = sorted(c.pattern for c in report.collectives)
    assert patterns == ["gradient reduce-scatter", "parameter all-gather"]
    assert axis.verdict.value == 96 and axis.verdict.threshold == pytest.approx(_h100_ratio())


GATHERED_KV = """HloModule gathered_kv, num_partitions=4

ENTRY %main (q: f32[2,2,64,32], k: f32[2,64,2,32]) -> f32[2,2,64,256] {
  %q = f32[2,2,64,32]{3,2,1,0} parameter(0)
  %k = f32[2,64,2,32]{3,2,1,0} parameter(1)
  %kg = f32[2,256,2,32]{3,2,1,0} all-gather(%k), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true
  %kt = f32[2,2,32,256]{3,2,1,0} transpose(%kg), dimensions={0,2,3,1}
  ROOT %s = f32[2,2,64,256]{3,2,1,0} dot(%q, %kt), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}
}
"""


def test_all_gather_context_parallelism():
    """K gathered along the sequence (4 x 64 -> 256) and read by QK^T: all-gather context parallelism, the
    chip's 64 queries against the whole sequence, 2 query heads on 2 K/V heads."""
    h100 = get_chip("h100-sxm", load_hardware(None))
    report = diagnose(DiagnoseInputs([parse_hlo_text(GATHERED_KV)], chip=h100))
    assert [c.pattern for c in report.collectives] == ["K/V all-gather"]
    (axis,) = report.axes
    assert axis.role.role == "context" and axis.context.style == "all-gather"
    assert axis.context.attention.seq_per_chip == 64 and axis.context.attention.head_dim == 32
    assert axis.context.attention.heads_per_kv_head == 1
    assert report.per_chip_tokens.value is None        # the gathered keys are no weight
    # s > (C/W) b H_kv / (2 H) = (C/W) x 4 / 2
    assert axis.verdict.value == 64 and axis.verdict.threshold == pytest.approx(_h100_ratio() * 4 / 2)


GATHERED_KV_KERNEL = """HloModule gathered_kv_kernel, num_partitions=4

ENTRY %main (q: f32[2,64,4,32], k: f32[2,64,2,32], v: f32[2,64,2,32]) -> f32[2,64,4,32] {
  %q = f32[2,64,4,32]{3,2,1,0} parameter(0)
  %k = f32[2,64,2,32]{3,2,1,0} parameter(1)
  %v = f32[2,64,2,32]{3,2,1,0} parameter(2)
  %kgs = (f32[2,64,2,32]{3,2,1,0}, f32[2,256,2,32]{3,2,1,0}) all-gather-start(%k), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true
  %kg = f32[2,256,2,32]{3,2,1,0} all-gather-done(%kgs)
  %vg = f32[2,256,2,32]{3,2,1,0} all-gather(%v), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true
  %vc = f32[2,256,2,32]{3,2,1,0} copy(%vg)
  %o = (f32[2,64,4,32]{3,2,1,0}, u8[0]{0}) custom-call(%q, %kg, %vc), custom_call_target="__cudnn$fmhaSoftmax"
  ROOT %out = f32[2,64,4,32]{3,2,1,0} get-tuple-element(%o), index=0
}
"""


def test_all_gather_context_parallelism_read_by_a_fused_attention_kernel():
    """K and V gathered along the sequence (4 x 64 -> 256) and read only by cuDNN's fused attention (a
    custom-call, no dot): all-gather context parallelism. [batch, sequence, heads, head dim]: the chip's 64
    queries, head dim 32, 4 query heads on 2 K/V heads."""
    h100 = get_chip("h100-sxm", load_hardware(None))
    report = diagnose(DiagnoseInputs([parse_hlo_text(GATHERED_KV_KERNEL)], chip=h100))
    assert [c.pattern for c in report.collectives] == ["K/V all-gather", "K/V all-gather"]
    (axis,) = report.axes
    assert axis.role.role == "context" and [r.role for r in axis.roles] == ["context"]
    assert axis.context.style == "all-gather"
    shape = axis.context.attention
    assert (shape.seq_per_chip, shape.head_dim, shape.heads_per_kv_head) == (64, 32, 2)
    assert report.per_chip_tokens is None or report.per_chip_tokens.value is None   # K/V are no weights
    # s > (C/W) b H_kv / (2 H) = (C/W) x 4 x 2 / (2 x 4) = C/W
    assert axis.verdict.value == 64 and axis.verdict.threshold == pytest.approx(_h100_ratio())
    # one forward gather of K and one of V: 2 x [2, 256, 2, 32] f32 (the gathered arrays)
    assert axis.context.bytes_per_pass == 2 * 2 * 256 * 2 * 32 * 4


@pytest.mark.parametrize("change", [
    ('custom_call_target="__cudnn$fmhaSoftmax"', 'custom_call_target="__cublas$gemm"'),   # no attention kernel
    ("%o = (f32[2,64,4,32]{3,2,1,0}, u8[0]{0}) custom-call(%q, %kg, %vc)",                  # K/V as the query
     "%o = (f32[2,64,4,32]{3,2,1,0}, u8[0]{0}) custom-call(%kg, %q, %q)"),
])
def test_gather_beside_a_kernel_that_does_not_read_it_as_keys_is_not_context(change):
    report = diagnose(DiagnoseInputs([parse_hlo_text(GATHERED_KV_KERNEL.replace(*change))]))
    assert "K/V all-gather" not in [c.pattern for c in report.collectives]
    assert all(a.context is None for a in report.axes)


ROUTED_FSDP = """HloModule routed, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%gt (x: f32[], y: f32[]) -> pred[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %c = pred[] compare(%x, %y), direction=GT
}

ENTRY %main (w: f32[256,1024], x: f32[64,1024], r: f32[1024,8], slots: f32[4,8,1024]) -> f32[256,1024] {
  %w = f32[256,1024]{1,0} parameter(0)
  %x = f32[64,1024]{1,0} parameter(1)
  %r = f32[1024,8]{1,0} parameter(2)
  %wg = f32[1024,1024]{1,0} all-gather(%w), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  %scores = f32[64,8]{1,0} dot(%x, %r), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %top = (f32[64,2]{1,0}, s32[64,2]{1,0}) custom-call(%scores), custom_call_target="TopK", called_computations={%gt}
  %slots = f32[4,8,1024]{2,1,0} parameter(3)
  %sent = f32[4,8,1024]{2,1,0} all-to-all(%slots), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}
  %h = f32[4,8,1024]{2,1,0} dot(%sent, %wg), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  ROOT %g = f32[256,1024]{1,0} reduce-scatter(%wg), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=%add
}
"""


def test_routing_leads_over_heavier_parameter_gathers():
    """Mixtral-like: the parameter all-gathers move far more bytes than the all-to-all, yet the axis routes
    tokens (a top-k router): expert parallelism first, FSDP second, each judged."""
    report = diagnose(DiagnoseInputs([parse_hlo_text(ROUTED_FSDP)]))
    (axis,) = report.axes
    patterns = {c.attribution.site.name: c.pattern for c in report.collectives}
    assert patterns["sent"] == "expert all-to-all" and patterns["wg"] == "parameter all-gather"
    assert [r.role for r in axis.roles] == ["expert", "fsdp"]
    assert axis.expert.routing.experts == 8 and axis.expert.routing.top_k == 2
    # capacity: the all-to-all's 4 x 8 x 1,024 elements over E x D = 8 x 1,024
    assert axis.expert.capacity == 4
    assert axis.roles[0].verdict.reason == "no target chip: give --target"


def test_ring_around_a_fused_attention_kernel_is_context_not_pipeline():
    """The ring's loop calls a fused attention kernel (cuDNN flash attention), not a dot: still K/V passes
    (a permute in a loop is no pipeline stage when the loop computes attention)."""
    text = TWO_ROLES.replace(
        "  %kt = f32[2,2,32,64]{3,2,1,0} transpose(%k), dimensions={0,2,3,1}\n"
        "  %scores = f32[2,2,64,64]{3,2,1,0} dot(%q, %kt), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, "
        "rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n",
        "  %qb = f32[2,64,4,32]{3,2,1,0} broadcast(%q), dimensions={0,2,1,3}\n"
        "  %o = (f32[2,64,4,32]{3,2,1,0}, u8[0]{0}) custom-call(%qb, %k, %k), "
        "custom_call_target=\"__cudnn$fmhaSoftmax\"\n")
    assert "__cudnn$fmhaSoftmax" in text
    report = diagnose(DiagnoseInputs([parse_hlo_text(text)]))
    (axis,) = report.axes
    assert [r.role for r in axis.roles] == ["context", "fsdp"] and axis.pipeline is None
    # [batch, sequence, heads, head dim]: 64 tokens per chip, head dim 32, 4 query heads on 2 K/V heads
    shape = axis.context.attention
    assert (shape.seq_per_chip, shape.head_dim, shape.heads_per_kv_head) == (64, 32, 2)
