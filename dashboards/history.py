"""History: the runs recorded in a history store (`traceview dashboard PATH --history DB`), one trend
chart per metric with its change points marked, and a run whose trace is recorded opened in the other
tabs. The figures are `traceview history report`'s (traceview.history.trends)."""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib.util
import time
from pathlib import Path
from typing import TYPE_CHECKING

import altair as alt
import pandas as pd
import streamlit as st

from traceview.dashboards.config import from_env
from traceview.dashboards.data import View
from traceview.dashboards.persist import keep_across_tabs
from traceview.errors import UserError
from traceview.render.escape import markdown_code, markdown_text

if TYPE_CHECKING:
    from traceview.history.trends import HistoryReport, Series

_HEIGHT = 360            # pixels per trend chart, legend included
_SCALE = {"us": (1e-3, "ms"), "bytes": (2.0 ** -20, "MiB"), "fraction": (100.0, "%")}


@st.cache_data(show_spinner=False, max_entries=8)
def _report(db: str, stamp: tuple) -> HistoryReport:
    """The report of every stored metric, the headline ones first (a store with hundreds of op series keeps
    them within the report's limit); `stamp` changes when the SQLite file does (a server: each minute)."""
    from traceview.history.store import open_store
    from traceview.history.trends import HEADLINE, build_report

    with open_store(db) as store:
        return build_report(store, [*HEADLINE, "*"])


def _stamp(db: str) -> tuple:
    path = Path(db)
    if "://" not in db and path.exists():
        wal = path.with_name(path.name + "-wal")
        return (path.stat().st_mtime_ns, path.stat().st_size, wal.stat().st_mtime_ns if wal.exists() else 0)
    return (int(time.time() // 60),)


def _chart(series: Series) -> alt.LayerChart:
    """Values per run (points and line), their spread over the steps (band), change points (rules)."""
    from traceview.render.history import fmt_value

    factor, unit = _SCALE.get(series.unit, (1.0, series.unit))
    frame = pd.DataFrame(series.points)
    frame["run"] = range(len(frame))
    for column in ("value", "low", "high"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce") * factor
    frame["shown"] = [fmt_value(v, series.unit) for v in (p["value"] for p in series.points)]
    labels = list(frame["label"])
    x = alt.X("run:Q", title="run", axis=alt.Axis(values=list(frame["run"]), labelExpr=_label_expr(labels)))
    base = alt.Chart(frame)
    layers = [
        base.mark_area(opacity=0.2, color="#4c78a8").encode(x=x, y=alt.Y("low:Q", title=unit), y2="high:Q"),
        base.mark_line(color="#4c78a8").encode(x=x, y="value:Q"),
        base.mark_point(filled=True, size=50, color="#4c78a8").encode(
            x=x, y="value:Q", tooltip=[alt.Tooltip("label:N", title="run"), alt.Tooltip("shown:N", title="value")]),
    ]
    changes = pd.DataFrame([{"run": labels.index(c.label) - 0.5, "label": c.label,
                             "what": "confirmed" if c.significant else "not confirmed"}
                            for c in series.changes if c.label in labels])
    if len(changes):
        colour = alt.Color("what:N", scale=alt.Scale(domain=["confirmed", "not confirmed"],
                                                     range=["#d62728", "#999999"]),
                           legend=alt.Legend(orient="top", title="change point"))
        rules = alt.Chart(changes)
        layers += [rules.mark_rule(strokeDash=[5, 3], size=2).encode(x="run:Q", color=colour,
                                                                      tooltip=["label:N", "what:N"]),
                   rules.mark_text(align="left", dx=4, dy=-6, baseline="bottom").encode(
                       x="run:Q", y=alt.value(8), text="label:N", color=colour)]
    return alt.layer(*layers).properties(height=_HEIGHT - 80, title=series.metric)


def _label_expr(labels: list[str]) -> str:
    """The run labels on the x axis (Vega expression; labels quoted as JSON strings)."""
    import json

    return f"{json.dumps([label[:24] for label in labels])}[datum.value] || ''"


def _open_run(path: str) -> None:
    """Open a recorded run's trace in the other tabs: the sidebar's path, its own run and host."""
    st.session_state["path"] = path
    for key in ("run", "host"):
        st.session_state.pop(key, None)


def render(view: View) -> None:
    if importlib.util.find_spec("sqlalchemy") is None or importlib.util.find_spec("scipy") is None:
        st.info("The History tab needs the history extra: pip install 'traceview[history]'")
        return
    from traceview.history.trends import HEADLINE
    from traceview.render.history import fmt_value, headline

    db = st.text_input("history database", value=from_env().history or "", key="history_db", **keep_across_tabs(),
                       help="a SQLite file or postgresql:// URL written by `traceview history add` or "
                            "`traceview check --history DB --record LABEL`")
    if not db:
        st.info("No history database: start the dashboard with `--history DB`, or give one above.")
        return
    try:
        report = _report(db, _stamp(db))
    except UserError as exc:
        st.error(markdown_text(exc))
        return
    if not report.series:
        st.caption(markdown_text("; ".join(report.warnings)))
        return
    names = [s.metric for s in report.series]
    default = [n for p in HEADLINE[:3] for n in names if fnmatch.fnmatchcase(n, p)]
    chosen = st.multiselect("metrics", names, default=default, key="history_metrics", **keep_across_tabs(),
                            help="every stored metric: op:<module>/<op> per op, peak_memory:static:<module>, ...")
    shown = dataclasses.replace(report, series=[s for s in report.series if s.metric in chosen])
    st.markdown(f"**{markdown_text(headline(shown))}**")
    for warning in report.warnings:
        st.caption(markdown_text(warning))
    for series in sorted(shown.series, key=lambda s: chosen.index(s.metric)):
        st.altair_chart(_chart(series), width="stretch", height=_HEIGHT)
        confirmed = [c for c in series.changes if c.significant]
        for c in confirmed:
            worse = "worse" if series.worse(c) else "better"
            change = "" if c.change is None else f"{c.change:+.1%} "
            st.caption(f"change point at {markdown_code(c.label)}: {change}"
                       f"({markdown_text(fmt_value(c.before, series.unit))} → "
                       f"{markdown_text(fmt_value(c.after, series.unit))}; {worse})")
    runs = pd.DataFrame([{"label": r["label"], "time": r["time"], "target": r["target"], "steps": r["steps"],
                          "meta": ", ".join(f"{k}={v}" for k, v in r["meta"].items()),
                          "trace": r["trace_path"] or ""} for r in report.runs])
    st.markdown("##### Runs")
    st.dataframe(runs, hide_index=True, width="stretch")
    openable = [r for r in report.runs if r["trace_path"] and Path(r["trace_path"]).exists()]
    if openable:
        c1, c2 = st.columns([3, 1])
        pick = c1.selectbox("open a recorded run in the other tabs", [r["label"] for r in openable],
                            index=len(openable) - 1, key="history_open", **keep_across_tabs())
        path = next(r["trace_path"] for r in openable if r["label"] == pick)
        c2.button("Open", key="history_open_button", on_click=_open_run, args=(path,),
                  help=f"the trace recorded with {pick}: {path}")
