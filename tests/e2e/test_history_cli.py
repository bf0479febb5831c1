"""`traceview history add|report` and `check --history` through the CLI, on the sample traces.

The done-when of the history: seven captures of the same program (mlp, mlp_repeat) and then five of a
slower one (mlp_slow, a wider hidden layer) give exactly one change point of the step time, at the
first slower run, confirmed by the step times, and none among the seven.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from traceview.cli import main

pytest.importorskip("sqlalchemy", reason="the history needs the `history` extra")
pytest.importorskip("scipy", reason="the history needs the `history` extra")

UNCHANGED = ["mlp", "mlp_repeat", "mlp", "mlp_repeat", "mlp", "mlp_repeat", "mlp"]
SLOWER = ["mlp_slow"] * 5
DOCS = Path(__file__).resolve().parents[2] / "docs" / "ci.md"


def _label(i: int) -> str:
    return f"{'abcdef0'[i % 7]}{i:02d}-commit"   # labels vary; the order is the time


def _add(db: Path, trace: Path, i: int) -> None:
    assert main(["history", "add", str(db), str(trace), "--label", _label(i), "--time",
                 f"2026-11-{i + 1:02d}T08:00:00Z", "--meta", "branch=main", "--meta", f"commit=c{i}"]) == 0


@pytest.fixture(scope="module")
def unchanged_db(sample_traces, tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("history") / "unchanged.db"
    for i, name in enumerate(UNCHANGED):
        _add(db, sample_traces / name, i)
    return db


@pytest.fixture(scope="module")
def series_db(sample_traces, unchanged_db, tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("history") / "series.db"
    db.write_bytes(unchanged_db.read_bytes())    # the store is one file: copying it is a CI cache restore
    for i, name in enumerate(SLOWER, start=len(UNCHANGED)):
        _add(db, sample_traces / name, i)
    return db


def _report(db: Path, capsys, *extra: str) -> dict:
    capsys.readouterr()
    assert main(["history", "report", str(db), "--format", "json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_seven_unchanged_then_five_slower_gives_one_change_at_the_first_slower(series_db, capsys):
    report = _report(series_db, capsys)
    # The DESIGN.md contract: these fields, whatever is added beside them.
    assert set(report) == {"runs", "series", "warnings"}
    assert {"label", "time", "meta"} <= set(report["runs"][0])
    assert {"metric", "points", "changes"} <= set(report["series"][0])
    assert {"label", "value", "low", "high"} <= set(report["series"][0]["points"][0])
    assert {"label", "before", "after", "change", "significant"} <= set(report["series"][0]["changes"][0])
    assert [r["label"] for r in report["runs"]] == [_label(i) for i in range(12)]
    assert report["runs"][3]["meta"] == {"branch": "main", "commit": "c3"}
    step = next(s for s in report["series"] if s["metric"] == "step_time")
    assert len(step["points"]) == 12
    assert [(c["label"], c["significant"]) for c in step["changes"]] == [(_label(7), True)]
    change = step["changes"][0]
    # Before / after: the medians of the runs' median step times, as the points give them.
    values = [p["value"] for p in step["points"]]
    assert change["before"] == pytest.approx(sorted(values[:7])[3])
    assert change["after"] == pytest.approx(sorted(values[7:])[2])
    assert change["change"] > 1.0 and change["low"] > 0          # about three times slower, and real
    # Each point's spread is the quartiles of that run's own step times.
    assert all(p["low"] <= p["value"] <= p["high"] for p in step["points"])


def test_no_change_among_the_unchanged_runs(unchanged_db, capsys):
    report = _report(unchanged_db, capsys, "--metric", "*")
    assert len(report["runs"]) == 7
    assert report["series"] and all(not s["changes"] for s in report["series"]), \
        [(s["metric"], s["changes"]) for s in report["series"] if s["changes"]]


def test_last_and_metric_select_runs_and_series(series_db, capsys):
    report = _report(series_db, capsys, "--last", "5", "--metric", "step_time", "--metric", "op:*")
    assert len(report["runs"]) == 5 and report["runs"][0]["label"] == _label(7)
    metrics = [s["metric"] for s in report["series"]]
    assert metrics[0] == "step_time" and all(m.startswith("op:jit_train_step/") for m in metrics[1:])
    assert all(not s["changes"] for s in report["series"])        # five runs of one program


def test_markdown_comment_names_the_change_and_the_verdict(series_db, capsys):
    capsys.readouterr()
    assert main(["history", "report", str(series_db), "--format", "markdown"]) == 0
    markdown = capsys.readouterr().out
    assert markdown.startswith("### :x: traceview history:")
    row = next(line for line in markdown.splitlines() if line.startswith("| step\\_time |")
               or line.startswith("| step_time |"))
    spark = row.split("|")[2].strip()
    assert len(spark) == 12 and set(spark[:7]) == {"▁"} and set(spark[7:]) == {"█"}
    assert f"at {_label(7)}" in row and ":x:" in row and "worse" in row


def test_html_report_is_self_contained_with_a_chart_per_metric(series_db, tmp_path):
    out = tmp_path / "history.html"
    assert main(["history", "report", str(series_db), "--format", "html", "-o", str(out)]) == 0
    page = out.read_text()
    assert "<script" not in page and not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    report_json = tmp_path / "history.json"
    assert main(["history", "report", str(series_db), "--format", "json", "-o", str(report_json)]) == 0
    series = json.loads(report_json.read_text())["series"]
    assert page.count("<svg") == len(series)
    assert page.count('class="change"') == sum(len(s["changes"]) for s in series)


def test_junit_fails_the_metrics_that_got_worse(series_db, capsys):
    capsys.readouterr()
    assert main(["history", "report", str(series_db), "--format", "junit"]) == 0
    suite = ET.fromstring(capsys.readouterr().out).find("testsuite")
    failed = {case.get("name") for case in suite.iter("testcase") if case.find("failure") is not None}
    assert "step_time" in failed and "mfu" not in failed


@pytest.fixture(scope="module")
def budgets_file(tmp_path_factory) -> Path:
    blocks = re.findall(r"```toml\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.S)
    path = tmp_path_factory.mktemp("ci") / "perf-budgets.toml"
    path.write_text(blocks[0])
    return path


def test_check_against_history(sample_traces, unchanged_db, budgets_file, tmp_path, capsys):
    db = tmp_path / "ci.db"
    db.write_bytes(unchanged_db.read_bytes())
    summary = tmp_path / "summary.md"
    capsys.readouterr()
    code = main(["check", str(sample_traces / "mlp_slow"), "--history", str(db), "--config", str(budgets_file),
                 "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and "step_time" in {c["name"] for c in report["checks"] if not c["passed"]}
    # The same program captured again passes, and --record stores it.
    assert main(["check", str(sample_traces / "mlp_repeat"), "--history", str(db), "--config", str(budgets_file),
                 "--record", "pr-8", "--meta", "branch=feature", "--markdown-out", str(summary)]) == 0
    text = summary.read_text()
    assert ":white_check_mark: traceview check" in text and "#### :white_check_mark: traceview history" in text
    runs = _report(db, capsys)["runs"]
    assert runs[-1]["label"] == "pr-8" and runs[-1]["meta"] == {"branch": "feature"}
    # The window starts at the last change point: after five slower runs, the slower program passes.
    for i in range(5):
        assert main(["check", str(sample_traces / "mlp_slow"), "--history", str(db), "--config", str(budgets_file),
                     "--record", f"slow-{i}"]) == (1 if i < 2 else 0), i
    capsys.readouterr()
    assert main(["check", str(sample_traces / "mlp"), "--history", str(db), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["checks"][0]["change"] < -0.5   # faster than the window


def test_first_check_with_record_creates_the_store(sample_traces, tmp_path, capsys):
    db = tmp_path / "new.db"
    assert main(["check", str(sample_traces / "mlp"), "--history", str(db), "--record", "first"]) == 0
    assert "first run recorded" in capsys.readouterr().err
    assert [r["label"] for r in _report(db, capsys)["runs"]] == ["first"]
