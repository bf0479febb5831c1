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
        raw = load_profile(sample_traces / name).op_executions()
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
    gemm = load_profile(folder / "jax08_gemm").op_executions()
    assert new_ops and not new_ops & set(zip(gemm["module"].astype(str), gemm["op"].astype(str)))


def _recipe_commands(heading: str) -> list[str]:
    """The `traceview ...` commands of the first ```yaml block after `heading` in docs/ci.md (folded
    `run: >` lines joined, as YAML joins them)."""
    text = DOCS.read_text(encoding="utf-8").split(heading, 1)[1]
    block = re.search(r"```yaml\n(.*?)```", text, flags=re.S).group(1)
    commands, lines = [], block.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"(\s*)(?:- )?run: (>)?\s*(.*)$", line)
        if not m:
            continue
        if m.group(2):
            indent = len(m.group(1))
            folded = []
            for follow in lines[i + 1:]:
                if not follow.strip() or len(follow) - len(follow.lstrip()) <= indent:
                    break
                folded.append(follow.strip())
            command = " ".join(folded)
        else:
            command = m.group(3)
        if command.startswith("traceview "):
            commands.append(command)
    return commands


def test_history_recipe(sample_traces, budgets_file, tmp_path, monkeypatch, capsys):
    """The GitHub recipe's commands, as the jobs of twelve commits to main (seven of the same program,
    then five of a slower one) and a pull request, on the sample traces."""
    import os
    import shlex

    pytest.importorskip("sqlalchemy", reason="the history needs the `history` extra")
    pytest.importorskip("ruptures", reason="the history needs the `history` extra")
    commands = _recipe_commands("### GitHub Actions, SQLite in the cache")
    record = next(c for c in commands if "--record" in c)
    pull_request = next(c for c in commands if "--history" in c and "--record" not in c)
    report = next(c for c in commands if c.startswith("traceview history report"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "perf-budgets.toml").write_text(budgets_file.read_text())
    (tmp_path / "perf-out").mkdir()

    def run(command: str, trace: str, **env: str) -> int:
        os.environ.update(env)
        argv = shlex.split(os.path.expandvars(command).replace("perf-out/trace", str(sample_traces / trace)))
        assert argv[0] == "traceview"
        return main(argv[1:])

    monkeypatch.setenv("GITHUB_REF_NAME", "main")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    codes = []
    for i, trace in enumerate(["mlp", "mlp_repeat"] * 3 + ["mlp"] + ["mlp_slow"] * 5):
        codes.append(run(record, trace, GITHUB_SHA=f"sha{i:02d}", GITHUB_RUN_ID=str(100 + i)))
    assert codes == [0] * 7 + [1, 1, 0, 0, 0]
    assert run(pull_request, "mlp_repeat") == 0        # faster than the (slower) window: no regression
    comment = (tmp_path / "perf-out" / "comment.md").read_text()
    check, history = comment.split("traceview history", 1)
    assert ":white_check_mark: traceview check" in check
    step_row = next(line for line in history.splitlines() if line.startswith("| step"))
    assert "▁▁▁▁▁▁▁█████" in step_row and "at sha07" in step_row and ":x:" in step_row
    assert run(report, "mlp") == 0
    page = (tmp_path / "perf-out" / "history.html").read_text()
    assert page.count("<svg") >= 3 and "sha07" in page
    capsys.readouterr()
    assert main(["history", "report", "perf-history.db", "--format", "json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["label"] for r in runs] == [f"sha{i:02d}" for i in range(12)]
    assert runs[0]["meta"] == {"branch": "main", "run": "100"}
