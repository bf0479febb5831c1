"""What if: the step time, MFU and memory per chip of other meshes, batches and chip counts, projected from
the measured step (`traceview whatif --format json`'s records; docs/whatif.md)."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from traceview.dashboards.data import View
from traceview.errors import UserError
from traceview.render.memory import fmt_bytes
from traceview.render.parallelism import md
from traceview.render.whatif import change_text, mesh_text, notes_by_rank, tokens_text, whatif_json
from traceview.units import fmt_share, fmt_time_us

BOUND_COLOURS = {"compute": "#4c78a8", "memory": "#72b7b2", "communication": "#e45756", "bubble": "#b279a2",
                 "idle": "#bab0ac", "unknown": "#9d755d"}


def _table(record: dict) -> pd.DataFrame:
    today = record["baseline"]["step_time_us"]
    rows = []
    for i, c in enumerate(record["configs"], 1):
        step = c["step_time_us"]
        rows.append({"rank": i, "mesh": mesh_text(c["mesh"]), "batch": c["batch"], "chip": c["target"],
                     "step": fmt_time_us(step) if step is not None else f"? {c['step_time_reason']}",
                     "vs today": change_text(step, today), "tokens/s/chip": tokens_text(c["tokens_per_s_per_chip"]),
                     "MFU": fmt_share(c["mfu"]), "bound": c["bound"],
                     "memory/chip": fmt_bytes(c["memory_per_chip_bytes"]),
                     "fits": "? (no capacity)" if c["fits"] is None else ("yes" if c["fits"] else "NO"),
                     "dominant change": c["dominant_change"] or "-"})
    return pd.DataFrame(rows)


def step_chart(record: dict) -> alt.LayerChart | None:
    """Each configuration's projected step, split into its terms, with today's step as a rule."""
    rows = []
    for i, c in enumerate(record["configs"], 1):
        label = f"#{i} {mesh_text(c['mesh'])}, batch {c['batch']:g}"
        for t in c["terms"]:
            if t["time_us"]:
                rows.append({"config": label, "rank": i, "term": t["what"], "time_ms": t["time_us"] / 1e3,
                             "formula": t["formula"]})
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    order = list(dict.fromkeys(frame.sort_values("rank")["config"]))
    bars = alt.Chart(frame).mark_bar().encode(
        y=alt.Y("config:N", sort=order, title=None, axis=alt.Axis(labelLimit=320, labelOverlap=False)),
        x=alt.X("sum(time_ms):Q", title="projected step (ms)"),
        color=alt.Color("term:N", legend=alt.Legend(orient="bottom", title=None, columns=3, labelLimit=260)),
        tooltip=["config", "term", alt.Tooltip("time_ms:Q", format=",.3f", title="ms"), "formula"])
    layers: list = [bars]
    today = record["baseline"]["step_time_us"]
    if today:
        rule = alt.Chart(pd.DataFrame({"today_ms": [today / 1e3], "label": ["today"]})).mark_rule(
            strokeDash=[6, 4], strokeWidth=2, color="black").encode(x="today_ms:Q", tooltip=["label"])
        layers.append(rule)
    return alt.layer(*layers).properties(height=max(160, 26 * len(order)))


def _request() -> dict:
    cols = st.columns(3)
    meshes = cols[0].text_input("Meshes (ROLE=N,... ; separated by ';')", key="tv_whatif_mesh",
                                help="e.g. data=8; fsdp=4,tensor=2 — empty: every factorisation of the chips")
    batches = cols[1].text_input("Batches (tokens or xK, separated by ';')", key="tv_whatif_batch",
                                 help="empty: today's, x2 and x0.5")
    chips = cols[2].number_input("Chips (0: today's)", min_value=0, max_value=1 << 16, step=1, key="tv_whatif_chips")
    from traceview.whatif.config import parse_mesh

    return {"meshes": [parse_mesh(m) for m in meshes.split(";") if m.strip()],
            "batches": [b.strip() for b in batches.split(";") if b.strip()], "chips": int(chips) or None}


def render(view: View) -> None:
    try:
        request = _request()
        report = view.result.whatif(**request)
    except UserError as exc:
        st.error(str(exc))
        return
    record = whatif_json(report)
    base = record["baseline"]
    st.markdown(md(f"Today: {mesh_text(base['mesh'])} on {base['chips']} chips ({base['target']}), batch "
                   f"{base['batch']} tokens per step"))
    cols = st.columns(3)
    cols[0].metric("today's step", fmt_time_us(base["step_time_us"]))
    cols[1].metric("today's MFU", fmt_share(base["mfu"]))
    cols[2].metric("memory per chip", fmt_bytes(base["memory_per_chip_bytes"]))
    st.caption(md(f"the batch: {base['batch_how']}"))
    st.subheader("Configurations ranked by projected step time")
    st.dataframe(_table(record), hide_index=True, width="stretch")
    chart = step_chart(record)
    if chart is not None:
        st.subheader("Where each projected step goes")
        st.altair_chart(chart, width="stretch")
    with st.expander("What the projection assumes"):
        for line in record["assumptions"]:
            st.markdown(f"- {md(line)}")
    notes = notes_by_rank((c["mesh"], c["notes"]) for c in record["configs"])
    for line in notes + record["warnings"]:
        st.caption(md(line))
