"""The commands of docs/ci.md, run on the sample traces and real traces, through the CLI entry point."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from traceview.cli import main
from traceview.trace.read import load_profile

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ci.md"


@pytest.fixture(scope="module")
def budgets_file(tmp_path_factory) -> Path:
    """The budgets TOML shown in docs/ci.md, so the docs and this test use the same configuration."""
    blocks = re.findall(r"```toml\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "docs/ci.md shows no ```toml budgets block"
    path = tmp_path_factory.mktemp("ci") / "perf-budgets.toml"
    path.write_text(blocks[0])
    return path


@pytest.fixture(scope="module")
def baseline_json(sample_traces, tmp_path_factory) -> Path:
    """`traceview analyze sample_traces/mlp --format json`: the stored baseline of the timed check."""
    path = tmp_path_factory.mktemp("ci") / "perf-baseline.json"
    assert main(["analyze", str(sample_traces / "mlp"), "--format", "json", "-o", str(path)]) == 0
    return path


def _json_report(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_same_program_captured_again_passes(sample_traces, baseline_json, budgets_file, tmp_path, capsys):
    summary, junit = tmp_path / "summary.md", tmp_path / "timed.junit.xml"
    code = main(["check", str(sample_traces / "mlp_repeat"), "--baseline", str(baseline_json),
                 "--config", str(budgets_file), "--markdown-out", str(summary), "--junit-out", str(junit)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASS" in out and ":white_check_mark:" in summary.read_text()
    suite = ET.parse(junit).getroot().find("testsuite")
    assert int(suite.get("failures")) == 0 and int(suite.get("tests")) >= 1
    # Against the trace itself rather than its JSON: the same verdict.
    assert main(["check", str(sample_traces / "mlp_repeat"), "--baseline", str(sample_traces / "mlp"),
                 "--config", str(budgets_file)]) == 0


def test_slower_program_fails_and_names_the_slowed_ops(sample_traces, baseline_json, budgets_file, capsys):
    code = main(["check", str(sample_traces / "mlp_slow"), "--baseline", str(baseline_json),
                 "--config", str(budgets_file), "--format", "json"])
    report = _json_report(capsys)
    assert code == 1 and report["verdict"] == "fail"
    failed = {c["name"] for c in report["checks"] if not c["passed"]}
    assert "step_time" in failed
    # The op that slowed most, per the raw op events of the two traces, is named over budget.
    per_step = {}
    for name in ("mlp", "mlp_slow"):
        raw = load_profile(sample_traces / name).ops
        per_step[name] = raw.groupby("op", observed=True)["self_ps"].sum() / raw["step"].nunique()
    worst = (per_step["mlp_slow"] - per_step["mlp"]).idxmax()
    assert f"op:jit_train_step/{worst}" in failed
    # The Markdown names it in the table of checks over budget.
    assert main(["check", str(sample_traces / "mlp_slow"), "--baseline", str(baseline_json),
                 "--config", str(budgets_file), "--format", "markdown"]) == 1
    markdown = capsys.readouterr().out
    over = markdown.split("#### Over budget", 1)[1].split("<details>", 1)[0]
    assert f"op:jit_train_step/{worst} |" in over and ":x:" in markdown


def test_static_hlo_check_flags_the_added_flops(sample_traces, tmp_path, capsys):
    xla = {n: json.loads((sample_traces / n / "capture.json").read_text())["xla_cost_analysis"]["flops"]
           for n in ("mlp", "mlp_slow")}
    code = main(["check", str(sample_traces / "mlp_slow" / "hlo"), "--baseline", str(sample_traces / "mlp" / "hlo"),
                 "--format", "json"])
    report = _json_report(capsys)
    assert code == 1
    flops = next(c for c in report["checks"] if c["name"] == "flops:jit_train_step")
    assert not flops["passed"]
    assert flops["baseline"] == pytest.approx(xla["mlp"], rel=1e-6)
    assert flops["current"] == pytest.approx(xla["mlp_slow"], rel=1e-6)
    # A stored `traceview hlo --format json` works as the baseline too.
    stored = tmp_path / "hlo-baseline.json"
    assert main(["hlo", str(sample_traces / "mlp" / "hlo"), "--format", "json", "-o", str(stored)]) == 0
    assert main(["check", str(sample_traces / "mlp" / "hlo"), "--baseline", str(stored)]) == 0
    assert main(["check", str(sample_traces / "mlp_slow" / "hlo"), "--baseline", str(stored)]) == 1


def test_unusable_input_exits_2(sample_traces, baseline_json, tmp_path, capsys):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"summary": {"steps": [')
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"verdict": "pass", "checks": [], "ops": []}))
    cases = [
        (["check", str(tmp_path / "missing"), "--baseline", str(baseline_json)], "missing"),
        (["check", str(sample_traces / "mlp"), "--baseline", str(corrupt)], "not valid JSON"),
        (["check", str(sample_traces / "mlp"), "--baseline", str(report)], "not a baseline"),
        (["check", str(sample_traces / "mlp" / "hlo"), "--baseline", str(sample_traces / "mlp")], "cannot compare"),
        (["check", str(sample_traces / "mlp"), "--baseline", str(baseline_json), "--max-op-regression", "ten"],
         "--max-op-regression"),
    ]
    for argv, message in cases:
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("traceview: error:") and message in err and "\n" not in err


def test_real_trace_against_itself_passes(shared_traces, capsys):
    path = str(shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb")
    assert main(["check", path, "--baseline", path, "--format", "junit"]) == 0
    root = ET.fromstring(capsys.readouterr().out)
    assert root.find("testsuite").get("failures") == "0"


def test_two_mi300x_workloads_report_new_and_vanished_ops(shared_traces, capsys):
    folder = shared_traces / "AMD-AGI-TraceLens"
    code = main(["diff", str(folder / "jax08_gemm"), str(folder / "jax08_attention"), "--format", "json"])
    report = _json_report(capsys)
    assert code in (0, 1)
    statuses = {op["status"] for op in report["ops"]}
    assert {"new", "vanished"} <= statuses
    # A new op is one the gemm trace never ran (by module and name).
    new_ops = {(op["module"], op["op"]) for op in report["ops"] if op["status"] == "new"}
    gemm = load_profile(folder / "jax08_gemm").ops
    assert new_ops and not new_ops & set(zip(gemm["module"].astype(str), gemm["op"].astype(str)))
