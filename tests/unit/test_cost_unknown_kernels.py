"""A custom kernel without a FLOP figure (Pallas/Mosaic ``tpu_custom_call`` with no ``cost_estimate``)
has unknown FLOPs end to end: NaN in the cost table, null in JSON, left out of FLOP sums with a
warning naming it, and MFU null with a reason when it is the only op (issue 12 follow-up, issue 11's
"unknown is never zero"). Its roofline time stays the memory lower bound.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from traceview.cli import main
from traceview.cost import instruction_costs, module_totals
from traceview.parsers.hlo.text import parse_hlo_text

M, K, N = 128, 64, 256
READ, WRITTEN = 4 * (M * K + K * N), 4 * M * N      # f32 operands x, y and the f32 result
ESTIMATE = 2 * M * K * N

# Two Pallas-lowered kernels on the same operands, as JAX writes them for TPU (backend_config JSON
# with the Mosaic body and, when the author gave pl.CostEstimate, its cost_estimate).
PALLAS = f"""HloModule pallas_kernels, entry_computation_layout={{(f32[{M},{K}]{{1,0}}, f32[{K},{N}]{{1,0}})->(f32[{M},{N}]{{1,0}}, f32[{M},{N}]{{1,0}})}}

ENTRY main.1 {{
  x = f32[{M},{K}]{{1,0}} parameter(0)
  y = f32[{K},{N}]{{1,0}} parameter(1)
  plain_kernel = f32[{M},{N}]{{1,0}} custom-call(x, y), custom_call_target="tpu_custom_call", backend_config={{"custom_call_config": {{"body": "TUxJUgA=", "serialization_format": 1}}}}
  estimated_kernel = f32[{M},{N}]{{1,0}} custom-call(x, y), custom_call_target="tpu_custom_call", backend_config={{"custom_call_config": {{"body": "TUxJUgA=", "cost_estimate": {{"flops": {ESTIMATE}, "transcendentals": 7, "bytes_accessed": 123456}}, "serialization_format": 1}}}}
  ROOT out = (f32[{M},{N}]{{1,0}}, f32[{M},{N}]{{1,0}}) tuple(plain_kernel, estimated_kernel)
}}
"""

ONLY_KERNEL = f"""HloModule only_kernel

ENTRY main.1 {{
  x = f32[{M},{K}]{{1,0}} parameter(0)
  y = f32[{K},{N}]{{1,0}} parameter(1)
  ROOT plain_kernel = f32[{M},{N}]{{1,0}} custom-call(x, y), custom_call_target="tpu_custom_call", backend_config={{"custom_call_config": {{"body": "TUxJUgA="}}}}
}}
"""


def test_cost_table_flops_nan_for_the_kernel_without_estimate():
    df = instruction_costs(parse_hlo_text(PALLAS)).set_index("name")
    plain, est = df.loc["plain_kernel"], df.loc["estimated_kernel"]
    assert np.isnan(plain["flops"]) and np.isnan(plain["flops_per_step"]) and plain["cost_lower_bound"]
    assert (plain["bytes_read"], plain["bytes_written"]) == (READ, WRITTEN)
    assert est["flops"] == ESTIMATE and not est["cost_lower_bound"]


def test_module_totals_skip_the_unknown_kernel_and_name_it():
    totals = module_totals(parse_hlo_text(PALLAS))
    # only the estimated kernel has a FLOP figure; the plain one is left out, not counted as 0 silently
    assert totals["flops"] == ESTIMATE
    assert totals["flops_unknown_ops"] == ["plain_kernel"]
    (warning,) = [w for w in totals["warnings"] if "no cost estimate" in w]
    assert "plain_kernel" in warning and "FLOPs unknown" in warning


def test_hlo_json_has_null_flops_for_the_kernel_without_estimate(tmp_path, capsys):
    path = tmp_path / "pallas.hlo.txt"
    path.write_text(PALLAS)
    assert main(["hlo", str(path), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (module,) = data["modules"]
    rows = {r["name"]: r for r in module["instructions"]}
    assert rows["plain_kernel"]["flops"] is None and rows["plain_kernel"]["cost_lower_bound"] is True
    assert rows["estimated_kernel"]["flops"] == ESTIMATE
    assert rows["estimated_kernel"]["transcendentals"] == 7
    assert any("plain_kernel" in w and "no cost estimate" in w for w in data["warnings"])
    assert module["flops"] == ESTIMATE and module["flops_unknown_ops"] == ["plain_kernel"]


def _profile(kernel_names: list[str], module: str):
    """A one-device TPU trace: each named op runs once for 1 ms, back to back."""
    from traceview.hostreduce.profile import Profile
    from traceview.parsers.profile import (
        HOST_EVENT_COLUMNS,
        OP_COLUMNS,
        STEP_COLUMNS,
        Device,
        Source,
        empty_frame,
    )

    device = "host/TPU:0"
    ms = 1_000_000_000
    ops = pd.DataFrame({
        "host": "host", "device": device, "line": "XLA Ops", "module": module, "program_id": -1,
        "op": kernel_names, "category": "custom-call",
        "start_ps": [i * ms for i in range(len(kernel_names))], "duration_ps": ms, "self_ps": ms, "step": -1,
        "trace_flops": np.nan, "trace_bytes": np.nan, "executions": 1,
    }).astype(OP_COLUMNS)
    return Profile.from_tables(Source(path="synthetic", run=None, hosts=["host"], files=[]), ops,
                               empty_frame(HOST_EVENT_COLUMNS), empty_frame(STEP_COLUMNS),
                               [Device(id=device, host="host", kind="TPU")])


def _analysis(tmp_path, text: str, module: str, ops: list[str]):
    from traceview.analysis.build import build_analysis

    path = tmp_path / f"{module}.txt"
    path.write_text(text)
    return build_analysis(_profile(ops, module), target="tpu-v6e", hlo_path=path)


def test_mfu_null_with_a_reason_when_the_only_op_is_a_kernel_without_flops(tmp_path):
    from traceview.render.analyze import analysis_text
    from traceview.render.record import analysis_json

    analysis = _analysis(tmp_path, ONLY_KERNEL, "only_kernel", ["plain_kernel"])
    s = analysis.judged.summary
    assert s["mfu"] is None and s["flops"] is None and s["achieved_flops"] is None
    assert "plain_kernel" in s["mfu_reason"] and "cost estimate" in s["mfu_reason"]
    row = analysis.ops.set_index("op").loc["plain_kernel"]
    # roofline: the memory time of what it must read and write (1640 TB/s of v6e HBM), a lower bound
    assert row["bound"] == "memory" and np.isnan(row["t_compute_ps"])
    assert row["roofline_time_ps"] == pytest.approx((READ + WRITTEN) / analysis.judged.chip.hbm_bandwidth * 1e12)
    assert np.isnan(row["achieved_flops"]) and np.isnan(row["intensity"])

    text = analysis_text(analysis, colour_enabled=False)
    assert "MFU unknown (no op has a FLOP count" in text and ">= 0.14 us" in text   # 229,376 B / 1.64 TB/s
    data = json.loads(json.dumps(analysis_json(analysis)))
    (record,) = [r for r in data["ops"] if r["name"] == "plain_kernel"]
    assert record["flops"] is None and record["cost_lower_bound"] is True and record["bound"] == "memory"
    assert data["summary"]["mfu"] is None and "plain_kernel" in data["summary"]["mfu_reason"]


def test_mfu_counts_only_the_kernel_with_an_estimate_and_warns_about_the_other(tmp_path):
    analysis = _analysis(tmp_path, PALLAS, "pallas_kernels", ["plain_kernel", "estimated_kernel"])
    s = analysis.judged.summary
    assert s["flops"] == ESTIMATE
    # 2 ms of device time on one TPU v6e (918 TFLOP/s bf16; f32 FLOPs use the bf16 peak there)
    assert s["mfu"] == pytest.approx(ESTIMATE / (2e-3 * s["mfu_peak_flops"]))
    assert any("leave out 1 custom kernels" in w and "plain_kernel" in w for w in analysis.warnings)


def test_check_says_unknown_module_flops_were_not_checked(tmp_path, capsys):
    """A module whose only math is a kernel without FLOP figure has FLOPs None: check names it as not
    checked instead of comparing 0 with 0; bytes are still checked."""
    for side in ("base", "new"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "only_kernel.txt").write_text(ONLY_KERNEL)
    code = main(["check", str(tmp_path / "new"), "--baseline", str(tmp_path / "base"), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0, data    # same program: a pass, with FLOPs named as unchecked
    names = [c["name"] for c in data["checks"]]
    assert not any(n.startswith("flops:") for n in names) and any(n.startswith("bytes_accessed:") for n in names)
    assert any("FLOPs of module only_kernel not checked" in n and "baseline and current" in n
               for n in data["notes"])


def test_chart_and_op_detail_call_the_kernel_flops_unknown(tmp_path):
    from traceview.analysis.public import op_rows
    from traceview.render.charts import unplaceable_ops

    analysis = _analysis(tmp_path, PALLAS, "pallas_kernels", ["plain_kernel", "estimated_kernel"])
    rest = unplaceable_ops(analysis.ops).set_index("op")
    assert rest.loc["plain_kernel", "reason"] == "no FLOP figure (kernel without cost estimate)"
    assert "estimated_kernel" not in rest.index
    pytest.importorskip("streamlit")
    from traceview.dashboards.op_detail import arithmetic

    (record,) = [r for r in op_rows(analysis.ops) if r["name"] == "plain_kernel"]
    terms = dict(zip(*arithmetic(record, analysis.judged.chip)[["term", "formula"]].T.values))
    assert terms["T_compute"].startswith("unknown: custom kernel without a cost estimate")


def test_hlo_top_list_shows_the_kernel_with_unknown_flops(tmp_path, capsys):
    path = tmp_path / "pallas.hlo.txt"
    path.write_text(PALLAS)
    assert main(["hlo", str(path), "--top", "2"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith(("plain_", "estim"))]
    # unknown FLOPs ("-") rank first, marked lower bound; then the estimated kernel
    assert [r[0] for r in rows] == ["plain_kernel", "estimated_kernel"]
    assert rows[0][5] == "-" and rows[0][-2:] == ["lower", "bound"]
