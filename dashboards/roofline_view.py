"""Roofline chart: the same Altair chart as `traceview roofline --plot x.html`; a click selects an op."""

from __future__ import annotations

import streamlit as st

from traceview.dashboards import selection
from traceview.dashboards.data import View
from traceview.render.charts import altair_chart, ridge_text, roofline_points, unplaceable_ops
from traceview.render.escape import markdown_text
from traceview.units import fmt_si


def clicked_op(event) -> tuple[str, str] | None:
    """(module, op) of the point a chart selection event names, if any."""
    if event is None:
        return None
    picked = (getattr(event, "selection", None) or {}).get("op") or []
    if not picked:
        return None
    first = picked[0]
    return (str(first.get("module")), str(first.get("op"))) if "op" in first else None


def render(view: View) -> None:
    chip = view.chip
    if chip is None:
        st.info("No target chip: pick one in the sidebar to draw the roofline.")
        return
    points = roofline_points(view.analysis.ops)
    ridge = ridge_text(chip, view.analysis.ops)       # the peaks the chart draws
    peaks = ", ".join(f"{k} {fmt_si(v, 'FLOP/s')}" for k, v in chip.peak_flops.items())
    st.caption(f"{markdown_text(chip.name)}: {peaks}; HBM {fmt_si(chip.hbm_bandwidth, 'B/s')}"
               + (f"; {markdown_text(ridge)}" if ridge else "")
               + f". {len(points)} of {len(view.ops)} ops have FLOPs and bytes to plot; point area ~ time. "
               "Click a point to open it in Op detail."
               + (f" {view.projected} A point's rate is the one measured there." if view.projected else ""))
    if points.empty:
        st.info("No op has both FLOPs and bytes (is the trace's HLO missing?).")
    else:
        judged = view.analysis.judged
        measured_on = judged.measured_on.name if judged is not None and judged.measured_on is not None else None
        event = st.altair_chart(altair_chart(points, chip, ops=view.analysis.ops, measured_on=measured_on),
                                on_select="rerun",
                                key="roofline_chart", width="stretch")
        selection.select_if_changed("chart", clicked_op(event))
    rest = unplaceable_ops(view.analysis.ops)
    if not rest.empty:
        st.caption(f"{len(rest)} ops are not on the chart (no FLOPs or no bytes), "
                   f"{100 * rest['share'].sum():.1f}% of self time:")
        st.dataframe(rest.assign(share=(100 * rest["share"]).round(1)).rename(columns={"share": "% time"}),
                     hide_index=True)
