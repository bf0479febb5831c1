"""The traceview dashboard (Streamlit). Start it with `traceview dashboard PATH`.

The sidebar picks what to look at (a path, a run and host of a log dir, an
uploaded trace, the target chip); the tabs show one analysis. Every number
comes from the same Analysis and report records as `traceview analyze`.
Bad input is shown as the one-line UserError message, never a traceback.
Only the open tab's content runs (dashboards/tabs.py). While the full
analysis is loading, a stored record of it draws the header and the Overview
(dashboards/front.py); the other tabs wait for the analysis.
"""

from __future__ import annotations

import sys
import time
import traceback

import streamlit as st

from traceview.dashboards import tabs, warm
from traceview.dashboards.config import DashboardConfig, from_env
from traceview.dashboards.data import (
    AS_LOADED,
    LoadRequest,
    View,
    default_run,
    hardware,
    load_view,
    loaded,
    runs_of,
    save_upload,
    stored_front,
)
from traceview.dashboards.front import Front
from traceview.errors import UserError
from traceview.render.escape import markdown_code, markdown_text

ALL_HOSTS = "all hosts"


def _sidebar(config: DashboardConfig) -> LoadRequest:
    """What to open, from the sidebar widgets."""
    sb = st.sidebar
    sb.title("traceview")
    path = sb.text_input("trace path", value=config.path or "", key="path",
                         help="a log dir (plugins/profile/<run>/), a run dir or one .xplane.pb file")
    upload = sb.file_uploader("or upload a trace", type=["pb", "gz"], key="upload",
                              help="a <host>.xplane.pb (or .xplane.pb.gz) file")
    if upload is not None:
        path = str(save_upload(upload.name, upload.getvalue()))
    if not path:
        raise UserError("no trace: give a path in the sidebar, upload an .xplane.pb file, "
                        "or start with `traceview dashboard PATH`")
    runs = runs_of(path)
    run = config.run if upload is None else None
    if len(runs) > 1:
        names = [r.name for r in runs]
        default = names.index(default_run(runs, run))
        run = sb.selectbox("run", names, index=default, key="run", help="runs of the log dir, newest last")
    chosen = next((r for r in runs if r.name == run), runs[-1])
    if len(chosen.files) > 1:
        host = sb.selectbox("host", [ALL_HOSTS] + chosen.hosts, key="host")
        if host != ALL_HOSTS:   # one host's file, read on its own
            path, run = str(chosen.files[chosen.hosts.index(host)]), None
    return LoadRequest(path=path, run=run, hardware_file=config.hardware_file, hlo=config.hlo, stage=config.stage,
                       target=config.target)


def _target_box(request: LoadRequest, first: Front) -> str:
    """The chip to judge on: the one the trace was loaded with (detected or --target), or any other."""
    db = hardware(request.hardware_file)
    chip = first.chip
    how = "none" if chip is None else f"{chip.name} ({'detected' if first.detected else 'given'})"
    return st.sidebar.selectbox("target chip", [AS_LOADED] + list(db), key="target",
                                format_func=lambda o: how if o == AS_LOADED else o,
                                help="judge every op against this chip's roofline (re-targeting does not "
                                     "re-read the trace)")


def _header(first: Front) -> None:
    src = first.record["source"]
    chip = first.chip
    st.markdown(f"### {markdown_text(src['path'])}" + (f"  ·  run {markdown_code(src['run'])}" if src["run"] else ""))
    how = "no target chip" if chip is None else \
        f"target **{chip.name}** ({'detected from the trace' if first.detected else 'chosen'})"
    hosts = markdown_text(", ".join(src["hosts"]))
    st.caption(f"{how} · hosts: {hosts} · {first.executions:,} device op executions")
    warnings = first.record["warnings"]
    if warnings:
        count = len(warnings)
        with st.expander(f"{count} warning{'s' if count > 1 else ''}", expanded=False):
            for warning in warnings:
                st.markdown(f"- {markdown_text(warning)}")


def _waiting(request: LoadRequest) -> View:
    """The full analysis, for a tab opened while it is still loading: the tab says so meanwhile."""
    note = st.empty()
    note.info("Loading the full analysis for this tab (the Overview was drawn from the stored analysis "
              "record; its figures are the same)...")
    view = load_view(request)
    note.empty()
    return view


def main() -> None:
    started = time.perf_counter()
    st.set_page_config(page_title="traceview", layout="wide", initial_sidebar_state="expanded")
    config = from_env()
    try:
        request = _sidebar(config)
        stamp = request.stamp()
        first = None if loaded(request, stamp) else stored_front(config, request, stamp)
        view: View | None = None
        if first is None:   # no stored record: everything waits for the analysis
            view = load_view(request)
            first = view.front
        chip = _target_box(request, first)
        if chip != AS_LOADED:
            view = load_view(request, chip)
            first = view.front
        _header(first)
        if view is None:
            tabs.render(first, lambda: _waiting(request))
        else:
            done = view
            tabs.render(first, lambda: done)
        warm.page_shown(time.perf_counter() - started, st.session_state.get(tabs.TAB_KEY))
    except UserError as exc:
        st.error(markdown_text(exc))
    except Exception as exc:  # a bug: one line on the page, the traceback on the server's stderr
        traceback.print_exc(file=sys.stderr)
        st.error(markdown_text(f"traceview failed: {type(exc).__name__}: {exc} (the server log has the details)"))


main()
