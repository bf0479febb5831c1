"""Inference: the serving phases (prefill, decode) against the book's inference roofline.

Decode step time over the run against its floor, and the measured batch against the critical batch on
the decode floor's throughput curve. The numbers are `traceview inference --format json`'s records.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from traceview.dashboards.data import View
from traceview.inference.view import InferenceReport
from traceview.render.inference import inference_json
from traceview.render.memory import fmt_bytes
from traceview.render.parallelism import md
from traceview.units import fmt_pct, fmt_time_us

PHASE_COLOURS = {"prefill": "#f58518", "decode": "#4c78a8", "mixed": "#54a24b"}   # mixed: a ragged step


def step_chart(report, record: dict) -> alt.LayerChart | None:
    """Each call's time over the run, one colour per phase, with the decode floor as a rule."""
    frames = []
    for phase in report.phases:
        calls = phase.calls
        frames.append(pd.DataFrame({"phase": phase.phase, "module": phase.module, "call": calls["call"].to_numpy(),
                                    "start_ms": calls["start_us"].to_numpy() / 1e3,
                                    "time_us": calls["time_us"].to_numpy()}))
    if not frames:
        return None
    frame = pd.concat(frames, ignore_index=True)
    frame["start_ms"] -= frame["start_ms"].min()
    domain = [p for p in PHASE_COLOURS if p in set(frame["phase"])]
    points = alt.Chart(frame).mark_circle(size=70).encode(
        x=alt.X("start_ms:Q", title="time into the trace (ms)"),
        y=alt.Y("time_us:Q", title="step time (us)", scale=alt.Scale(type="log")),
        color=alt.Color("phase:N", scale=alt.Scale(domain=domain, range=[PHASE_COLOURS[p] for p in domain]),
                        legend=alt.Legend(orient="bottom", title=None)),
        tooltip=["phase", "module", "call", alt.Tooltip("time_us:Q", format=",.2f", title="time (us)")])
    layers: list = [points]
    floors = pd.DataFrame([{"phase": p["phase"], "floor_us": p["floor_us"],
                            "label": f"{p['phase']} floor {fmt_time_us(p['floor_us'])}"}
                           for p in record["phases"] if p["floor_us"]])
    if not floors.empty:
        rule = alt.Chart(floors).mark_rule(strokeDash=[6, 4], strokeWidth=2).encode(
            y="floor_us:Q", color=alt.Color("phase:N", scale=alt.Scale(domain=domain,
                                                                       range=[PHASE_COLOURS[p] for p in domain])),
            tooltip=["label"])
        text = alt.Chart(floors).mark_text(align="left", dx=4, dy=-6).encode(
            y="floor_us:Q", x=alt.value(4), text="label:N")
        layers += [rule, text]
    return alt.layer(*layers).properties(height=320)


def batch_chart(report: InferenceReport) -> alt.LayerChart | None:
    """Decode throughput at the floor against the batch, with the measured and the critical batch marked."""
    crit = report.critical
    if not report.projection or crit is None:
        return None
    frame = pd.DataFrame(report.projection)
    line = alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("batch:Q", scale=alt.Scale(type="log"), title="batch (sequences per decode step)"),
        y=alt.Y("floor_tokens_per_s:Q", title="tokens/s per chip at the floor"),
        tooltip=["batch", alt.Tooltip("floor_us:Q", format=",.2f", title="floor (us)"), "floor_bound",
                 alt.Tooltip("floor_tokens_per_s:Q", format=",.0f")])
    marks: list[dict[str, Any]] = [
        {"what": f"measured batch {crit.measured_batch}", "batch": crit.measured_batch, "colour": "#e45756"},
        {"what": f"critical batch {crit.batch:,.0f}", "batch": crit.batch, "colour": "#54a24b"}]
    if crit.with_kv_cache:
        marks.append({"what": f"critical with KV cache {crit.with_kv_cache:,.0f}", "batch": crit.with_kv_cache,
                      "colour": "#b279a2"})
    rules = pd.DataFrame([m for m in marks if m["batch"]])
    rule = alt.Chart(rules).mark_rule(strokeWidth=2).encode(
        x="batch:Q", color=alt.Color("what:N", scale=alt.Scale(domain=list(rules["what"]),
                                                               range=list(rules["colour"])),
                                     legend=alt.Legend(orient="bottom", title=None)), tooltip=["what"])
    return (line + rule).properties(height=300)


def _phase_table(record: dict) -> pd.DataFrame:
    return pd.DataFrame([{
        "phase": p["phase"], "module": p["module"], "steps": p["steps"], "batch": p["batch"],
        "tokens/step": p["tokens_per_step"], "step (median)": fmt_time_us(p["step_time_us"]),
        "p10–p90": f"{fmt_time_us(p['step_time_p10_us'])} – {fmt_time_us(p['step_time_p90_us'])}",
        "weights": fmt_bytes(p["param_bytes"]), "KV cache": fmt_bytes(p["kv_cache_bytes"]),
        "floor": fmt_time_us(p["floor_us"]), "bound": p["floor_bound"] or "-",
        "efficiency": fmt_pct(p["efficiency"]), "per output token": fmt_time_us(p["time_per_output_token_us"]),
        "tokens/s/chip": "-" if p["tokens_per_s_per_chip"] is None else f"{p['tokens_per_s_per_chip']:,.0f}",
    } for p in record["phases"]])


def render(view: View) -> None:
    report = view.result.inference()
    record = inference_json(report)
    if not record["phases"]:
        st.info(record["warnings"][0] if record["warnings"] else "No serving pattern in this trace.")
        st.dataframe(pd.DataFrame(record["programs"]), hide_index=True, width="stretch")
        return
    crit = report.critical
    measured = crit.measured_batch if crit is not None else None
    cols = st.columns(4)
    cols[0].metric("measured batch", "-" if measured is None else measured)
    cols[1].metric("critical batch", "-" if crit is None else f"{crit.batch:,.0f}",
                   help=report.reasons.get("critical_batch") or (crit.formula if crit is not None else None))
    cols[2].metric("KV cache per token", fmt_bytes(record["kv_bytes_per_token"]))
    cols[3].metric("sequences in HBM", "-" if record["max_sequences"] is None else f"{record['max_sequences']:,}",
                   help=record["reasons"].get("max_sequences"))
    if report.projected:
        st.caption(f"The trace ran on another chip than {md(view.target_label)}: floors are the target's, the "
                   "measured step times the capture chip's, so no efficiency is claimed.")
    st.dataframe(_phase_table(record), hide_index=True, width="stretch")
    st.subheader("Step time over the run against the floor")
    chart = step_chart(report, record)
    if chart is not None:
        st.altair_chart(chart, width="stretch")
    st.subheader("Batch against the critical batch")
    if crit is not None and crit.verdict:
        st.markdown(md(crit.verdict))
    chart = batch_chart(report)
    if chart is not None:
        st.altair_chart(chart, width="stretch")
    else:
        st.info(f"No projection: {record['reasons'].get('critical_batch', 'no decode floor')}.")
    for phase in record["phases"]:
        with st.expander(f"How {phase['module']} was recognised as {phase['phase']}"):
            st.markdown("\n".join(f"- {md(line)}" for line in phase["recognised_by"]))
            for key, why in phase["reasons"].items():
                st.markdown(f"- *{md(key)}*: {md(why)}")
