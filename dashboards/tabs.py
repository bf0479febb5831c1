"""The dashboard's tabs: only the open one's content runs.

Streamlit runs every `st.tabs` body on every run, hidden or not; with the
open tab tracked (`on_change="rerun"`, a Streamlit of 2026 or later) a closed
tab's body is skipped, and its module is imported when it is first opened.
So the first page costs the Overview alone, and a click on a tab reruns the
script with that tab open (the analysis stays in the cache). Widgets inside
tabs keep their values while their tab is closed (dashboards/persist.py).
The Overview draws the analysis' record (dashboards/front.py); the other tabs
its tables, which they wait for while the analysis is still loading.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

import streamlit as st

from traceview.dashboards.data import View
from traceview.dashboards.front import Front

# Tab name -> the module of traceview.dashboards that draws it (its `render(view)`).
TABS = {"Overview": "overview", "Roofline": "roofline_view", "Ops": "ops_table", "Timeline": "timeline",
        "Op detail": "op_detail", "Model": "model", "Memory": "memory", "Parallelism": "parallelism",
        "Inference": "inference", "What if": "whatif", "Compare": "compare", "History": "history"}
TAB_KEY = "tv_tab"        # session-state key of the open tab's name
FIRST = "overview"        # the tab drawn from the analysis' record alone

LAZY = "on_change" in inspect.signature(st.tabs).parameters


def render(front: Front, view: Callable[[], View]) -> None:
    """The tab bar, and the open tab's content (every tab's, on a Streamlit without lazy tabs): the Overview
    from `front`, the others from `view()` (the full analysis: it may wait for it)."""
    tabs = st.tabs(list(TABS), key=TAB_KEY, on_change="rerun") if LAZY else st.tabs(list(TABS))
    for tab, module in zip(tabs, TABS.values()):
        if getattr(tab, "open", None) is False:   # a closed tab: its body does not run
            continue
        with tab:
            page = importlib.import_module(f"traceview.dashboards.{module}")
            if module == FIRST:
                page.render(front)
            else:
                page.render(view())
