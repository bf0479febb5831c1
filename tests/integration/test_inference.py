"""traceview inference on the serving sample and on a real TPU trace.

References, all independent of traceview: the sizes of the sample's arrays computed from its config
(capture.json), XLA's own ``compiled.cost_analysis()`` FLOPs recorded at capture, the chip figures in
the hardware database put through the book's formulas by hand, and the trace's own step annotations
(each ``StepTraceAnnotation`` wraps exactly one prefill or decode call).
"""

from __future__ import annotations

import json
import math

import pytest

import traceview
from traceview.inference.view import inference_from_analysis
from traceview.render.analyze_views import report_sections
from traceview.render.inference import inference_json
from traceview.trace.read import ReadOptions


@pytest.fixture(scope="module")
def meta(serving):
    return json.loads((serving / "capture.json").read_text())


@pytest.fixture(scope="module")
def on_v5e(serving):
    return traceview.load(serving, target="tpu-v5e")


def _sizes(cfg: dict) -> tuple[int, int]:
    """(weight bytes, KV-cache bytes) of the sample's model, from its config: bf16, 2 bytes an element."""
    d, f, v, layers = cfg["d_model"], cfg["d_ff"], cfg["vocab"], cfg["layers"]
    per_layer = 4 * d * d + 2 * d * f + 2 * d        # wq wk wv wo, w1 w2, two norms
    weights = 2 * v * d + d + layers * per_layer      # embed, unembed, final norm
    head_dim = d // cfg["heads"]
    kv = 2 * layers * cfg["batch"] * cfg["max_seq"] * cfg["heads"] * head_dim   # k and v
    return 2 * weights, 2 * kv


def test_phases_are_recognised_with_weight_and_cache_bytes_equal_to_the_arrays(on_v5e, meta):
    cfg = meta["config"]
    weight_bytes, kv_bytes = _sizes(cfg)
    record = inference_json(on_v5e.inference())
    by_phase = {p["phase"]: p for p in record["phases"]}
    assert sorted(by_phase) == ["decode", "prefill"]
    decode, prefill = by_phase["decode"], by_phase["prefill"]
    assert decode["module"] == "jit_decode" and prefill["module"] == "jit_prefill"
    for phase in (decode, prefill):
        assert phase["param_bytes"] == weight_bytes
        assert phase["kv_cache_bytes"] == kv_bytes
        assert phase["batch"] == cfg["batch"]
        assert all(c["donated"] for c in phase["kv_cache_parameters"])
        assert phase["max_sequence_length"] == cfg["max_seq"]
    assert decode["steps"] == cfg["requests"] * cfg["decode_steps"]
    assert prefill["steps"] == cfg["requests"]
    assert decode["tokens_per_step"] == cfg["batch"]
    assert prefill["tokens_per_step"] == cfg["batch"] * cfg["prompt"]
    assert any("input_output_alias" in line for line in decode["recognised_by"])
    # the capture's own record of the calls, in order: prefill first, then decode steps
    assert meta["calls"][0] == "prefill" and meta["calls"].count("decode") == decode["steps"]


def test_flops_are_xlas_and_the_decode_floor_is_the_books(on_v5e, meta):
    cfg = meta["config"]
    weight_bytes, kv_bytes = _sizes(cfg)
    record = inference_json(on_v5e.inference())
    decode = next(p for p in record["phases"] if p["phase"] == "decode")
    assert decode["flops"] == meta["xla_cost_analysis"]["jit_decode"]["flops"]
    # by hand: v5e, f32 dots run at the bf16 MXU rate (197 TFLOP/s), HBM 810 GB/s (the book's figures)
    compute_s = meta["xla_cost_analysis"]["jit_decode"]["flops"] / 1.97e14
    memory_s = (weight_bytes + kv_bytes) / 8.1e11
    assert memory_s > compute_s
    assert decode["floor_us"] == pytest.approx(max(compute_s, memory_s) * 1e6, rel=1e-12)
    assert decode["floor_bound"] == "memory"
    prefill = next(p for p in record["phases"] if p["phase"] == "prefill")
    assert prefill["floor_us"] == pytest.approx(meta["xla_cost_analysis"]["jit_prefill"]["flops"] / 1.97e14 * 1e6)
    # measured on a CPU: no efficiency is claimed for the v5e
    assert decode["efficiency"] is None and "cpu" in decode["reasons"]["efficiency"]


def test_critical_batch_on_v5e_is_the_books_240(on_v5e, meta):
    record = inference_json(on_v5e.inference())
    assert record["critical_batch"] == pytest.approx(1.97e14 * 2 / (2 * 8.1e11))
    assert 235 < record["critical_batch"] < 250
    detail = record["critical_batch_detail"]
    assert detail["bytes_per_weight"] == 2.0 and detail["measured_batch"] == meta["config"]["batch"]
    cfg = meta["config"]
    weight_bytes, kv_bytes = _sizes(cfg)
    per_token = kv_bytes / (cfg["batch"] * cfg["max_seq"])
    assert record["kv_bytes_per_token"] == per_token == 2 * 2 * cfg["layers"] * cfg["d_model"]
    assert record["max_sequences"] == math.floor((16e9 - weight_bytes) / (per_token * cfg["max_seq"]))
    # the projection keeps weights fixed and grows FLOPs and KV bytes with the batch
    rows = {r["batch"]: r for r in record["batch_projection"]}
    assert rows[cfg["batch"]]["floor_us"] == pytest.approx(
        next(p for p in record["phases"] if p["phase"] == "decode")["floor_us"])
    assert rows[2 * cfg["batch"]]["hbm_bytes"] == weight_bytes + 2 * kv_bytes


def test_the_phases_are_found_when_the_reading_kept_no_executions(serving, on_v5e):
    """Loaded as `analyze` loads (the op executions not kept), the serving view reads them again: the same
    phases and critical batch as with them kept."""
    bare = traceview.load(serving, target="tpu-v5e", read_options=ReadOptions(keep_ops=False))
    assert bare.pipeline.profile.kept is None
    report = inference_from_analysis(bare.pipeline)
    assert [(p.phase, p.module, p.steps) for p in report.phases] == \
        [(p.phase, p.module, p.steps) for p in on_v5e.inference().phases] != []
    assert report.critical == on_v5e.inference().critical is not None


def test_each_call_lies_inside_its_step_annotation(serving):
    analysis = traceview.load(serving)
    report = analysis.inference()
    steps = analysis.steps
    calls = sorted((row.start_us, row.start_us + row.time_us) for p in report.phases
                   for row in p.calls.itertuples())
    assert len(calls) == len(steps)
    for (start, end), step in zip(calls, steps.itertuples()):
        assert step.start_us <= start and end <= step.start_us + step.time_us + 1e-6


def test_on_the_cpu_it_ran_on_the_efficiency_is_floor_over_median(serving):
    report = traceview.load(serving).inference()
    decode = report.phase("decode")
    assert decode.efficiency == pytest.approx(decode.floor_us / decode.step_time_us)
    assert decode.time_per_output_token_us == decode.step_time_us
    assert decode.tokens_per_s_per_chip == pytest.approx(4 / (decode.step_time_us * 1e-6))


def test_analyze_shows_an_inference_section_only_for_serving(serving, sample_traces):
    def titles(analysis: traceview.Analysis) -> list[str]:
        return [s.title for s in report_sections(analysis.pipeline, analysis.advice(), analysis.scope_tree(),
                                                 analysis.serving())]

    record = traceview.load(serving).to_json()
    assert [p["phase"] for p in record["inference"]["phases"]] == ["prefill", "decode"]
    assert titles(traceview.load(serving))[-1] == "Inference"
    mlp = traceview.load(sample_traces / "mlp")
    assert "inference" not in mlp.to_json() and mlp.serving() is None
    assert "Inference" not in titles(mlp)


def test_each_program_is_listed_as_its_hlo_reads(shared_traces):
    """The report's programs hold each module's signature as read from its HLO, not as recognising the phases
    left it (the H200 decode capture: its prefill makes the KV cache that its decode step updates)."""
    from traceview.inference.programs import read_program

    analysis = traceview.load(shared_traces / "h200" / "decode")
    report = analysis.inference()
    assert {p.phase for p in report.phases} == {"prefill", "decode"}
    for ran, module in zip(report.programs, analysis.pipeline.hlo.ran, strict=False):
        read = read_program(module)
        assert ran.hlo and ran.module == module.name
        assert (ran.weight_bytes, ran.kv_cache_bytes, ran.parameters) == \
            (read.weight_bytes, read.kv_cache_bytes, len(read.parameters)), module.name


def test_a_real_tpu_trace_says_what_is_missing(shared_traces):
    """tpu_inference_2 (TPU v6e x4) is JAX, but its one repeated program (jit_f, 100 calls) adds 1 to three
    host-offloaded f32 arrays: no KV cache, no tokens. The report says so instead of inventing phases."""
    analysis = traceview.load(shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb")
    record = inference_json(analysis.inference())
    assert record["phases"] == [] and record["critical_batch"] is None
    assert record["target"]["name"] == "tpu-v6e"
    (statement,) = record["warnings"]
    assert statement.startswith("no serving pattern") and "jit_f (x100 per device" in statement
    programs = {p["module"]: p for p in record["programs"]}
    assert programs["jit_f"]["calls_per_device"] == 100 and programs["jit_f"]["devices"] == 4
    assert programs["jit_f"]["kv_cache_parameters"] == [] and programs["jit_f"]["token_input"] is None
    assert record["reasons"]["critical_batch"] == "no serving phase recognised"
    assert "inference" not in analysis.to_json()


def test_the_proto_reader_keeps_input_output_alias_as_xla_prints_it(serving):
    """The donated cache is read from the module proto; XLA's own text dump prints the same aliasing."""
    import re

    from traceview.parsers.hlo.proto import read_hlo_proto

    for proto in sorted((serving / "hlo").glob("*.cpu_after_optimizations.hlo.pb")):
        text = proto.with_name(proto.name.replace(".hlo.pb", ".txt")).read_text()
        header = re.search(r"input_output_alias=(\{ .*? \}), ", text.splitlines()[0]).group(1)
        assert read_hlo_proto(proto).attributes["input_output_alias"] == header
