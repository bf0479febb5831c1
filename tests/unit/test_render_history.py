"""The history renderers: sparklines, hostile labels in every format, a self-contained HTML page."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("sqlalchemy", reason="the history needs the `history` extra")

from traceview.history.changes import Change  # noqa: E402
from traceview.history.trends import HistoryReport, Series  # noqa: E402
from traceview.render.history import history_html, history_junit, history_markdown, history_text, sparkline  # noqa: E402

HOSTILE = "x|<img src=//evil>`\x1b[2J*[link](http://a)"


def test_sparkline_scales_between_the_extremes():
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([5, 5, 5]) == "▁▁▁"
    assert sparkline([1, None, 9]) == "▁ █"
    assert sparkline([]) == ""


def _report() -> HistoryReport:
    points = [{"label": f"{HOSTILE}{i}", "value": v, "low": None, "high": None}
              for i, v in enumerate([10.0, 10.0, 20.0, 20.0])]
    change = Change(index=2, label=f"{HOSTILE}2", before=10.0, after=20.0, change=1.0, low=0.9, high=1.1,
                    significant=True, method="test")
    runs = [{"label": p["label"], "time": "2026-11-26T00:00:00+00:00", "meta": {HOSTILE: HOSTILE},
             "trace_path": HOSTILE, "target": None, "steps": 1} for p in points]
    return HistoryReport(runs, [Series(f"op:{HOSTILE}", "us", points, [change])], [HOSTILE])


def test_hostile_names_are_escaped_in_every_format():
    report = _report()
    text = history_text(report)
    assert "\x1b" not in text
    markdown = history_markdown(report)
    assert "<img" not in markdown and "[link](" not in markdown
    assert all(line.count("|") - line.count("\\|") == 5 for line in markdown.splitlines() if line.startswith("| "))
    page = history_html(report)
    assert "<img" not in page and "&lt;img" in page and "\x1b" not in page
    ET.fromstring(history_junit(report).split("\n", 1)[1])          # well-formed XML
    json.dumps(report.to_json())


def test_html_draws_the_change_in_red_and_is_offline():
    page = history_html(_report())
    assert page.count("<svg") == 1 and 'stroke="#d62728"' in page
    assert "<script" not in page and "http" not in page.replace("http://www.w3.org/2000/svg", "").replace(
        "http://a", "")


def test_markdown_verdict_names_the_worse_metric():
    markdown = history_markdown(_report())
    assert markdown.startswith("### :x: traceview history:") and "+100.0%" in markdown
