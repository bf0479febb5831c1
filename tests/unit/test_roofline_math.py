"""Roofline arithmetic against the book's worked numbers and XProf's roofline_model tool.

"How to Scale Your Model" (Austin et al. 2025) gives closed forms; every
expected number here is derived in the test from published chip figures,
never read back from traceview's output.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest

from traceview.analysis.roofline import collective_patterns, ridge_point, roofline, summarize
from traceview.hardware.database import load_hardware
from traceview.hardware.detect import detect_chip
from traceview.parsers.profile import Device
from traceview.vocabulary import NOT_COLLECTIVE, UNMODELLED

# Published figures (hardware_reference.md / the book / datasheets), not our table.
V5E_BF16, V5E_INT8, V5E_HBM, V5E_ICI_BIDI = 1.97e14, 3.94e14, 8.1e11, 9.0e10
H100_BF16, H100_HBM, H100_EGRESS = 9.89e14, 3.35e12, 4.5e11


@pytest.fixture(scope="module")
def db():
    return load_hardware()


def _matmul(B: int, D: int, F: int, itemsize: int, dtype: str) -> dict:
    return {"op": f"dot.B{B}", "flops": 2.0 * B * D * F, "bytes_accessed": float(itemsize * (B * D + D * F + B * F)),
            "dtype": dtype, "time_ps": 1e9}


def _collective(kind: str, payload: float, n: int, dcn: bool = False) -> dict:
    return {"op": kind, "flops": 0.0, "bytes_accessed": 0.0, "dtype": "bf16", "collective_kind": kind,
            "payload_bytes": payload, "group_size": n, "crosses_dcn": dcn, "time_ps": 1e12}


# ---------------------------------------------------------------- matmuls and ridge points

def test_v5e_bf16_matmul_turns_compute_bound_past_240(db):
    """Book part 1: compute-bound when B > C / W = 1.97e14 / 8.1e11 ~ 243 (for D, F >> B)."""
    D = F = 2 ** 16
    out, _ = roofline(pd.DataFrame([_matmul(200, D, F, 2, "bf16"), _matmul(300, D, F, 2, "bf16")]),
                      db["tpu-v5e"])
    assert list(out["bound"]) == ["memory", "compute"]
    assert ridge_point(db["tpu-v5e"], "bf16") == pytest.approx(V5E_BF16 / V5E_HBM)
    assert 235 < ridge_point(db["tpu-v5e"], "bf16") < 250


def test_flip_point_matches_closed_form(db):
    """2BDF/C = 2(BD + DF + BF)/W solves to B* = C·D·F / (D·F·W - C·(D + F))."""
    D, F = 8192, 32768
    expected = V5E_BF16 * D * F / (D * F * V5E_HBM - V5E_BF16 * (D + F))
    batch = np.arange(200, 320)
    frame = pd.DataFrame([_matmul(int(b), D, F, 2, "bf16") for b in batch])
    out, _ = roofline(frame, db["tpu-v5e"])
    first_compute = batch[(out["bound"] == "compute").to_numpy()].min()
    assert first_compute == math.floor(expected) + 1


def test_book_int8_matmul_on_v5e_is_compute_bound_above_271(db):
    """Book part 2, question 4: int8[16384, 4096] x int8[B, 4096] on a TPU v5e: FLOPs-bound when B > 271.

    The book rounds the FLOPs 2·4096·16384·B = 1.34e8·B to 1.3e8·B; solved exactly,
    2DF·B / C = (DF + (D + F)·B) / W gives B* = C·D·F / (2·D·F·W - C·(D + F)) = 262.6."""
    D, F = 4096, 16384
    exact = V5E_INT8 * D * F / (2 * D * F * V5E_HBM - V5E_INT8 * (D + F))
    rounded = 6.7e7 / V5E_HBM / (1.3e8 / V5E_INT8 - 2e4 / V5E_HBM)       # the book's own arithmetic
    assert rounded == pytest.approx(271, abs=1)
    batch = np.arange(240, 300)
    rows = [{"op": f"B{b}", "flops": 2.0 * 4096 * 16384 * b, "bytes_accessed": 16384 * 4096 + 4096 * b + 16384 * b,
             "dtype": "s8", "time_ps": 1e9} for b in batch]
    out, warnings = roofline(pd.DataFrame(rows), db["tpu-v5e"])
    assert db["tpu-v5e"].peak_flops["int8"] == V5E_INT8
    first_compute = batch[(out["bound"] == "compute").to_numpy()].min()
    assert first_compute == math.floor(exact) + 1
    assert abs(first_compute - rounded) / rounded < 0.04
    assert warnings == []


def test_h100_ridge_is_about_295(db):
    """Book part 12, quiz 1 question 3: 990e12 / 3.35e12 = 295."""
    assert ridge_point(db["h100-sxm"], "bf16") == pytest.approx(H100_BF16 / H100_HBM)
    assert 290 < ridge_point(db["h100-sxm"], "bf16") < 300
    assert ridge_point(db["h100-sxm"], "f8e4m3fn") == pytest.approx(2 * H100_BF16 / H100_HBM, rel=1e-3)


def test_rates_intensity_efficiency_and_gap(db):
    row = _matmul(4096, 4096, 4096, 2, "bf16")
    out, _ = roofline(pd.DataFrame([row]), db["h100-sxm"])
    r = out.iloc[0]
    t_compute = row["flops"] / H100_BF16 * 1e12
    assert r["t_compute_ps"] == pytest.approx(t_compute)
    assert r["t_memory_ps"] == pytest.approx(row["bytes_accessed"] / H100_HBM * 1e12)
    assert r["bound"] == "compute" and r["roofline_time_ps"] == pytest.approx(t_compute)
    assert r["achieved_flops"] == pytest.approx(row["flops"] / 1e-3)
    assert r["achieved_bandwidth"] == pytest.approx(row["bytes_accessed"] / 1e-3)
    assert r["intensity"] == pytest.approx(row["flops"] / row["bytes_accessed"])
    assert r["efficiency"] == pytest.approx(t_compute / 1e9)
    assert r["gap_ps"] == pytest.approx(1e9 - t_compute)


# ---------------------------------------------------------------- collectives

def test_collective_kinds_are_read_as_pattern_names():
    """Every spelling of a kind (async halves, trace names, none, one not modelled) becomes its pattern's
    name, whatever order the patterns are listed in."""
    kinds = ["all-reduce-start", "send", None, "foo", "host-offload", "AllGather", "", "ragged-all-to-all"]
    patterns = collective_patterns(pd.DataFrame({"collective_kind": kinds}))
    assert list(patterns) == ["all-reduce", "permute", NOT_COLLECTIVE, UNMODELLED, "host-transfer", "all-gather",
                              NOT_COLLECTIVE, "all-to-all"]
    assert list(collective_patterns(pd.DataFrame({"op": ["x", "y"]}))) == [NOT_COLLECTIVE] * 2


@pytest.mark.parametrize("n", [4, 8, 16, 64])
def test_ring_all_gather_takes_about_v_over_bidirectional_bandwidth(db, n):
    """Book part 3: an AllGather of V bytes on one bidirectional ring takes ~V / W_bidi, whatever N;
    exactly (N-1)/N of it. ReduceScatter costs the same, AllReduce twice."""
    V = 1e9
    kinds = ["all-gather", "reduce-scatter", "all-reduce", "all-reduce-start"]
    out, warnings = roofline(pd.DataFrame([_collective(k, V, n) for k in kinds]), db["tpu-v5e"])
    t = out["t_comm_ps"].to_numpy() / 1e12
    assert t[0] == pytest.approx(V / V5E_ICI_BIDI * (n - 1) / n)
    assert t[0] <= V / V5E_ICI_BIDI and t[0] >= 0.75 * V / V5E_ICI_BIDI
    assert t[1] == pytest.approx(t[0]) and t[2] == pytest.approx(2 * t[0]) and t[3] == pytest.approx(t[2])
    assert list(out["bound"]) == ["communication"] * 4 and warnings == []


def test_all_to_all_on_a_ring_is_a_quarter_of_an_all_gather(db):
    """Book part 3: AllToAll on a bidirectional ring ~ AllGather / 4 of the same (global) array."""
    n, shard = 64, 1e8          # each device holds `shard` bytes; the global array is n * shard
    out, _ = roofline(pd.DataFrame([_collective("all-to-all", shard, n),
                                    _collective("all-gather", n * shard, n)]), db["tpu-v5e"])
    a2a, ag = out["t_comm_ps"]
    assert a2a / ag == pytest.approx(0.25, rel=0.06)


def test_nvlink_all_gather_book_pop_quiz(db):
    """Book part 12, pop quiz 1: AllGather(bf16[1024, 16384]) on 8xH100 at 450 GB/s takes ~65 us."""
    V = 2 * 1024 * 16384
    out, _ = roofline(pd.DataFrame([_collective("all-gather", V, 8), _collective("all-reduce", V, 8)]),
                      db["h100-sxm"])
    expected = V * 7 / (8 * H100_EGRESS)
    assert out["t_comm_ps"].iloc[0] / 1e12 == pytest.approx(expected)
    assert 60e-6 < expected < 70e-6
    assert out["t_comm_ps"].iloc[1] == pytest.approx(2 * out["t_comm_ps"].iloc[0])


def test_switch_all_to_all_book_formula(db):
    """Book part 12: within a node, AllToAll of a B-byte array costs B·(N-1) / (W·N²)."""
    n, B = 8, 8e9
    out, _ = roofline(pd.DataFrame([_collective("all-to-all", B / n, n)]), db["h100-sxm"])
    assert out["t_comm_ps"].iloc[0] / 1e12 == pytest.approx(B * (n - 1) / (H100_EGRESS * n * n))


def test_permute_dcn_and_trivial_groups(db):
    v5e = db["tpu-v5e"]
    V = 1e8
    out, _ = roofline(pd.DataFrame([_collective("collective-permute-start", V, 2),
                                    _collective("all-gather", V, 4, dcn=True),
                                    _collective("all-reduce", V, 1)]), v5e)
    t = out["t_comm_ps"].to_numpy() / 1e12
    assert t[0] == pytest.approx(V / v5e.interconnect.link_bandwidth)           # one hop, one link, one way
    assert t[1] == pytest.approx(V * 3 / 4 / v5e.dcn_bandwidth)
    assert t[2] == 0 and out["bound"].iloc[2] == "communication"               # nothing moves: all gap
    assert out["gap_ps"].iloc[2] == out["time_ps"].iloc[2]


def test_async_done_half_and_unknown_group(db):
    rows = [{**_collective("all-gather-start", 1e8, 8), "op": "ag-start"},
            {**_collective("all-gather-done", 0.0, 8), "op": "ag-done"},
            {**_collective("all-reduce", 1e8, 0), "op": "ar-no-group"}]      # cost model: 0 = unknown
    out, warnings = roofline(pd.DataFrame(rows), db["h100-sxm"])
    assert list(out["bound"]) == ["communication", "communication", "unknown"]
    assert out["roofline_time_ps"].iloc[1] == 0 and "group size unknown" in warnings[0]


def test_infinity_fabric_full_mesh(db):
    mi = db["mi300x"]
    V = 1e9
    out, _ = roofline(pd.DataFrame([_collective("all-gather", V, 8), _collective("all-gather", V, 4)]), mi)
    link = mi.interconnect.link_bandwidth
    # each GPU sends its V/N shard straight to each of the N-1 peers over its own link
    assert out["t_comm_ps"].iloc[0] / 1e12 == pytest.approx(V / 8 / link)
    assert out["t_comm_ps"].iloc[1] / 1e12 == pytest.approx(V / 4 / link)


# ---------------------------------------------------------------- unknowns and warnings

def test_missing_figures_make_the_bound_unknown(db):
    rows = [
        {"op": "fp8_dot", "flops": 1e12, "bytes_accessed": 1e6, "dtype": "f8e4m3fn", "time_ps": 1e9},
        {"op": "custom", "flops": np.nan, "bytes_accessed": np.nan, "dtype": "bf16", "time_ps": 1e9},
        {"op": "flagged", "flops": 1e6, "bytes_accessed": 1e6, "dtype": "bf16", "time_ps": 1e9, "unknown": True},
        {"op": "nothing", "flops": 0.0, "bytes_accessed": 0.0, "dtype": "bf16", "time_ps": 1e3},
        {**_collective("weird-collective", 1e6, 4), "op": "weird"},
        {"op": "ok", "flops": 1e6, "bytes_accessed": 1e6, "dtype": "bf16", "time_ps": 1e9},
    ]
    out, warnings = roofline(pd.DataFrame(rows), db["a100-40gb"])
    assert list(out["bound"]) == ["unknown"] * 5 + ["memory"]
    assert out["roofline_time_ps"].iloc[:5].isna().all() and out["gap_ps"].iloc[:5].isna().all()
    text = "\n".join(warnings)
    assert "fp8" in text and "fp8_dot" in text and "no FLOPs/bytes" in text and "weird" in text
    assert len(warnings) == 5


def test_collective_without_interconnect_is_unknown(db):
    chip = dataclasses.replace(db["cpu"], interconnect=None)
    out, warnings = roofline(pd.DataFrame([_collective("all-reduce", 1e6, 4)]), chip)
    assert out["bound"].iloc[0] == "unknown" and any("interconnect" in w for w in warnings)


def test_faster_than_roofline_keeps_sign_and_warns(db):
    row = _matmul(4096, 4096, 4096, 2, "bf16")
    row["time_ps"] = 1e3
    out, warnings = roofline(pd.DataFrame([row]), db["h100-sxm"])
    assert out["gap_ps"].iloc[0] < 0 and out["efficiency"].iloc[0] > 1
    assert any("faster than the roofline" in w for w in warnings)


def test_tpu_f32_fallback_is_announced(db):
    rows = [{"op": "f32_dot", "flops": 1e9, "bytes_accessed": 1e3, "dtype": "f32", "time_ps": 1e9}]
    out, warnings = roofline(pd.DataFrame(rows), db["tpu-v6e"])
    assert out["t_compute_ps"].iloc[0] == pytest.approx(1e9 / 9.18e14 * 1e12)
    assert len(warnings) == 1 and "bf16" in warnings[0] and "fp32" in warnings[0]


# ---------------------------------------------------------------- summaries

def test_summary_time_by_bound_and_mfu(db):
    rows = [
        {**_matmul(8192, 8192, 8192, 2, "bf16"), "time_ps": 8e9},
        {"op": "add", "flops": 1e6, "bytes_accessed": 1e9, "dtype": "bf16", "time_ps": 2e9},
        {**_collective("all-reduce", 1e9, 8), "time_ps": 30e9, "exposed_time_ps": 5e9},
        {"op": "custom", "flops": np.nan, "bytes_accessed": np.nan, "dtype": "bf16", "time_ps": 1e9},
    ]
    frame = pd.DataFrame(rows)
    chip = db["h100-sxm"]
    total, idle = 20e9, 4e9
    summary = summarize(frame, chip, total_time_ps=total, idle_ps=idle)
    assert summary["time_by_bound_ps"] == {"compute": 8e9, "memory": 2e9, "communication": 5e9,
                                           "unknown": 1e9, "idle": idle}
    flops = 2.0 * 8192 ** 3 + 1e6
    assert summary["mfu"] == pytest.approx(flops / (total / 1e12 * H100_BF16))
    assert summary["mfu_dtype"] == "bf16"
    assert json.dumps(summary)


def test_summary_without_any_cost_says_unknown_not_zero(db):
    frame = pd.DataFrame([{"op": "MatMul", "flops": np.nan, "bytes_accessed": np.nan, "dtype": None, "time_ps": 5e9}])
    summary = summarize(frame, db["v100"], total_time_ps=10e9)
    assert summary["mfu"] is None and summary["flops"] is None and summary["bytes_accessed"] is None
    assert summary["roofline_time_ps"] is None and summary["efficiency"] is None
    assert any("MFU unknown" in w for w in summary["warnings"])


# ---------------------------------------------------------------- agreement with XProf

def test_labels_and_efficiency_agree_with_xprof_roofline_model(db, shared_traces, tmp_path):
    """XProf's roofline_model on the TPU v6e trace: same bound and roofline efficiency per op."""
    raw_to_tool_data = pytest.importorskip("xprof.convert.raw_to_tool_data")
    profile_data = pytest.importorskip("xprof.profile_data")
    src = shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb"
    copy = tmp_path / src.name
    copy.write_bytes(src.read_bytes())
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "roofline_model", {})
    table = json.loads(data)[0]
    cols = [c["id"] for c in table["cols"]]
    rows = [dict(zip(cols, [c.get("v") if c else None for c in r["c"]])) for r in table["rows"]]
    rows = [r for r in rows if r["step"] == "Total" and r["category"] != "Program" and r["total_self_time"] > 0]
    assert len(rows) > 20

    plane = next(p for p in profile_data.ProfileData.from_file(str(src)).planes if p.name == "/device:TPU:0")
    chip, _ = detect_chip(Device.from_plane_stats("TPU:0", "h", "TPU", dict(plane.stats)), db)

    seconds = np.array([r["total_self_time"] for r in rows]) * 1e-6
    frame = pd.DataFrame({
        "op": [r["operation"] for r in rows],
        "flops": np.array([r["model_flop_rate"] for r in rows]) * 1e9 * seconds,
        "bytes_accessed": np.array([r["hbm_bw"] for r in rows]) * 2**30 * seconds,   # GiB/s
        "dtype": "bf16",
        "time_ps": seconds * 1e12,
    })
    out, _ = roofline(frame, chip)
    expected_bound = [{"HBM": "memory", "Compute": "compute"}[r["bound_by"]] for r in rows]
    known = out["bound"] != "unknown"        # ops XProf shows with zero FLOPs and bytes
    assert known.sum() >= len(rows) - 2
    assert list(out.loc[known, "bound"]) == [b for b, k in zip(expected_bound, known) if k]
    np.testing.assert_allclose(out.loc[known, "efficiency"],
                               [r["roofline_efficiency"] for r, k in zip(rows, known) if k], rtol=1e-4)


def test_unidirectional_ring_takes_twice_as_long(db):
    """Book part 3: a bidirectional ring moves V over 2W; XLA's UniDirection1DRingStrategy uses one way, W."""
    chip = db["tpu-v6e"]
    v, n = 4e9, 8
    rows = [dict(_collective("all-gather", v, n), ring_directions=d) for d in (np.nan, 2.0, 1.0)]
    out, _ = roofline(pd.DataFrame(rows), chip)
    w = chip.interconnect.link_bandwidth
    expected_bidi = v * (n - 1) / n / (2 * w) * 1e12
    assert out["t_comm_ps"].iloc[0] == pytest.approx(expected_bidi)  # unknown: bidirectional assumed
    assert out["t_comm_ps"].iloc[1] == pytest.approx(expected_bidi)
    assert out["t_comm_ps"].iloc[2] == pytest.approx(2 * expected_bidi)
