"""Op table: every op with its label, times, efficiency, gap, FLOPs, bytes; filter, sort, download."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from traceview.dashboards import selection
from traceview.dashboards.data import View
from traceview.dashboards.persist import keep_across_tabs

# JSON-contract fields shown, in order (units as in `traceview analyze --format json`).
COLUMNS = ["module", "name", "category", "bound", "occurrences", "kernels", "self_time_us", "judged_time_us",
           "roofline_time_us", "efficiency", "gap_us", "exposed_time_us", "flops", "bytes_accessed", "intensity",
           "collective_kind", "collective_bytes", "dtype", "source_file", "source_line"]
SORTS = {"gap": "gap_us", "self time": "self_time_us", "judged time": "judged_time_us",
         "efficiency": "efficiency", "FLOPs": "flops", "bytes": "bytes_accessed", "intensity": "intensity",
         "occurrences": "occurrences", "name": "name"}


def filter_ops(ops: pd.DataFrame, bounds: list[str] | None = None, categories: list[str] | None = None,
               modules: list[str] | None = None, name: str | None = None) -> pd.DataFrame:
    """Rows matching every given filter (an empty list or None does not filter); `name` is a
    case-insensitive substring of the op name."""
    keep = pd.Series(True, index=ops.index)
    for column, wanted in (("bound", bounds), ("category", categories), ("module", modules)):
        if wanted and column in ops.columns:
            keep &= ops[column].astype(str).isin(wanted)
    if name:
        keep &= ops["name"].astype(str).str.contains(name, case=False, regex=False)
    return ops[keep]


def sort_ops(ops: pd.DataFrame, by: str, descending: bool = True) -> pd.DataFrame:
    column = SORTS.get(by, by)
    if column not in ops.columns:
        return ops
    return ops.sort_values(column, ascending=not descending, na_position="last", kind="stable")


def _options(ops: pd.DataFrame, column: str) -> list[str]:
    return sorted(ops[column].dropna().astype(str).unique()) if column in ops.columns else []


def render(view: View) -> None:
    ops = view.ops
    if ops.empty:
        st.info("No device ops in this trace.")
        return
    c1, c2, c3, c4 = st.columns([2, 2, 2, 3])
    bounds = c1.multiselect("bound", _options(ops, "bound"), key="filter_bound", **keep_across_tabs())
    categories = c2.multiselect("category", _options(ops, "category"), key="filter_category", **keep_across_tabs())
    modules = c3.multiselect("module", _options(ops, "module"), key="filter_module", **keep_across_tabs())
    name = c4.text_input("name contains", key="filter_name", **keep_across_tabs())
    s1, s2, _ = st.columns([2, 2, 5])
    sort_by = s1.selectbox("sort by", list(SORTS), key="sort_by", **keep_across_tabs()) or "gap"
    descending = s2.toggle("largest first", value=sort_by != "name", key="sort_desc", **keep_across_tabs())

    shown = sort_ops(filter_ops(ops, bounds, categories, modules, name), sort_by, descending)
    shown = shown[[c for c in COLUMNS if c in shown.columns]].reset_index(drop=True)
    st.caption(f"{len(shown)} of {len(ops)} ops. Times in microseconds, totals over all occurrences; "
               "judged = self time (in-flight time for an async start); gap = judged - roofline; "
               "exposed = a collective's time not hidden behind compute. "
               "Click a row to open it in Op detail." + (f" {view.projected}" if view.projected else ""))
    event = st.dataframe(
        shown, hide_index=True, width="stretch", height=520, on_select="rerun",
        selection_mode="single-row", key="op_table",
        column_config={
            "efficiency": st.column_config.ProgressColumn("efficiency", format="percent", min_value=0,
                                                          max_value=1),
            "flops": st.column_config.NumberColumn("FLOPs", format="%.3e"),
            "bytes_accessed": st.column_config.NumberColumn("bytes", format="%.3e"),
            "intensity": st.column_config.NumberColumn("FLOPs/byte", format="%.3g"),
            **{c: st.column_config.NumberColumn(c, format="%.2f") for c in
               ("self_time_us", "judged_time_us", "roofline_time_us", "gap_us", "exposed_time_us")},
        })
    rows = list(getattr(event, "selection", {}).get("rows", [])) if event is not None else []
    picked = shown.iloc[rows[0]] if rows and rows[0] < len(shown) else None
    selection.select_if_changed("table", (picked["module"], picked["name"]) if picked is not None else None)
    st.download_button("Download CSV", shown.to_csv(index=False).encode(), file_name="traceview_ops.csv",
                       mime="text/csv", key="download_ops")
