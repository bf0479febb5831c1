"""The numbers a user reads first: what to fix first (gain), time that adds up, honest projections,
unknown never zero, and CI verdicts on unrelated inputs.

Units are checked by hand calculations on small frames; the real TPU v6e trace against XProf's own
overview (idle) and roofline tool (program-level efficiency), run here through xprof's Python API.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from traceview.analysis.projection import projected_times
from traceview.analysis.roofline import gain_ps, summarize
from traceview.cli import main

TPU = Path("openxla-xprof") / "tpu_inference_2.xplane.pb"


# ------------------------------------------------------------------ units, by hand

def test_gain_is_the_gap_for_sync_work_and_at_most_the_exposed_time_for_async_work():
    gap = np.array([10.0, 10.0, 10.0, -3.0, np.nan])
    exposed = np.array([np.nan, 4.0, 25.0, np.nan, 1.0])
    # sync: the whole gap; async hidden but for 4: 4; async exposed 25 > gap: the gap; faster than
    # the roofline: nothing to win; unknown roofline: unknown
    out = gain_ps(gap, exposed)
    assert out[:4].tolist() == [10.0, 4.0, 10.0, 0.0] and np.isnan(out[4])


def test_projection_keeps_the_capture_fraction_and_never_beats_the_target_roofline():
    measured = np.array([100.0, 100.0, 100.0, 100.0])
    roof_capture = np.array([50.0, 150.0, 0.0, np.nan])   # 50% there; faster than its roofline; none; unknown
    roof_target = np.array([20.0, 30.0, 10.0, 10.0])
    projected, modelled = projected_times(measured, roof_capture, roof_target)
    # 20 / 0.5 = 40; 30 / min(1, 1.5) = 30; no capture roofline: kept as measured
    assert projected.tolist() == [40.0, 30.0, 100.0, 100.0] and modelled.tolist() == [True, True, False, False]
    assert (roof_target[modelled] / projected[modelled] <= 1).all()


def _chip():
    from traceview.hardware.database import get_chip, load_hardware

    return get_chip("tpu-v6e", load_hardware())


def test_mfu_is_null_with_a_reason_when_no_op_has_a_flop_count():
    # one custom kernel costed by its shapes alone (Pallas without cost_estimate): bytes, no FLOPs
    frame = pd.DataFrame({"op": ["kernel"], "flops": [0.0], "bytes_accessed": [1e9], "dtype": ["bf16"],
                          "time_ps": [1e9], "cost_lower_bound": [True], "has_cost": [True]})
    s = summarize(frame, _chip(), total_time_ps=2e9)
    assert s["mfu"] is None and s["flops"] is None and s["achieved_flops"] is None
    assert "no op has a FLOP count" in s["mfu_reason"]
    assert s["efficiency"] is not None          # the bytes still place it on the memory roofline


def test_peak_named_is_the_peak_used_and_precision_notes_only_for_matrix_work():
    # f32 elementwise work only: v6e has no fp32 peak, the bf16 figure is used and named, but the
    # "f32 matmuls run as bf16 passes on the MXU" note does not apply to it
    frame = pd.DataFrame({"op": ["add"], "flops": [1e12], "bytes_accessed": [1e9], "dtype": ["f32"],
                          "time_ps": [1e12], "has_cost": [True], "contraction": [False]})
    from traceview.analysis.roofline import roofline

    judged, warnings = roofline(frame, _chip())
    assert not any("MXU" in w for w in warnings)
    s = summarize(judged, _chip(), total_time_ps=1e12)
    assert s["mfu_dtype"] == "fp32" and s["mfu_peak_dtype"] == "bf16"
    assert s["mfu"] == pytest.approx(1e12 / (1.0 * 918e12))
    judged, warnings = roofline(frame.assign(contraction=[True]), _chip())
    assert any("MXU" in w for w in warnings)


def test_program_efficiency_by_hand_and_capped():
    # two ops on a 1e12 B/s, 1e15 FLOP/s chip: memory times 1 s and 3 s, compute 0.1 s: program
    # roofline = max(0.1, 4) = 4 s of a 10 s device time -> 40%
    frame = pd.DataFrame({"op": ["a", "b"], "flops": [1e14, 0.0], "bytes_accessed": [1e12, 3e12],
                          "dtype": ["bf16", "bf16"], "time_ps": [2e12, 5e12], "has_cost": [True, True]})
    chip = _chip().with_figures("test", peak_flops={"bf16": 1e15}, hbm_bandwidth=1e12)
    s = summarize(frame, chip, total_time_ps=10e12)
    assert s["efficiency"] == pytest.approx(0.4) and s["roofline_time_ps"] == pytest.approx(4e12)
    assert summarize(frame, chip, total_time_ps=1e12)["efficiency"] == 1.0    # never above 100%


# ------------------------------------------------------------------ the TPU v6e trace

@pytest.fixture(scope="module")
def tpu_json(shared_traces, tmp_path_factory):
    out = tmp_path_factory.mktemp("tpu") / "a.json"
    assert main(["analyze", str(shared_traces / TPU), "--format", "json", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def _xprof(shared_traces, tmp_path, tool):
    convert = pytest.importorskip("xprof.convert.raw_to_tool_data")
    path = tmp_path / TPU.name          # XProf caches its result beside the file it reads
    shutil.copy(shared_traces / TPU, path)
    data, _ = convert.xspace_to_tool_data([str(path)], tool, {"use_saved_result": False})
    return json.loads(data)


def test_tpu_top_list_starts_where_time_can_be_won(tpu_json):
    ops = {o["name"]: o for o in tpu_json["ops"]}
    ranked = [o["name"] for o in tpu_json["ops"] if o["gain_us"] is not None]
    # the copies the device waited on (their dones hold ~98% of the time) and the all-reduce first
    assert set(ranked[:5]) == {"copy-start.4", "copy-start.2", "copy-start", "copy-start.5", "all-reduce"}
    for hidden in ("copy-start.1", "copy-start.3"):   # fully hidden: nothing to win
        assert ops[hidden]["gain_us"] == pytest.approx(ops[hidden]["exposed_time_us"]) and ops[hidden]["gain_us"] < 10
        assert ops[hidden]["gap_us"] > 1e6          # its own distance from the roofline stays visible
    for o in tpu_json["ops"]:
        if o["gain_us"] is not None and o["exposed_time_us"] is not None:
            assert o["gain_us"] <= o["exposed_time_us"] + 1e-6
    assert "gain" in tpu_json["summary"]["gain_definition"]


def test_tpu_time_adds_up_per_device_and_per_step(tpu_json):
    s = tpu_json["summary"]
    assert s["active_devices"] == 4 and len(s["devices"]) == 4 and s["inactive_devices"] == []
    for d in s["devices"]:
        assert d["busy_us"] + d["idle_us"] == pytest.approx(d["span_us"], abs=1e-6)
    assert s["device_time_us"] + s["idle_us"] == pytest.approx(s["span_us"] * s["active_devices"], rel=1e-12)
    by_bound = s["time_by_bound_us"]
    assert sum(v for k, v in by_bound.items() if k != "idle") == pytest.approx(s["device_time_us"], rel=1e-9)
    assert by_bound["idle"] == pytest.approx(s["idle_us"])
    for step in s["steps"]:
        parts = step["time_by_bound_us"]
        assert sum(parts.values()) == pytest.approx(step["time_us"], rel=1e-9)   # bounds + idle = the step
        assert sum(v for k, v in parts.items() if k != "idle") <= step["time_us"] * (1 + 1e-12)


def test_tpu_idle_against_xprof_overview(tpu_json, shared_traces, tmp_path):
    """XProf's idle is span - sum of op self times (13.4% here); ours is span - union of op
    intervals, which counts overlapping ops once: the same spans, so ours = XProf's + the overlap."""
    pages = _xprof(shared_traces, tmp_path, "overview_page")
    analysis = next(p["p"] for p in pages if "device_idle_time_percent" in p.get("p", {}))
    xprof_idle_ps = float(analysis["idle_time_high_confidence_ps"])
    xprof_share = float(analysis["device_idle_time_percent"].rstrip("%")) / 100
    s = tpu_json["summary"]
    total_us = s["span_us"] * s["active_devices"]
    # XProf's definition, from our spans and self times, within 1% of its idle time (its spans start
    # at each line's timestamp, 0.1% longer than first-op-start .. last-op-end)
    assert (total_us - s["op_time_us"]) * 1e6 == pytest.approx(xprof_idle_ps, rel=1e-2)
    assert (total_us - s["op_time_us"]) / total_us == pytest.approx(xprof_share, abs=1e-3)
    # ours: the union; overlapping ops (self-time sum above busy) make it larger, by exactly the overlap
    assert s["idle_us"] / total_us > xprof_share
    assert s["idle_us"] - (total_us - s["op_time_us"]) == pytest.approx(s["op_time_us"] - s["device_time_us"])


def test_tpu_program_efficiency_against_xprof_roofline(tpu_json, shared_traces, tmp_path):
    tables = _xprof(shared_traces, tmp_path, "roofline_model")
    table = tables[0]
    cols = [c["id"] for c in table["cols"]]
    rows = [dict(zip(cols, (c.get("v") if c else None for c in r["c"]))) for r in table["rows"]]
    program = next(r for r in rows if r["category"] == "Program" and r["include_infeed_outfeed"])
    assert tpu_json["summary"]["efficiency"] == pytest.approx(program["roofline_efficiency"], rel=0.01)   # 4.35%
    assert tpu_json["summary"]["efficiency"] <= 1


def test_projection_onto_another_chip(shared_traces, tmp_path):
    out = tmp_path / "p.json"
    assert main(["analyze", str(shared_traces / TPU), "--target", "tpu-v5e", "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["target"]["projected"] is True and doc["target"]["measured_on"] == "tpu-v6e"
    effs = [o["efficiency"] for o in doc["ops"] if o["efficiency"] is not None]
    assert effs and max(effs) <= 1 + 1e-9
    assert all(o["gap_us"] >= -1e-6 for o in doc["ops"] if o["gap_us"] is not None)
    s = doc["summary"]
    assert s["projected"] is True and s["projected_time_us"] > 0 and s["mfu"] is not None
    assert all("projected_time_us" in step for step in s["steps"])
    assert not any("ran faster than the roofline allows" in w and "tpu-v5e" in w for w in doc["warnings"])
    assert any(w.startswith("projection:") for w in doc["warnings"])


# ------------------------------------------------------------------ every trace and sample

def _all_inputs():
    from tests.conftest import SHARED_TRACES

    repo = Path(__file__).resolve().parents[2]
    paths = [repo / "sample_traces" / n for n in ("mlp", "sharded", "transformer")]
    if SHARED_TRACES.is_dir():
        paths += sorted(SHARED_TRACES.rglob("*.xplane.pb"))
    return [p for p in paths if p.exists()]


@pytest.mark.parametrize("path", _all_inputs(), ids=lambda p: p.parent.name + "/" + p.name)
def test_busy_plus_idle_is_the_span_on_every_trace(path):
    from traceview.timeline.devices import device_time
    from traceview.trace.read import load_profile

    profile = load_profile(path)
    table = device_time(profile.op_executions())
    assert len(table) and (table["busy_ps"] + table["idle_ps"] == table["span_ps"]).all()
    assert (table["idle_ps"] >= 0).all()
    with_events = set(profile.op_executions()["device"].astype(str))
    assert set(table["device"]) == with_events


def test_devices_without_events_are_listed_apart(shared_traces, tmp_path):
    out = tmp_path / "g.json"
    assert main(["analyze", str(shared_traces / "tensorflow-profiler" / "GPU-multi-worker"), "--format", "json",
                 "-o", str(out)]) == 0
    s = json.loads(out.read_text())["summary"]
    # SOURCES.md: 8 V100s, only GPU:1, GPU:4 and GPU:6 have events
    assert s["active_devices"] == 3 and len(s["inactive_devices"]) == 5
    assert s["mfu"] is None and s["mfu_reason"]           # TensorFlow ops, no HLO: no FLOP count


# ------------------------------------------------------------------ CI verdicts

def test_unrelated_baseline_is_not_comparable(sample_traces, shared_traces, capsys):
    assert main(["check", str(sample_traces / "mlp"), "--baseline", str(shared_traces / TPU)]) == 2
    err = capsys.readouterr().err
    assert "not comparable:" in err and err.count("\n") == 1


def test_unrelated_hlo_baseline_is_not_comparable(shared_traces, capsys):
    nv = shared_traces / "NVIDIA-JAX-Toolbox"
    assert main(["check", str(nv / "pax_fsdp4_a100_proc0" / "dump"), "--baseline",
                 str(nv / "maxtext_fsdp4_h100" / "dump")]) == 2
    assert "not comparable:" in capsys.readouterr().err


def test_check_report_says_check_and_one_op_has_one_figure(sample_traces, tmp_path, capsys):
    assert main(["check", str(sample_traces / "mlp_slow"), "--baseline", str(sample_traces / "mlp")]) == 1
    assert capsys.readouterr().out.split("\n")[0].split()[2] == "check"
    out = tmp_path / "d.json"
    main(["check", str(sample_traces / "mlp_slow"), "--baseline", str(sample_traces / "mlp"), "--format", "json",
          "-o", str(out)])
    doc = json.loads(out.read_text())
    assert doc["command"] == "check"
    ops = {(o["module"], o["op"]): o for o in doc["ops"]}
    compared = 0
    for c in doc["checks"]:
        if c["name"].startswith("op:"):
            module, op = c["name"][3:].split("/", 1)
            row = ops[(module, op)]
            assert c["change"] == pytest.approx(row["change"])
            assert c["baseline"] == pytest.approx(row["base_time_us"]) and c["current"] == pytest.approx(row["new_time_us"])
            compared += 1
    assert compared > 3


def test_one_warning_per_op_and_cause_and_active_device_counts(shared_traces, tmp_path):
    out = tmp_path / "w.json"
    assert main(["analyze", str(shared_traces / "AMD-AGI-TraceLens" / "jax08_gemm"), "--format", "json",
                 "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    naming = [w for w in doc["warnings"] if "__amd_rocclr_copyBuffer.kd" in w]
    assert len(naming) == 1                               # no HLO instruction: said once
    assert not any("and 7 more devices" in w for w in doc["warnings"])   # 7 of the 8 GPUs ran nothing
    assert doc["summary"]["active_devices"] == 1 and len(doc["summary"]["inactive_devices"]) == 7


def test_projected_total_scales_busy_time_so_overlapping_ops_are_not_saved_twice():
    from traceview.analysis.projection import projected_total

    # two threads overlapping: self times 60 + 60 in 80 busy + 20 idle; both ops projected to half
    assert projected_total(80.0, 20.0, np.array([60.0, 60.0]), np.array([30.0, 30.0])) == 20.0 + 80.0 * 0.5


def test_cpu_sample_projected_onto_a_tpu_stays_positive(sample_traces, tmp_path):
    out = tmp_path / "p.json"
    assert main(["analyze", str(sample_traces / "mlp"), "--target", "tpu-v5e", "--format", "json",
                 "-o", str(out)]) == 0
    s = json.loads(out.read_text())["summary"]
    assert s["projected"] and 0 < s["projected_time_us"] and 0 < s["mfu"] < 1 and 0 < s["efficiency"] <= 1
    assert all(0 < step["projected_time_us"] <= step["time_us"] * 10 for step in s["steps"])
