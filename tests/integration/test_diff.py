"""traceview.regress.diff: noise statistics, op matching, and comparisons of real traces and HLO dumps."""

from __future__ import annotations

import itertools
import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest

import traceview
from traceview.regress.baseline import load_baseline, load_snapshot, snapshot_from_analysis
from traceview.regress.diff import diff_analyses
from traceview.regress.stats import _mann_whitney_counts, _rank_for_interval, relative_shift
from traceview.render.regress import diff_markdown
from traceview.trace.read import load_profile

# ------------------------------------------------------------------ statistics


@pytest.mark.parametrize("n,m", [(2, 3), (3, 4), (5, 5), (4, 7)])
def test_mann_whitney_distribution_matches_enumeration(n, m):
    """Every split of n+m distinct values into two groups, counted by U, is the exact null distribution."""
    counts = np.zeros(n * m + 1)
    values = range(n + m)
    for group in itertools.combinations(values, n):
        rest = [v for v in values if v not in group]
        counts[sum(1 for x in group for y in rest if x > y)] += 1
    np.testing.assert_array_equal(_mann_whitney_counts(n, m), counts)


# Two-sided 5% critical values of U from the published Mann-Whitney tables
# (reject when U <= critical): the interval starts at rank critical + 1.
@pytest.mark.parametrize("n,m,critical", [(5, 5, 2), (8, 8, 13), (10, 10, 23), (5, 10, 8), (6, 9, 10),
                                          (20, 20, 127)])
def test_interval_rank_matches_published_critical_values(n, m, critical):
    assert _rank_for_interval(n, m, 0.95) == critical + 1


def test_too_few_steps_give_no_interval():
    """2 vs 2 steps cannot reach 95% (the smallest two-sided p-value is 1/3): an estimate, no interval."""
    shift = relative_shift(np.array([10.0, 11.0]), np.array([12.0, 13.0]))
    assert shift.low is None and shift.high is None
    assert shift.estimate == pytest.approx(np.exp(np.median(np.log([1.2, 12 / 11, 1.3, 13 / 11]))) - 1)


def test_interval_covers_true_ratio_at_its_confidence():
    """Lognormal step times with a known 10% slowdown: the 95% interval covers it about 95% of the time."""
    rng = np.random.default_rng(7)
    covered, trials = 0, 400
    for _ in range(trials):
        base = np.exp(rng.normal(np.log(10.0), 0.08, size=8))
        new = np.exp(rng.normal(np.log(11.0), 0.08, size=8))
        shift = relative_shift(base, new, 0.95)
        covered += shift.low <= 0.10 <= shift.high
    assert 0.92 <= covered / trials <= 0.99


def test_hodges_lehmann_estimate_is_median_of_pairwise_ratios():
    base, new = np.array([10.0, 12.0, 11.0, 30.0]), np.array([13.0, 12.5, 14.0])
    ratios = [b2 / b1 for b1 in base for b2 in new]
    assert relative_shift(base, new).estimate == pytest.approx(np.exp(np.median(np.log(ratios))) - 1)


# ------------------------------------------------------------------ sample traces


@pytest.fixture(scope="module")
def mlp(sample_traces):
    return traceview.load(sample_traces / "mlp")


@pytest.fixture(scope="module")
def mlp_slow(sample_traces):
    return traceview.load(sample_traces / "mlp_slow")


def test_trace_against_itself_is_all_same(mlp):
    diff = traceview.diff(mlp, mlp)
    assert set(diff.ops["status"]) == {"same"}
    assert len(diff.ops) == len(mlp.ops)
    assert (diff.ops["matched_by"] == "name").all()
    step = diff.step_shift
    assert step.estimate == 0 and step.low <= 0 <= step.high


def test_dashboard_api_columns(mlp, mlp_slow):
    diff = traceview.diff(mlp, mlp_slow)
    for side in ("base", "new"):
        for q in ("time_ps", "flops", "bytes", "efficiency", "bound"):
            assert f"{side}_{q}" in diff.ops.columns
    assert {"module", "op", "status", "change"} <= set(diff.ops.columns)
    assert {"base_time_ps", "new_time_ps"} <= set(diff.steps.columns)
    assert diff.summary.step_time is not None and diff.summary.ops.same + diff.summary.ops.changed > 0
    text = diff_markdown(diff)
    assert text.startswith("### ") and "| check |" in text


def test_per_step_flops_follow_xla_cost_analysis(sample_traces, mlp, mlp_slow):
    """The per-step FLOPs of the executed ops are the module's FLOPs as XLA's cost analysis counts them."""
    xla = {name: json.loads((sample_traces / name / "capture.json").read_text())["xla_cost_analysis"]["flops"]
           for name in ("mlp", "mlp_slow")}
    diff = traceview.diff(mlp, mlp_slow)
    per_step = diff.summary.per_step["flops"]
    assert per_step.base == pytest.approx(xla["mlp"], rel=0.01)
    assert per_step.new == pytest.approx(xla["mlp_slow"], rel=0.01)


def test_slow_variant_names_the_ops_that_slowed(mlp, mlp_slow):
    """Changed ops are those whose measured per-step time moved, per the raw op events."""
    diff = traceview.diff(mlp, mlp_slow)
    raw_b, raw_n = mlp.pipeline.profile.op_executions(), mlp_slow.pipeline.profile.op_executions()
    per_step = lambda raw: raw.groupby("op", observed=True)["self_ps"].sum() / raw["step"].nunique()  # noqa: E731
    ratio = (per_step(raw_n) / per_step(raw_b)).dropna()
    big = per_step(raw_b).combine(per_step(raw_n), max) >= 1e9
    slowed = set(ratio[(ratio > 2.0) & big].index.astype(str))
    assert slowed, "mlp_slow should slow some op of over 1 ms per step by 2x"
    changed = diff.ops.set_index("op")
    for op in slowed:
        assert changed.at[op, "status"] == "changed" and changed.at[op, "change"] > 1.0


def test_baseline_json_round_trip_compares_as_same(tmp_path, mlp):
    """A baseline written as analyze JSON and read back compares as identical with the live analysis."""
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(mlp.to_json()))
    base = load_baseline(path)
    live = snapshot_from_analysis(mlp.pipeline)
    assert len(base.step_times_ps) == len(mlp.steps)
    np.testing.assert_allclose(base.step_times_ps, mlp.steps["time_us"].to_numpy() * 1e6, rtol=1e-9)
    diff = diff_analyses(base, live)
    assert set(diff.ops["status"]) == {"same"}
    assert len(diff.ops) == len(live.ops)
    assert diff.summary.step_time.change == pytest.approx(0.0, abs=1e-9)
    assert diff.summary.mfu.base == pytest.approx(diff.summary.mfu.new)


# ------------------------------------------------------------------ HLO dumps


def _after_text(folder):
    return next(folder.glob("*after_optimizations.txt"))


def test_renamed_fusion_is_matched_by_fingerprint(tmp_path, sample_traces):
    """XLA renumbering a fusion (ynn_fusion.4 -> ynn_fusion.99) must not read as one op vanishing and one new."""
    src = _after_text(sample_traces / "mlp" / "hlo")
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    text = src.read_text()
    assert re.search(r"\bynn_fusion\.4\b", text)
    (renamed / src.name).write_text(re.sub(r"\bynn_fusion\.4\b", "ynn_fusion.99", text))
    original = tmp_path / "original"
    original.mkdir()
    shutil.copy(src, original / src.name)
    diff = diff_analyses(load_snapshot(original), load_snapshot(renamed))
    row = diff.ops.set_index("op").loc["ynn_fusion.99"]
    assert row["base_op"] == "ynn_fusion.4" and row["matched_by"] == "fingerprint" and row["status"] == "same"
    assert diff.summary.ops.new == diff.summary.ops.vanished == 0


def test_swapped_fusion_numbers_are_matched_by_content(tmp_path, sample_traces):
    """XLA swapping two fusions' numbers: name matching alone would pair different computations."""
    src = _after_text(sample_traces / "mlp" / "hlo")
    text = src.read_text()
    swapped = re.sub(r"\bynn_fusion\.(4|5)\b", lambda m: "ynn_fusion." + ("5" if m.group(1) == "4" else "4"), text)
    for name, content in (("original", text), ("swapped", swapped)):
        (tmp_path / name).mkdir()
        (tmp_path / name / src.name).write_text(content)
    base, new = load_snapshot(tmp_path / "original"), load_snapshot(tmp_path / "swapped")
    flops = base.ops.set_index("op")["flops"]
    assert flops["ynn_fusion.4"] != flops["ynn_fusion.5"]   # really different computations
    diff = diff_analyses(base, new)
    rows = diff.ops.set_index("op")
    assert rows.at["ynn_fusion.5", "base_op"] == "ynn_fusion.4" and rows.at["ynn_fusion.4", "base_op"] == "ynn_fusion.5"
    assert set(rows.loc[["ynn_fusion.4", "ynn_fusion.5"], "matched_by"]) == {"fingerprint"}
    assert set(diff.ops["status"]) == {"same"}


def test_hlo_diff_reports_added_flops_as_xla_counts_them(sample_traces):
    xla = {name: json.loads((sample_traces / name / "capture.json").read_text())["xla_cost_analysis"]
           for name in ("mlp", "mlp_slow")}
    diff = diff_analyses(load_snapshot(sample_traces / "mlp" / "hlo"), load_snapshot(sample_traces / "mlp_slow" / "hlo"))
    row = diff.modules.set_index("module").loc["jit_train_step"]
    assert row["base_flops"] == pytest.approx(xla["mlp"]["flops"], rel=1e-6)
    assert row["new_flops"] == pytest.approx(xla["mlp_slow"]["flops"], rel=1e-6)
    assert row["flops_change"] == pytest.approx(xla["mlp_slow"]["flops"] / xla["mlp"]["flops"] - 1, rel=1e-6)
    assert row["base_bytes_accessed"] == pytest.approx(xla["mlp"]["bytes accessed"], rel=1e-6)
    # Every instruction is matched by name (same program, wider layers); the dots carry the added FLOPs.
    assert diff.summary.ops.new == diff.summary.ops.vanished == 0
    dots = diff.ops[diff.ops["category"].isin(["matmul", "custom fusion"]) & (diff.ops["base_flops"] > 1e8)]
    assert len(dots) and (dots["flops_change"] > 0.9).all()


# ------------------------------------------------------------------ real traces


def test_real_tpu_trace_against_itself(shared_traces):
    path = shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb"
    snap = load_snapshot(path)
    diff = diff_analyses(snap, snap)
    assert set(diff.ops["status"]) == {"same"}
    step = diff.step_shift
    assert step.n_base == len(snap.step_times_ps) > 1 and step.low <= 0 <= step.high


def test_two_mi300x_workloads_report_new_and_vanished_ops(shared_traces):
    folder = shared_traces / "AMD-AGI-TraceLens"
    gemm, attention = folder / "jax08_gemm", folder / "jax08_attention"
    diff = diff_analyses(load_snapshot(gemm), load_snapshot(attention))
    names = lambda p: set(zip(*[load_profile(p).op_executions()[c].astype(str) for c in ("module", "op")]))  # noqa: E731
    only_new, only_base = names(attention) - names(gemm), names(gemm) - names(attention)
    got = lambda status: set(zip(*[diff.ops.loc[diff.ops["status"] == status, c] for c in ("module", "op")]))  # noqa: E731
    # Fallback matching may pair a few ops under new names; all others are new or vanished.
    renamed = set(zip(diff.ops.loc[~diff.ops["matched_by"].isin(["name", ""]), "module"],
                      diff.ops.loc[~diff.ops["matched_by"].isin(["name", ""]), "op"]))
    assert only_new and only_base
    assert got("new") == only_new - renamed
    assert len(got("vanished")) == len(only_base) - len(renamed)
    assert isinstance(diff.ops, pd.DataFrame)


def test_baseline_json_with_per_step_op_times_gives_op_intervals(tmp_path, mlp):
    """Ops carrying `step_times_us` (per-step self time) make op checks against a JSON baseline noise-aware."""
    data = mlp.to_json()
    raw = mlp.pipeline.profile.op_executions()[mlp.pipeline.profile.op_executions()["step"] >= 0]
    per_step = raw.groupby(["module", "op", "step"], observed=True)["self_ps"].sum() / 1e6
    for op in data["ops"]:
        op["step_times_us"] = per_step.loc[(op["module"], op["name"])].tolist()
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(data))
    diff = traceview.diff(load_baseline(path), mlp)
    op_shifts = diff.op_shifts
    assert len(op_shifts) == len(mlp.ops)
    assert all(s.estimate == pytest.approx(0.0, abs=1e-9) and s.low <= 0 <= s.high for s in op_shifts.values())
