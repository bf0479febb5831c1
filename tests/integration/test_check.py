"""traceview.regress.check: budgets, config files and verdicts."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from traceview.errors import UserError
from traceview.regress.baseline import OP_COLUMNS, Snapshot, load_snapshot
from traceview.regress.budgets import Budgets, OpRule, load_config, make_budgets, parse_duration_ps, parse_fraction
from traceview.regress.check import run_checks
from traceview.regress.diff import diff_analyses
from traceview.render.regress import diff_json, diff_junit, diff_text


def test_parse_fraction_and_duration():
    assert parse_fraction("5%") == pytest.approx(0.05)
    assert parse_fraction("0.05") == parse_fraction(0.05) == pytest.approx(0.05)
    assert parse_duration_ps("1ms") == 1e9
    assert parse_duration_ps("250us") == 2.5e8
    assert parse_duration_ps("2 s") == 2e12
    assert parse_duration_ps(1.5) == 1.5e9  # a bare number is milliseconds
    for bad in ("five", "-3%", True):
        with pytest.raises(UserError, match="--max-step-regression"):
            parse_fraction(bad, "--max-step-regression")
    with pytest.raises(UserError, match="min_op_time"):
        parse_duration_ps("1 fortnight", "min_op_time")


def test_config_file(tmp_path):
    path = tmp_path / "budgets.toml"
    path.write_text('[check]\nmax_step_regression = "7%"\nmin_op_time = "250us"\nmin_mfu = 0.3\n'
                    '[[check.ops]]\npattern = "jit_f/fusion*"\nmax_regression = "30%"\n'
                    '[[check.ops]]\npattern = "copy*"\nignore = true\n')
    budgets = make_budgets(path, max_op_regression=0.2)
    assert budgets.max_step_regression == pytest.approx(0.07)
    assert budgets.min_op_time_ps == 2.5e8 and budgets.min_mfu == pytest.approx(0.3)
    assert budgets.max_op_regression == pytest.approx(0.2)          # flags win over the file
    assert budgets.rule_for("jit_f", "fusion.3").max_regression == pytest.approx(0.3)
    assert budgets.rule_for("jit_g", "copy.1").ignore
    assert budgets.rule_for("jit_g", "fusion.3") is None


@pytest.mark.parametrize("text,message", [
    ('[check]\nmax_step_regresion = "5%"\n', "unknown setting 'max_step_regresion'"),
    ('[check]\nmax_step_regression = "lots"\n', "max_step_regression"),
    ('[[check.ops]]\nmax_regression = "5%"\n', "needs a 'pattern'"),
    ('[[check.ops]]\npattern = "x"\nmax_regresion = "5%"\n', "unknown key"),
    ('[check\n', "not valid TOML"),
])
def test_bad_config_is_a_user_error(tmp_path, text, message):
    path = tmp_path / "budgets.toml"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        load_config(path)


# ------------------------------------------------------------------ verdicts on synthetic snapshots

def _snapshot(step_ms, op_ms: dict[str, list[float]], label: str, mfu: float | None = None) -> Snapshot:
    """A trace snapshot with per-step op times (ms) for ops of module m."""
    rows, per_step = [], []
    for op, times in op_ms.items():
        rows.append({"module": "m", "op": op, "opcode": "fusion", "category": "", "shape": "", "dtype": "",
                     "occurrences": float(len(times)), "time_ps": sum(times) * 1e9, "judged_time_ps": np.nan,
                     "roofline_time_ps": np.nan, "flops": 1e9 * len(times), "bytes": 1e6 * len(times),
                     "collective_bytes": 0.0, "bound": "compute", "source_file": "", "source_line": np.nan,
                     "fingerprint": ""})
        per_step += [{"module": "m", "op": op, "step": i, "time_ps": t * 1e9} for i, t in enumerate(times)]
    return Snapshot(kind="trace", label=label, ops=pd.DataFrame(rows, columns=OP_COLUMNS),
                    step_times_ps=np.asarray(step_ms, dtype="float64") * 1e9, op_steps=pd.DataFrame(per_step),
                    mfu=mfu)


BASE_STEPS = [10.0, 10.2, 9.9, 10.1, 10.05, 9.95]


def test_consistent_slowdown_over_budget_fails():
    new_steps = [s * 1.08 for s in BASE_STEPS]
    verdict = run_checks(diff_analyses(_snapshot(BASE_STEPS, {}, "a"), _snapshot(new_steps, {}, "b")))
    (step,) = verdict.checks
    assert not step.passed and step.change == pytest.approx(0.08, abs=0.005) and step.low > 0


def test_slowdown_within_noise_passes():
    """The same 8% median shift with steps scattered by +-40%: not distinguishable from noise."""
    noisy_base = [10.0, 14.0, 7.0, 12.0, 8.0, 10.5]
    noisy_new = [10.8, 15.5, 7.4, 13.0, 8.7, 11.0]
    verdict = run_checks(diff_analyses(_snapshot(noisy_base, {}, "a"), _snapshot(noisy_new, {}, "b")))
    (step,) = verdict.checks
    assert step.change > 0.05 and step.low <= 0 and step.passed and "noise" in step.detail


def test_op_budgets_min_time_rules_and_ignore():
    base = _snapshot(BASE_STEPS, {"fusion.1": [2.0] * 6, "copy.1": [2.0] * 6, "tiny": [0.1] * 6}, "a")
    new = _snapshot(BASE_STEPS, {"fusion.1": [2.5, 2.52, 2.48, 2.5, 2.51, 2.49], "copy.1": [3.0] * 6,
                                 "tiny": [0.5] * 6}, "b")
    diff = diff_analyses(base, new)
    names = {c.name: c for c in run_checks(diff).checks}
    assert not names["op:m/fusion.1"].passed and not names["op:m/copy.1"].passed
    assert "op:m/tiny" not in names                                # 0.5 ms per step < 1 ms: not judged
    budgets = Budgets(ops=[OpRule("copy*", ignore=True), OpRule("m/fusion*", max_regression=0.3)])
    names = {c.name: c for c in run_checks(diff, budgets).checks}
    assert "op:m/copy.1" not in names and names["op:m/fusion.1"].passed
    assert names["op:m/fusion.1"].limit == pytest.approx(0.3)


def test_absolute_budgets():
    base, new = _snapshot(BASE_STEPS, {}, "a", mfu=0.4), _snapshot(BASE_STEPS, {}, "b", mfu=0.35)
    diff = diff_analyses(base, new)
    checks = {c.name: c for c in run_checks(diff, Budgets(max_step_time_ps=9e9, min_mfu=0.3)).checks}
    assert not checks["max_step_time"].passed and checks["min_mfu"].passed
    checks = {c.name: c for c in run_checks(diff, Budgets(max_step_time_ps=11e9, min_mfu=0.36)).checks}
    assert checks["max_step_time"].passed and not checks["min_mfu"].passed


# ------------------------------------------------------------------ static checks on real dumps

def test_static_check_flags_added_flops_and_matches_xla(sample_traces):
    xla = {n: json.loads((sample_traces / n / "capture.json").read_text())["xla_cost_analysis"]
           for n in ("mlp", "mlp_slow")}
    diff = diff_analyses(load_snapshot(sample_traces / "mlp" / "hlo"), load_snapshot(sample_traces / "mlp_slow" / "hlo"))
    verdict = run_checks(diff)
    checks = {c.name: c for c in verdict.checks}
    flops = checks["flops:jit_train_step"]
    assert not flops.passed and flops.change == pytest.approx(xla["mlp_slow"]["flops"] / xla["mlp"]["flops"] - 1)
    assert not checks["bytes_accessed:jit_train_step"].passed
    assert checks["collective_bytes:jit_train_step"].passed        # a one-device program: no collectives
    # The reverse direction removes work: within budget.
    assert run_checks(diff_analyses(diff.new, diff.base)).passed


def test_static_check_sees_collectives_of_a_real_dump(shared_traces):
    dump = shared_traces / "NVIDIA-JAX-Toolbox" / "maxtext_fsdp4_h100" / "dump"
    snap = load_snapshot(dump)
    verdict = run_checks(diff_analyses(snap, snap))
    checks = {c.name: c for c in verdict.checks}
    assert verdict.passed
    assert checks["collective_bytes:jit_train_step"].baseline > 0  # FSDP: all-gathers and reduce-scatters
    # A dump whose collective volume doubled (same module, scaled figures) fails the collective budget.
    bigger = Snapshot(kind="hlo", label="bigger", ops=snap.ops,
                      modules=snap.modules.assign(collective_bytes=snap.modules["collective_bytes"] * 2))
    checks = {c.name: c for c in run_checks(diff_analyses(snap, bigger)).checks}
    assert not checks["collective_bytes:jit_train_step"].passed and checks["flops:jit_train_step"].passed


# ------------------------------------------------------------------ reports

def test_reports_agree_with_the_verdict(sample_traces):
    diff = diff_analyses(load_snapshot(sample_traces / "mlp" / "hlo"), load_snapshot(sample_traces / "mlp_slow" / "hlo"))
    verdict = run_checks(diff)
    data = diff_json(diff, verdict)
    assert data["verdict"] == "fail"
    assert [c["name"] for c in data["checks"]] == [c.name for c in verdict.checks]
    assert all({"name", "baseline", "current", "change", "limit", "passed"} <= set(c) for c in data["checks"])
    json.dumps(data, allow_nan=False)
    root = ET.fromstring(diff_junit(diff, verdict))
    cases = root.findall(".//testcase")
    assert len(cases) == len(verdict.checks)
    assert {c.get("name") for c in cases if c.find("failure") is not None} == {c.name for c in verdict.failed}
    assert "FAIL" in diff_text(diff, verdict, colour_enabled=False)
