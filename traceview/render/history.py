"""The history report as a terminal table, Markdown (a pull-request comment), HTML (offline, with
trend charts), JUnit and JSON.

Each metric gets a unicode sparkline of its runs, its latest value and its change points, named by
the run that starts them. A change is marked worse (:x:) or better when the step times (or run
values) confirm it, and "not confirmed" otherwise. Labels, metric and op names come from users and
traces: every one is escaped for its format (render/escape.py).
"""

from __future__ import annotations

import html
import math
import xml.etree.ElementTree as ET

from traceview.history.changes import Change
from traceview.history.trends import HistoryReport, Series
from traceview.render.escape import markdown_text, terminal_lines, terminal_text, xml_text
from traceview.render.tables import markdown_table, text_table
from traceview.units import fmt_bytes, fmt_pct, fmt_time_us
from traceview.version import __version__

FORMATS = ("table", "json", "markdown", "html", "junit")
BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float | None]) -> str:
    """One block character per value, scaled between the smallest and the largest (a gap: a space)."""
    known = [v for v in values if v is not None and math.isfinite(v)]
    if not known:
        return ""
    low, high = min(known), max(known)
    span = high - low
    out = []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(" ")
        else:
            out.append(BARS[0] if span <= 0 else BARS[min(int((v - low) / span * len(BARS)), len(BARS) - 1)])
    return "".join(out)


def fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "us":
        return fmt_time_us(value)
    if unit == "fraction":
        return fmt_pct(value)
    if unit == "bytes":      # the history's byte metrics are memory peaks: binary units
        return fmt_bytes(value)
    return f"{value:.4g}"


def _change_text(series: Series, change: Change) -> str:
    relative = "" if change.change is None else f"{change.change:+.1%} "
    state = ("worse" if series.worse(change) else "better") if change.significant else "not confirmed"
    return (f"{relative}at {change.label} ({fmt_value(change.before, series.unit)} -> "
            f"{fmt_value(change.after, series.unit)}; {state})")


def _unconfirmed(series: Series) -> list[str]:
    """The candidates the step times did not confirm, counted (the JSON and HTML list them)."""
    count = sum(not c.significant for c in series.changes)
    return [f"{count} candidate{'s' if count > 1 else ''} not confirmed"] if count else []


def _latest(series: Series) -> str:
    return fmt_value(series.points[-1]["value"], series.unit) if series.points else "-"


def _regressions(report: HistoryReport) -> list[tuple[Series, Change]]:
    """Metrics whose latest confirmed change made them worse: where they stand now."""
    out = []
    for s in report.series:
        last = s.last_change
        if last is not None and s.worse(last):
            out.append((s, last))
    return out


def headline(report: HistoryReport) -> str:
    """One line: runs, confirmed change points, and which metrics stand worse since one."""
    confirmed = sum(c.significant for s in report.series for c in s.changes)
    worse = _regressions(report)
    head = f"{len(report.runs)} runs, {confirmed} confirmed change point{'s' if confirmed != 1 else ''}"
    if worse:
        names = ", ".join(f"{s.metric} {c.change:+.1%} since {c.label}" if c.change is not None
                          else f"{s.metric} since {c.label}" for s, c in worse[:4])
        return f"{head}; worse now: {names}"
    return f"{head}; no metric is worse since its last change"


# ------------------------------------------------------------------ terminal

def history_text(report: HistoryReport) -> str:
    out = [f"traceview {__version__} history: {headline(report)}", ""]
    if report.runs:
        first, last = report.runs[0], report.runs[-1]
        out += [f"runs {first['label']} ({first['time'][:10]}) .. {last['label']} ({last['time'][:10]})", ""]
    rows = [[s.metric, sparkline([p["value"] for p in s.points]), _latest(s),
             "; ".join([_change_text(s, c) for c in s.changes if c.significant] + _unconfirmed(s)) or "-"]
            for s in report.series]
    if rows:
        out += [text_table(["metric", "trend", "latest", "change points"], rows, "llrl"), ""]
    out += [f"warning: {w}" for w in report.warnings]
    return terminal_lines("\n".join(out).rstrip()) + "\n"


# ------------------------------------------------------------------ markdown

def history_markdown(report: HistoryReport, title: str | None = None) -> str:
    """A pull-request comment: the verdict, one sparkline per metric, each change named by its run."""
    worse = _regressions(report)
    mark = ":x:" if worse else ":white_check_mark:"
    out = [f"{title or '###'} {mark} traceview history: {markdown_text(headline(report))}", ""]
    if report.runs:
        first, last = report.runs[0], report.runs[-1]
        out += [f"{len(report.runs)} runs, {markdown_text(first['label'])} ({first['time'][:10]}) .. "
                f"{markdown_text(last['label'])} ({last['time'][:10]})", ""]
    rows = []
    for s in report.series:
        changes = [(":x: " if s.worse(c) else ":heavy_check_mark: ") + _change_text(s, c)
                   for c in s.changes if c.significant] + _unconfirmed(s)
        rows.append([s.metric, sparkline([p["value"] for p in s.points]), _latest(s), "; ".join(changes) or "-"])
    if rows:
        table = markdown_table(["metric", "trend (oldest to newest)", "latest", "change points"], rows, "llrl")
        out += [table, ""]
    if report.warnings:
        out += ["<details><summary>warnings</summary>", ""] + [f"- {markdown_text(w)}" for w in report.warnings] \
            + ["", "</details>"]
    return "\n".join(out).rstrip() + "\n"


# ------------------------------------------------------------------ html

_W, _H, _PAD, _LEFT = 680, 190, 44, 84


def _h(text: object) -> str:
    """Text for HTML: control characters shown as \\xNN, markup escaped."""
    return html.escape(terminal_text(text))


def _svg(series: Series) -> str:
    """A trend chart: the values (points, line), their spread over the steps (band), change points
    (dashed lines: red when confirmed, grey when not), every label escaped."""
    points = series.points
    values = [p["value"] for p in points]
    lows = [p["low"] if p["low"] is not None else p["value"] for p in points]
    highs = [p["high"] if p["high"] is not None else p["value"] for p in points]
    top, bottom = max(highs), min(lows)
    if top == bottom:
        top, bottom = top + (abs(top) * 0.05 or 1.0), bottom - (abs(bottom) * 0.05 or 1.0)
    n = len(points)

    def x(i: float) -> float:
        return _LEFT + (i * (_W - _LEFT - _PAD) / max(n - 1, 1))

    def y(v: float) -> float:
        return _H - _PAD / 2 - 6 - (v - bottom) / (top - bottom) * (_H - _PAD - 6)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" '
             f'role="img" aria-label="{_h(series.metric)} over {n} runs">']
    band = [f"{x(i):.1f},{y(h):.1f}" for i, h in enumerate(highs)] + \
           [f"{x(i):.1f},{y(lo):.1f}" for i, lo in reversed(list(enumerate(lows)))]
    parts.append(f'<polygon points="{" ".join(band)}" fill="#4c78a8" fill-opacity="0.15"/>')
    parts.append('<polyline fill="none" stroke="#4c78a8" stroke-width="2" points="'
                 + " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values)) + '"/>')
    labels = [p["label"] for p in points]
    for c in series.changes:
        if c.label not in labels:
            continue
        cx = (x(labels.index(c.label)) + x(labels.index(c.label) - 1)) / 2 if labels.index(c.label) else x(0)
        colour = "#d62728" if c.significant else "#999999"
        parts.append(f'<line class="change" x1="{cx:.1f}" x2="{cx:.1f}" y1="8" y2="{_H - _PAD / 2:.1f}" '
                     f'stroke="{colour}" stroke-dasharray="5,3" stroke-width="2"/>')
        parts.append(f'<text x="{cx + 4:.1f}" y="18" font-size="11" fill="{colour}">'
                     f'{_h(c.label[:40])}</text>')
    for i, p in enumerate(points):
        tip = f"{p['label']}: {fmt_value(p['value'], series.unit)}"
        parts.append(f'<circle cx="{x(i):.1f}" cy="{y(p["value"]):.1f}" r="3.5" fill="#4c78a8">'
                     f"<title>{_h(tip)}</title></circle>")
    parts.append(f'<text x="4" y="{y(top):.1f}" font-size="10" fill="#555">'
                 f'{_h(fmt_value(top, series.unit))}</text>')
    parts.append(f'<text x="4" y="{y(bottom):.1f}" font-size="10" fill="#555">'
                 f'{_h(fmt_value(bottom, series.unit))}</text>')
    for i in sorted({0, n - 1}):     # the first and the newest run, named under the axis
        anchor = "start" if i == 0 else "end"
        parts.append(f'<text x="{x(i):.1f}" y="{_H - 4}" font-size="10" fill="#555" text-anchor="{anchor}">'
                     f'{_h(points[i]["label"][:40])}</text>')
    parts.append("</svg>")
    return "".join(parts)


_CSS = ("body{font-family:system-ui,sans-serif;margin:2em;color:#222}section{margin-bottom:2em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px}"
        ".worse{color:#d62728}.better{color:#2ca02c}")


def history_html(report: HistoryReport) -> str:
    """A self-contained page (no script, no external resource): one trend chart per metric."""
    e = _h
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>traceview history: {e(headline(report))}</title><style>{_CSS}</style></head><body>",
           f"<h1>traceview history</h1><p>{e(headline(report))}</p>"]
    for s in report.series:
        out.append(f"<section><h2>{e(s.metric)} <small>({e(s.unit)})</small></h2>{_svg(s)}")
        if s.changes:
            items = "".join(
                f'<li class="{("worse" if s.worse(c) else "better") if c.significant else ""}">'
                f"{e(_change_text(s, c))} <small>{e(c.method)}</small></li>" for c in s.changes)
            out.append(f"<ul>{items}</ul>")
        out.append("</section>")
    if report.runs:
        rows = "".join(f"<tr><td>{e(r['label'])}</td><td>{e(r['time'])}</td>"
                       f"<td>{e(', '.join(f'{k}={v}' for k, v in r['meta'].items()))}</td>"
                       f"<td>{e(r['trace_path'] or '')}</td></tr>" for r in report.runs)
        out.append(f"<h2>Runs</h2><table><tr><th>label</th><th>time</th><th>meta</th><th>trace</th></tr>{rows}"
                   "</table>")
    if report.warnings:
        out.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{e(w)}</li>" for w in report.warnings) + "</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ junit

def history_junit(report: HistoryReport) -> str:
    """One testcase per metric: a failure when its latest confirmed change made it worse."""
    worse = {s.metric: c for s, c in _regressions(report)}
    suites = ET.Element("testsuites", name="traceview", tests=str(len(report.series)), failures=str(len(worse)))
    suite = ET.SubElement(suites, "testsuite", name="traceview history", tests=str(len(report.series)),
                          failures=str(len(worse)), errors="0", skipped="0")
    for s in report.series:
        case = ET.SubElement(suite, "testcase", classname="traceview.history", name=s.metric, time="0")
        summary = f"{s.metric}: latest {_latest(s)}; " + ("; ".join(_change_text(s, c) for c in s.changes)
                                                           or "no change point")
        if s.metric in worse:
            ET.SubElement(case, "failure", message=summary, type="regression").text = summary
        else:
            ET.SubElement(case, "system-out").text = summary
    ET.SubElement(suite, "system-out").text = "\n".join(f"warning: {w}" for w in report.warnings)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + xml_text(ET.tostring(suites, encoding="unicode")) + "\n"


def render(report: HistoryReport, fmt: str) -> str:
    """The report in format `fmt` (FORMATS)."""
    from traceview.render import jsontext

    if fmt == "json":
        return jsontext.dumps(report.to_json()) + "\n"
    if fmt == "markdown":
        return history_markdown(report)
    if fmt == "html":
        return history_html(report)
    if fmt == "junit":
        return history_junit(report)
    return history_text(report)
