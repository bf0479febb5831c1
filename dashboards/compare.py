"""Compare: this run against another run of the log dir (or any other trace), through `traceview.regress.diff`."""

from __future__ import annotations

import re
from typing import Literal

import pandas as pd
import streamlit as st

import traceview
from traceview.dashboards.data import LoadRequest, View, load_view, runs_of
from traceview.dashboards.persist import keep_across_tabs
from traceview.errors import UserError
from traceview.regress.diff import DiffSummary
from traceview.render.escape import markdown_code, markdown_text
from traceview.render.regress import diff_markdown
from traceview.units import PS_PER_US, fmt_pct, fmt_time_us

_OP_COLUMNS = ["status", "module", "op", "time_statistic", "base_time_ps", "new_time_ps", "time_change_ps", "change",
               "change_low",
               "change_high", "base_bound", "new_bound", "label_changed", "flops_change", "bytes_change",
               "matched_by", "base_op"]


def other_run_requests(view: View) -> list[LoadRequest]:
    """The log dir's other runs, newest first (the log dir is where the current run was found)."""
    try:
        runs = runs_of(view.request.path)
    except UserError:
        return []
    current = view.analysis.profile.source.run
    return [LoadRequest(path=view.request.path, run=r.name, hardware_file=view.request.hardware_file,
                   stage=view.request.stage, target=view.request.target) for r in reversed(runs) if r.name != current]


def ops_frame(diff) -> pd.DataFrame:
    """The diff's op rows for display: times per step in microseconds, biggest time change first."""
    ops = diff.ops
    frame = ops[[c for c in _OP_COLUMNS if c in ops.columns]].copy()
    ps = [c for c in frame.columns if c.endswith("_ps")]
    frame[ps] = frame[ps] / PS_PER_US
    frame = frame.rename(columns={c: c.removesuffix("_ps") + "_us" for c in ps})
    if "time_change_us" in frame.columns:
        frame = frame.reindex(frame["time_change_us"].abs().sort_values(ascending=False, na_position="last").index)
    return frame.reset_index(drop=True)


_SUMMARY = re.compile(r"<details>\s*<summary>(.*?)</summary>", re.S)


def without_html_blocks(markdown: str) -> str:
    """The report's collapsible <details> blocks (for GitHub) as plain headed sections: Streamlit
    shows raw HTML tags otherwise, and HTML stays off because names in the report come from traces."""
    text = _SUMMARY.sub(lambda m: f"**{m.group(1).strip()}**", markdown)
    return re.sub(r"</?details>", "", text)


def delta_colour(change: float | None, inverse: bool = True) -> Literal["off", "inverse", "normal"]:
    """Streamlit's delta colour for a relative change: grey ("off") when it rounds to 0.0%, so no
    change is never shown as a red or green arrow."""
    if change is None or round(100 * change, 1) == 0:
        return "off"
    return "inverse" if inverse else "normal"


def render(view: View) -> None:
    others = other_run_requests(view)
    c1, c2 = st.columns([1, 1])
    labels = [s.run for s in others]
    pick = c1.selectbox("compare with run", ["(another path)"] + labels, index=1 if labels else 0,
                        key="compare_run", **keep_across_tabs())
    other_path = c2.text_input("or another trace path", key="compare_path", **keep_across_tabs(),
                               disabled=pick != "(another path)")
    if pick != "(another path)":
        other = others[labels.index(pick)]
    elif other_path:
        other = LoadRequest(path=other_path, hardware_file=view.request.hardware_file, stage=view.request.stage)
    else:
        st.caption("This log dir holds one run: give another trace path to compare with.")
        return
    try:
        base = load_view(other, view.target_label)   # both judged on the same chip
    except UserError as exc:
        st.error(markdown_text(exc))
        return
    diff = traceview.diff(base.result, view.result)
    st.markdown(f"**base** {markdown_code(other.path)} run {markdown_code(base.analysis.profile.source.run)} → "
                f"**new** (this run) {markdown_code(view.request.path)} run {markdown_code(view.analysis.profile.source.run)}")
    _headline(diff.summary)
    with st.expander("report (markdown, as `traceview diff` prints it)"):
        st.markdown(without_html_blocks(diff_markdown(diff)))
    st.caption("Per op, times in microseconds: base and new are the median per step where both sides have "
               "per-step times (time_statistic median/step), else the capture's total over its steps (mean/step); "
               "change = new/base - 1 of those two (low/high: its confidence interval when per-step times exist); "
               "biggest time change first.")
    percent = {c: st.column_config.NumberColumn(c, format="percent") for c in
               ("change", "change_low", "change_high", "flops_change", "bytes_change")}
    st.dataframe(ops_frame(diff), hide_index=True, width="stretch", height=420, column_config={
        **percent, **{c: st.column_config.NumberColumn(c, format="%.2f")
                      for c in ("base_time_us", "new_time_us", "time_change_us")}})
    for warning in diff.warnings:
        st.warning(markdown_text(warning))


def _headline(summary: DiffSummary) -> None:
    cols = st.columns(4)
    step = summary.step_time
    if step:
        cols[0].metric("median step (new)", fmt_time_us((step.new_ps or 0) / PS_PER_US),
                       delta=None if step.change is None else fmt_pct(step.change),
                       delta_color=delta_colour(step.change))
    mfu = summary.mfu
    if mfu.new is not None:
        change = None if mfu.base is None else mfu.new - mfu.base
        delta = None if change is None else f"{100 * change:+.2f} pt"
        cols[1].metric("MFU (new)", fmt_pct(mfu.new), delta=delta,
                       delta_color="off" if change is None or round(100 * change, 2) == 0 else "normal")
    ops = summary.ops
    cols[2].metric("ops changed", ops.changed, help="FLOPs, bytes or bound changed, or time moved")
    cols[3].metric("ops new / vanished", f"{ops.new} / {ops.vanished}")
