"""`check` judges named scopes against max_scope_regression (traceview.regress.scopes).

The baseline is the transformer sample's analyze JSON; the candidate is the same JSON with the ops of one
scope (layer_1/attn, picked by the op_name each op carries) made 1.5x slower in every step, every other
number untouched: only that scope and its ancestors may fail, and a budget above +50% lets it pass.
"""

from __future__ import annotations

import json

import pytest

import traceview
from traceview.cli import main

SLOWED = "/layer_1/attn/"


@pytest.fixture(scope="module")
def record(sample_traces):
    return traceview.load(sample_traces / "transformer").to_json()


def _slowed(record: dict, factor: float) -> dict:
    out = json.loads(json.dumps(record))
    for op in out["ops"]:
        if SLOWED in (op.get("op_name") or ""):
            op["self_time_us"] *= factor
            op["step_times_us"] = [t * factor for t in op["step_times_us"]]
    return out


def _check(capsys, tmp_path, record, *flags) -> tuple[int, dict]:
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    base.write_text(json.dumps(record))
    new.write_text(json.dumps(_slowed(record, 1.5)))
    code = main(["check", str(new), "--baseline", str(base), "--format", "json",
                 "--max-op-regression", "1000%", *flags])
    return code, json.loads(capsys.readouterr().out)


def test_check_fails_on_a_scope_over_budget(record, capsys, tmp_path):
    assert any(SLOWED in (op.get("op_name") or "") for op in record["ops"])
    code, out = _check(capsys, tmp_path, record, "--max-scope-regression", "10%")
    assert code == 1 and out["verdict"] == "fail"
    failed = {c["name"] for c in out["checks"] if not c["passed"]}
    assert "scope:train_step/Transformer/layer_1/attn" in failed
    slowed = "scope:train_step/Transformer/layer_1/attn"
    # only the slowed scope, what lies below it, and its ancestors can be over budget
    assert all(name.startswith(slowed) or slowed.startswith(name + "/") for name in failed), failed
    attn = next(c for c in out["checks"] if c["name"] == "scope:train_step/Transformer/layer_1/attn")
    assert attn["change"] == pytest.approx(0.5, abs=0.02)
    assert not any(c["name"].startswith("scope:train_step/Transformer/layer_0") and not c["passed"]
                   for c in out["checks"])
    assert any(s["scope"] == "train_step/Transformer/layer_1/attn" for s in out["scopes"])
    from traceview.config.files import schema

    pytest.importorskip("jsonschema").validate(out, schema("check"))


def test_a_larger_budget_passes_and_no_budget_only_reports(record, capsys, tmp_path):
    code, out = _check(capsys, tmp_path, record, "--max-scope-regression", "60%")
    assert code == 0 and out["verdict"] == "pass"
    assert any(c["name"].startswith("scope:") for c in out["checks"])
    code, out = _check(capsys, tmp_path, record)
    assert code == 0 and not any(c["name"].startswith("scope:") for c in out["checks"])
    assert out["scopes"]      # the diff still reports per-scope changes


def test_the_budget_in_a_config_file(record, capsys, tmp_path):
    config = tmp_path / "budgets.toml"
    config.write_text('[check]\nmax_scope_regression = "10%"\n')
    code, _ = _check(capsys, tmp_path, record, "--config", str(config))
    assert code == 1
    config.write_text('[check]\nmax_scope_regression = "ten"\n')
    code = main(["check", str(tmp_path / "new.json"), "--baseline", str(tmp_path / "base.json"),
                 "--config", str(config)])
    assert code == 2
