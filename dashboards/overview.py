"""Overview: devices, step time split by bound, MFU, and the biggest gaps in one sentence each."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from traceview.dashboards.data import View
from traceview.hardware.chips import Chip
from traceview.render.charts import BOUND_COLOURS
from traceview.render.escape import markdown_text
from traceview.render.tables import fmt_pct, fmt_si, fmt_time_us
from traceview.units import US_PER_MS
from traceview.vocabulary import BOUNDS_AND_IDLE

SPLIT_COLOURS = {**BOUND_COLOURS, "idle": "#d9d9d9"}
MAX_STEP_BARS = 100    # a bar chart of thousands of steps is a blur, and slow to draw
_LINK_NAMES = {"ici": "ICI", "nvlink": "NVLink", "infinity_fabric": "Infinity Fabric"}


def fmt_share(value: float | None) -> str:
    """A percentage that stays readable when tiny (an MFU of 5e-6 is not '0.0%')."""
    if value is not None and value == value and 0 < abs(value) < 0.001:
        return f"{100 * value:.2g}%"
    return fmt_pct(value)


def bound_split(summary: dict) -> pd.DataFrame:
    """The run's time by bound (and idle), in us and as a share: columns bound, time_us, share."""
    by_bound = summary.get("time_by_bound_us") or {}
    rows = [(b, by_bound.get(b) or 0.0) for b in BOUNDS_AND_IDLE if b in by_bound]
    frame = pd.DataFrame(rows, columns=["bound", "time_us"])
    total = frame["time_us"].sum()
    frame["share"] = frame["time_us"] / total if total else 0.0
    return frame


def resource_name(bound: str, record: dict, chip: Chip | None) -> str:
    """Which roofline term an op hits: '<dtype> peak', 'HBM', 'ICI' / 'NVLink' / 'PCIe'..."""
    if bound == "compute":
        return f"{record.get('dtype') or 'compute'} peak"
    if bound == "memory":
        return "HBM" if chip is None or chip.kind != "CPU" else "memory"
    if bound == "communication":
        if record.get("collective_kind") == "host-transfer":
            return "PCIe"
        if chip is not None and chip.interconnect is not None:
            return _LINK_NAMES.get(chip.interconnect.type, chip.interconnect.type)
        return "interconnect"
    return "unknown"


def gap_sentences(view: View, limit: int = 5) -> list[str]:
    """'all-reduce.3: 121 ms measured, 45 ms at the ICI roofline, communication-bound', biggest gap first."""
    ops = view.ops
    if "gap_us" not in ops.columns:
        return []
    ranked = ops[ops["gap_us"].fillna(0) > 0].sort_values("gap_us", ascending=False, kind="stable").head(limit)
    sentences = []
    for r in ranked.to_dict("records"):
        resource = resource_name(r["bound"], r, view.chip)
        sentences.append(f"**{markdown_text(r['name'])}** ({markdown_text(r['module'])}): {fmt_time_us(r['judged_time_us'])} measured, "
                         f"{fmt_time_us(r['roofline_time_us'])} at the {markdown_text(resource)} roofline, {r['bound']}-bound "
                         f"({fmt_time_us(r['gap_us'])} to gain)")
    return sentences


def steps_frame(summary: dict, limit: int | None = None) -> pd.DataFrame:
    """Per step (the first `limit`): each bound's time in ms, long format for a stacked bar chart."""
    rows = []
    for s in summary.get("steps", [])[:limit]:
        split = s.get("time_by_bound_us")
        if split:
            rows += [{"step": s["step"], "bound": b, "time_ms": (v or 0.0) / US_PER_MS} for b, v in split.items()]
        else:
            rows.append({"step": s["step"], "bound": "unknown", "time_ms": (s["time_us"] or 0.0) / US_PER_MS})
    return pd.DataFrame(rows, columns=["step", "bound", "time_ms"])


def device_frame(view: View) -> pd.DataFrame:
    rows = [{"device": d.id, "kind": d.kind, "model": d.model or d.vendor or "-",
             "peak FLOP/s (trace)": fmt_si(d.peak_flops, "FLOP/s"), "HBM (trace)": fmt_si(d.hbm_bandwidth, "B/s")}
            for d in view.analysis.profile.devices]
    return pd.DataFrame(rows)


def render(view: View) -> None:
    s = view.summary
    steps = [x["time_us"] for x in s.get("steps", []) if x.get("time_us") is not None]
    cols = st.columns(5)
    cols[0].metric("devices", len(view.analysis.profile.devices))
    cols[1].metric("steps", len(steps))
    cols[2].metric("median step", fmt_time_us(float(pd.Series(steps).median())) if steps else "-")
    cols[3].metric("MFU", fmt_share(s.get("mfu")),
                   help=f"model FLOPs / (span x {s.get('mfu_dtype') or 'bf16'} peak of the target)")
    cols[4].metric("roofline efficiency", fmt_pct(s.get("efficiency")),
                   help="sum of roofline times / sum of measured times, over ops with a known bound")

    split = bound_split(s)
    if len(split):
        st.markdown("**Where the time goes** ("
                    + ", ".join(f"{b} {fmt_pct(x)}" for b, x in zip(split["bound"], split["share"])) + ")")
        _split_bar(split)
    else:
        st.info("No target chip: ops are not roofline-judged. Pick a target in the sidebar.")

    sentences = gap_sentences(view)
    if sentences:
        st.markdown("**Biggest gaps** (measured time minus the time at the op's roofline)")
        st.markdown("\n".join(f"1. {x}" for x in sentences))

    left, right = st.columns([3, 2])
    with left:
        frame = steps_frame(s, MAX_STEP_BARS)
        if len(frame):
            st.markdown("**Steps** (device time by bound" + (
                f"; the first {MAX_STEP_BARS} of {len(steps)} steps)" if len(steps) > MAX_STEP_BARS else ")"))
            _steps_chart(frame)
    with right:
        st.markdown("**Devices**")
        st.dataframe(device_frame(view), hide_index=True, width="stretch")
        st.caption(f"device time {fmt_time_us(s.get('device_time_us'))}, idle {fmt_time_us(s.get('idle_us'))} "
                   f"of a {fmt_time_us(s.get('span_us'))} span (summed over devices)")


def _split_bar(split: pd.DataFrame) -> None:
    import altair as alt

    frame = split.assign(time_ms=split["time_us"] / US_PER_MS, order=range(len(split)))
    chart = alt.Chart(frame).mark_bar(height=26).encode(
        x=alt.X("sum(time_ms):Q", stack="normalize", title=None, axis=alt.Axis(format="%")),
        color=alt.Color("bound:N", scale=alt.Scale(domain=list(SPLIT_COLOURS), range=list(SPLIT_COLOURS.values())),
                        legend=alt.Legend(orient="bottom", title=None)),
        order="order:Q",
        tooltip=["bound", alt.Tooltip("time_ms:Q", format=",.3f", title="ms"),
                 alt.Tooltip("share:Q", format=".1%")],
    ).properties(height=70)
    st.altair_chart(chart, width="stretch")


def _steps_chart(frame: pd.DataFrame) -> None:
    import altair as alt

    chart = alt.Chart(frame).mark_bar().encode(
        x=alt.X("step:O", axis=alt.Axis(labelAngle=0)), y=alt.Y("sum(time_ms):Q", title="ms"),
        color=alt.Color("bound:N", scale=alt.Scale(domain=list(SPLIT_COLOURS), range=list(SPLIT_COLOURS.values())),
                        legend=None),
        tooltip=["step", "bound", alt.Tooltip("time_ms:Q", format=",.3f")],
    ).properties(height=220)
    st.altair_chart(chart, width="stretch")
