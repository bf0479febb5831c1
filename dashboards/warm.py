"""Warm the dashboard's server process before a browser opens it.

Streamlit imports nothing and reads nothing until the first browser session
runs the app script; that first run then pays for the imports (pandas, the
pipeline), the trace's read and analysis. `traceview dashboard` starts the
server through `traceview.dashboards.serve`, which runs `warm` in a thread
beside the server: it fills the same `st.cache_resource` entries the page reads (the
cache is per process, keyed by the function and its arguments) and prints
READY when the first page needs nothing more. With a stored record of the
analysis (dashboards/front.py) that is as soon as the record is read: the
full analysis is loaded after READY, and a session that opens before it is
there draws the header and the Overview from the record. Without one, READY
comes after the analysis. A session that needs the analysis before it is
loaded waits on the cache's per-key lock, under the page's spinner, instead
of reading the trace a second time. The other tabs' modules are imported
once the first page was shown (and Altair's schema loaded: only they draw
Vega charts), so that work does not compete with it.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from traceview.dashboards.config import DashboardConfig

APP = Path(__file__).resolve().parent / "app.py"
READY = "first page ready"

# After the first page was drawn, the browser still fetches Streamlit's scripts from this process for a
# moment: the other tabs' imports (about a second of CPU, holding the GIL) wait that long.
QUIET_S = 3.0
# After READY, the full analysis (seconds of CPU on a pod, when the first page came from a stored record) or
# the writing of its record (when it did not) starts once the first page was drawn and the browser had a
# moment for it (ANALYSIS_AFTER_PAGE_S), or when no browser came within ANALYSIS_WAIT_S; the analysis started
# at once slowed the page's drawing by about half a second (docs/dashboard.md).
ANALYSIS_AFTER_PAGE_S = 2.0
ANALYSIS_WAIT_S = 5.0

_shown = threading.Event()

THREAD = "traceview-warm"


class _NoContextWarning(logging.Filter):
    """The warm-up runs the page's cached functions outside a browser session, so Streamlit's spinner finds
    no script context and says so: expected here, and not worth a line in the server's log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.threadName != THREAD


def start(config: DashboardConfig) -> threading.Thread:
    """Run `warm` in a daemon thread of this (the server's) process."""
    logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").addFilter(_NoContextWarning())
    thread = threading.Thread(target=warm, args=(config,), name=THREAD, daemon=True)
    thread.start()
    return thread


def page_shown(seconds: float, tab: str | None) -> None:
    """The app finished a run that drew a page (in `seconds`): the rest of the warming may start.

    TRACEVIEW_DASHBOARD_TIMING=1 logs every run's time on stderr (benchmarks/bench_dashboard.py reads it).
    """
    _shown.set()
    if os.environ.get("TRACEVIEW_DASHBOARD_TIMING") == "1":
        print(f"traceview dashboard: script run {seconds:.3f} s (tab {tab}) at {time.time():.3f}", file=sys.stderr,
              flush=True)


def warm_first_page(config: DashboardConfig) -> tuple[float, bool]:
    """Import and read what the header and the Overview show: a stored record of the analysis, else the
    analysis itself. Returns the seconds it took, and whether it was the stored record.

    Raises what loading raises (the page shows it again, as the one-line error).
    """
    t = time.perf_counter()
    from traceview.dashboards import overview
    from traceview.dashboards.data import hardware, load_view, opening_request, stored_front

    request = opening_request(config)
    hardware(request.hardware_file)
    first = stored_front(config, request, request.stamp())
    overview.warm(first if first is not None else load_view(request).front)
    return time.perf_counter() - t, first is not None


def warm_analysis(config: DashboardConfig) -> float:
    """Load the full analysis the other tabs read, and keep its record for the next opening (when it was
    not read from a stored one). Returns the seconds it took."""
    t = time.perf_counter()
    from traceview.dashboards import overview
    from traceview.dashboards.data import load_view, opening_request, store_record

    view = load_view(opening_request(config))
    overview.warm(view.front)
    store_record(config, view)
    return time.perf_counter() - t


def warm_other_tabs() -> None:
    """Import the other tabs' modules (altair, the diff and memory reports...), and load Altair's schema, for
    quick tab switches."""
    from traceview.dashboards.tabs import TABS

    for name in list(TABS.values())[1:]:   # the first tab (the Overview) is warm already
        importlib.import_module(f"traceview.dashboards.{name}")
    _warm_altair()


def _warm_altair() -> None:
    """The first chart a process turns into Vega-Lite loads Altair's schema and validator (about a second).
    The other tabs draw Altair charts; the Overview draws HTML (dashboards/bars.py), so load it here."""
    import altair as alt
    import pandas as pd

    alt.Chart(pd.DataFrame({"x": [0.0]})).mark_point().encode(x="x:Q").to_dict()


def warm(config: DashboardConfig, out: TextIO | None = None, wait_for_page: bool = True) -> None:
    """Warm the first page, say READY on `out` (stdout), then the full analysis, then (once a page was
    shown) the other tabs.
    A failure is one line on `out`: the page shows the error itself, and the server stays up."""
    out = out or sys.stdout
    try:
        seconds, from_record = warm_first_page(config)
        how = "read from the stored analysis" if from_record else "analysed"
        print(f"traceview dashboard: {config.path} {how} in {seconds:.1f} s, {READY}", file=out, flush=True)
        if wait_for_page and _shown.wait(ANALYSIS_WAIT_S):
            time.sleep(ANALYSIS_AFTER_PAGE_S)
        seconds = warm_analysis(config)   # without a stored record, only stores this one
        if from_record:
            print(f"traceview dashboard: {config.path} analysed in {seconds:.1f} s", file=out, flush=True)
    except Exception as exc:
        print(f"traceview dashboard: could not pre-load {config.path}: {_one_line(exc)}", file=out, flush=True)
    if wait_for_page:
        _shown.wait()
        time.sleep(QUIET_S)
    try:
        warm_other_tabs()
    except Exception as exc:   # the tab shows it when opened
        print(f"traceview dashboard: could not import a tab: {_one_line(exc)}", file=out, flush=True)


def _one_line(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"
