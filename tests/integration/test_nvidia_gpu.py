"""NVIDIA H200 captures (../shared/traces/h200): command buffers read through, executions not kernels, TF32,
serving steps, the current dump syntax; against the programs' own wall-clock times (truth.json), hand counts
from their configs, and the same program run without command buffers."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest

import traceview
from traceview.parsers.hlo.command_buffers import KernelSchedule, place_kernels
from traceview.parsers.hlo.proto import parse_hlo_proto, proto_key
from traceview.parsers.xspace.reader import read_xplane

H200 = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "h200"
pytestmark = pytest.mark.skipif(not (H200 / "train").is_dir(), reason=f"H200 captures not available in {H200}")
PEAK_BF16 = 989e12                  # H200 SXM dense bf16 (hardware table, NVIDIA's datasheet)


def _truth(name: str) -> dict:
    return json.loads((H200 / name / "truth.json").read_text())


def _train_flops(truth: dict) -> float:
    """Hand count of one training step: 6 x matmul parameters x tokens, plus causal attention as XLA runs it
    (the full S x S scores: 4 B H S^2 Dh forward, x3 with the backward pass, per layer)."""
    c = truth["config"]
    matmul_params = truth["n_params"] - c["vocab"] * c["d"]            # all but the embedding table (a gather)
    attention = 4 * c["batch"] * c["heads"] * c["seq"] ** 2 * (c["d"] // c["heads"]) * 3 * c["layers"]
    return 6 * matmul_params * c["batch"] * c["seq"] + attention


@pytest.fixture(scope="module")
def loaded() -> dict[str, traceview.Analysis]:
    return {name: traceview.load(H200 / name) for name in ("train", "train_nocb", "kernels", "decode")}


@pytest.mark.parametrize("name", ["train", "train_nocb"])
def test_training_step_mfu_matches_the_hand_count(loaded, name):
    a = loaded[name]
    truth = _truth(name)
    hand = _train_flops(truth) / (truth["calls"]["train_step"]["us_per_call"] * 1e-6 * PEAK_BF16)
    assert hand == pytest.approx(0.39, abs=0.01)
    assert a.summary.mfu == pytest.approx(hand, rel=0.15)
    time_by_bound = a.to_json()["summary"]["time_by_bound_us"]
    assert time_by_bound["unknown"] < 0.05 * sum(time_by_bound.values())


def test_command_buffers_give_the_ops_of_the_same_program_run_without_them(loaded):
    """The two captures are separate compiles (instruction names differ): ops are matched by what JAX op
    they come from and their shape, and compared over the 15 longest of the run without command buffers."""
    def by_source(a) -> dict[tuple, float]:
        times: dict[tuple, float] = defaultdict(float)
        for r in a.ops.itertuples():
            times[(r.op_name, r.shape)] += r.self_time_us
        return times

    with_cb, without = by_source(loaded["train"]), by_source(loaded["train_nocb"])
    longest = sorted(without, key=without.__getitem__, reverse=True)[:15]
    matched = [k for k in longest if k in with_cb]
    assert len(matched) >= 13
    for key in matched:
        assert with_cb[key] == pytest.approx(without[key], rel=0.15), key
    assert any("command buffers" in w for w in loaded["train"].warnings)


def test_kernels_are_placed_as_the_trace_without_command_buffers_labels_them():
    """train_nocb labels each kernel with its own op: placing its kernel names by the command-buffer rule
    (without those labels) must give the same op for every kernel."""
    path = next((H200 / "train_nocb").rglob("*.xplane.pb"))
    protos = read_xplane(path).hlo_protos
    schedules = {proto_key(k)[0]: KernelSchedule.of(parse_hlo_proto(b)) for k, b in protos.items()}
    events = json.loads(gzip.decompress(next((H200 / "train_nocb").rglob("*.trace.json.gz")).read_bytes()))
    device = {e["pid"] for e in events["traceEvents"] if e.get("name") == "process_name"
              and e["args"]["name"].startswith("/device:GPU")}
    kernels = sorted((e for e in events["traceEvents"] if e.get("ph") == "X" and e["pid"] in device),
                     key=lambda e: e["ts"])
    runs: list[list[dict]] = []
    for e in kernels:
        if runs and runs[-1][0]["args"]["hlo_module"] == e["args"]["hlo_module"]:
            runs[-1].append(e)
        else:
            runs.append([e])
    checked = 0
    for run in runs:
        placement = place_kernels([e["name"] for e in run], schedules[run[0]["args"]["hlo_module"]])
        assert list(placement.ops) == [e["args"]["hlo_op"] for e in run]
        checked += len(run)
    assert checked == len(kernels) > 1000


def test_a_library_call_of_two_kernels_is_one_execution(loaded):
    ops = loaded["kernels"].ops.set_index("name")
    matmul = ops.loc["custom-call.1"]
    calls = _truth("kernels")["calls"]["matmul"]
    assert matmul["occurrences"] == 5 and matmul["kernels"] == 10
    assert matmul["flops"] == pytest.approx(5 * calls["flops"])
    assert 0.72 <= matmul["efficiency"] <= 0.95
    add = ops.loc["wrapped_add"]
    assert add["bound"] == "memory" and 0.85 <= add["efficiency"] <= 0.95


def test_f32_dots_at_default_precision_are_judged_as_tf32(loaded):
    ops = loaded["train_nocb"].ops
    tf32 = ops[(ops["dtype"] == "f32") & ops["contraction"].astype(bool)]
    assert not tf32.empty
    assert (tf32["efficiency"] <= 1.0).all()
    assert any("TF32" in w for w in loaded["train_nocb"].warnings)


@pytest.mark.parametrize("name", ["train", "train_nocb", "kernels", "decode"])
def test_no_op_is_above_its_roofline_without_a_reason(loaded, name):
    ops = loaded[name].ops
    above = ops[ops["efficiency"] > 1.0]
    assert above["above_roofline_reason"].notna().all()


def test_serving_steps_are_program_executions_not_kernels(loaded):
    report = loaded["decode"].inference()
    phases = {p.phase: p for p in report.phases}
    assert set(phases) == {"prefill", "decode"}
    assert phases["prefill"].steps == 1
    assert phases["decode"].steps == _truth("decode")["config"]["steps"]
    assert phases["decode"].step_time_us == pytest.approx(_truth("decode")["calls"]["decode_step"]["us_per_call"],
                                                          rel=0.20)
    assert report.kv_bytes_per_token == _truth("decode")["kv_bytes_per_token"]


@pytest.mark.parametrize("name", ["train_nocb", "train", "kernels", "decode"])
def test_current_gpu_dumps_read_with_module_flops_near_the_hand_count(name):
    modules = {m["name"]: m for m in traceview.hlo(H200 / name / "hlo").to_json()["modules"]}
    truth = _truth(name)
    if name.startswith("train"):
        expected = {"jit_train_step": _train_flops(truth)}
    elif name == "kernels":
        expected = {"jit_matmul": truth["calls"]["matmul"]["flops"], "jit_add": truth["calls"]["add"]["flops"]}
    else:
        c = truth["config"]
        matmul_params = truth["n_params"] - c["vocab"] * c["d"]
        head_dim = c["d"] // c["heads"]
        expected = {   # attention over the whole cache (max_len) for decode, the causal prompt (full scores)
            "jit_decode_step": 2 * matmul_params * c["batch"]
            + 4 * c["batch"] * c["heads"] * c["max_len"] * head_dim * c["layers"],
            "jit_prefill": 2 * matmul_params * c["batch"] * c["prompt"]
            + 4 * c["batch"] * c["heads"] * c["prompt"] ** 2 * head_dim * c["layers"]}
    for module, flops in expected.items():
        assert modules[module]["flops"] == pytest.approx(flops, rel=0.15), module


def test_what_the_chip_was_seen_to_reach_beside_its_datasheet(loaded):
    """The fastest GEMM and copy of the trace against the programs' own wall-clock rates (truth.json); the
    roofline keeps the datasheet peaks."""
    summary = loaded["kernels"].to_json()["summary"]
    calls = _truth("kernels")["calls"]
    assert summary["seen_flops"]["op"] == "custom-call.1"
    assert summary["seen_flops"]["value"] == pytest.approx(calls["matmul"]["flop_per_s"], rel=0.10)
    assert summary["seen_flops"]["share_of_peak"] == pytest.approx(calls["matmul"]["flop_per_s"] / PEAK_BF16, rel=0.10)
    assert summary["seen_bandwidth"]["op"] == "wrapped_add"
    assert summary["seen_bandwidth"]["value"] == pytest.approx(calls["add"]["byte_per_s"], rel=0.10)
    projected = loaded["kernels"].retarget("h100-sxm").to_json()["summary"]
    assert projected["seen_flops"] is None        # seen on the H200, not on the chip projected onto


def test_graph_launches_are_the_steps_of_a_trace_without_step_annotations(loaded):
    """decode has no StepTraceAnnotation: each launch of the main program's command buffer is a step."""
    steps = loaded["decode"].to_json()["summary"]["steps"]
    truth = _truth("decode")
    assert len(steps) == truth["config"]["steps"]
    times = sorted(s["time_us"] for s in steps)
    assert times[len(times) // 2] == pytest.approx(truth["calls"]["decode_step"]["us_per_call"], rel=0.20)


def test_command_buffers_read_through_with_the_hlo_from_a_dump_beside_the_trace(tmp_path):
    """A trace whose metadata plane (the HLO) is gone, with the XLA dump beside it: the same ops and MFU."""
    from traceview.parsers.xspace.schema import XSpace

    space = XSpace()
    space.ParseFromString(next((H200 / "train").rglob("*.xplane.pb")).read_bytes())
    kept = [plane for plane in space.planes if plane.name != "/host:metadata"]
    del space.planes[:]
    space.planes.extend(kept)
    run = tmp_path / "plugins" / "profile" / "run"
    run.mkdir(parents=True)
    (run / "vm.xplane.pb").write_bytes(space.SerializeToString())
    (tmp_path / "hlo").symlink_to(H200 / "train" / "hlo")
    without_protos = traceview.load(tmp_path)
    assert not read_xplane(run / "vm.xplane.pb").hlo_protos
    assert "command_buffer_1" not in set(without_protos.ops["name"])
    assert without_protos.summary.mfu == pytest.approx(traceview.load(H200 / "train").summary.mfu, rel=0.01)


@pytest.mark.parametrize("name", ["train", "decode", "kernels"])
def test_the_trace_event_json_of_a_capture_gives_the_ops_of_its_xplane(loaded, name):
    """vm.trace.json.gz is the same capture as JSON (no HLO inside: the dump beside the log dir is read)."""
    from_json = traceview.load(next((H200 / name).rglob("*.trace.json.gz")))
    ops = from_json.ops.set_index(["module", "name"])
    reference = loaded[name].ops.set_index(["module", "name"])
    assert set(ops.index) == set(reference.index)
    assert (ops.loc[reference.index, "occurrences"] == reference["occurrences"]).all()
    assert (ops.loc[reference.index, "kernels"] == reference["kernels"]).all()
    assert from_json.summary.mfu == pytest.approx(loaded[name].summary.mfu, rel=1e-3)
