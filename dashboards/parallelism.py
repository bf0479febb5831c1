"""Parallelism: the device mesh, each axis's communication (in flight vs exposed) and the book's verdict.

The numbers are the records of `traceview parallelism --format json`, so the page and the CLI agree.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from traceview.dashboards.data import View
from traceview.render.parallelism import fmt_value, md, parallelism_json
from traceview.units import fmt_pct, fmt_si, fmt_time_us

VERDICT_COLOURS = {"compute-bound": "#4c78a8", "communication-bound": "#e45756"}


def mesh_grid(record: dict) -> pd.DataFrame | None:
    """Device ids laid out on the mesh: rows = the major axis, columns = the other axes flattened."""
    mesh = record.get("mesh")
    if not mesh or not mesh["axes"]:
        return None
    sizes = [a["size"] for a in mesh["axes"]]
    names = [a["name"] for a in mesh["axes"]]
    count = int(np.prod(sizes))
    if count > 256:
        return None
    ids = np.asarray(mesh.get("device_ids") or range(count)).reshape(sizes)
    major = next((i for i, s in enumerate(sizes) if s > 1), 0)
    grid = np.moveaxis(ids, major, 0).reshape(sizes[major], -1)
    rest = [n for i, n in enumerate(names) if i != major and sizes[i] > 1]
    frame = pd.DataFrame(grid, index=[f"{names[major]}={i}" for i in range(sizes[major])])
    frame.columns = [f"{'x'.join(rest) or '-'} {j}" for j in range(grid.shape[1])]
    return frame


def time_chart(axes: list[dict]) -> alt.Chart | None:
    rows = []
    for a in axes:
        if a.get("time_us") is None:
            continue
        exposed = a.get("exposed_time_us") or 0.0
        rows.append({"axis": a["name"], "part": "exposed", "time_us": exposed})
        rows.append({"axis": a["name"], "part": "overlapped", "time_us": max((a["time_us"] or 0.0) - exposed, 0.0)})
    if not rows:
        return None
    return alt.Chart(pd.DataFrame(rows)).mark_bar().encode(
        x=alt.X("time_us:Q", title="collective time, all devices (us)"),
        y=alt.Y("axis:N", title="mesh axis"),
        color=alt.Color("part:N", scale=alt.Scale(domain=["exposed", "overlapped"], range=["#e45756", "#bab0ac"])),
        tooltip=["axis", "part", alt.Tooltip("time_us:Q", format=",.1f")],
    ).properties(height=max(140, 60 + 45 * len(axes)))


def _axis_table(axes: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{
        "axis": a["name"], "size": a["size"], "role": a["role_name"] or "-", "collectives": a["collectives"],
        "bytes": fmt_si(a["bytes"] if a["bytes"] is not None else a["bytes_per_step"], "B"),
        "in flight": fmt_time_us(a["time_us"]), "exposed": fmt_time_us(a["exposed_time_us"]),
        "share of step": fmt_pct(a["share_of_step"]), "link": (a["link"] or {}).get("kind", "-"),
        "efficiency": fmt_pct(a["efficiency"]), "verdict": a["verdict"] or "-",
        "value": fmt_value(a["value"]), "threshold": fmt_value(a["threshold"])} for a in axes])


def render(view: View) -> None:
    with st.spinner("Reading the mesh..."):
        record = parallelism_json(view.result.parallelism())   # what `traceview parallelism --format json` prints
    mesh = record.get("mesh")
    if not mesh or not mesh["axes"]:
        st.info(f"No device mesh: {record.get('why_no_mesh') or 'the HLO holds no collective'}.")
        return
    shape = " × ".join(f"**{md(a['name'])}**={a['size']}" for a in mesh["axes"])
    st.markdown(f"Mesh {shape} over {mesh['device_count']} devices · names from {md(mesh['axes'][0]['source'])}")
    grid = mesh_grid(record)
    if grid is not None and grid.size > 1:
        with st.expander("devices on the mesh", expanded=False):
            st.dataframe(grid, width="stretch")
    axes = record["axes"]
    if not axes:
        st.info("No mesh axis with more than one device.")
        return
    st.dataframe(_axis_table(axes), width="stretch", hide_index=True)
    chart = time_chart(axes)
    if chart is not None:
        st.caption("Time each axis's collectives were in flight, and the part no compute overlapped (exposed).")
        st.altair_chart(chart, width="stretch")
    tokens = record.get("per_chip_tokens") or {}
    if tokens.get("value"):
        st.caption(f"Per-chip batch {tokens['value']:,.0f} tokens ({md(tokens['how'])}).")
    for a in axes:
        verdict = a["verdict"] or "not judged"
        with st.expander(f"{a['name']} ({a['size']}): {a['role_name'] or 'no role'} — {verdict}", expanded=True):
            st.markdown("**Evidence:** " + ("; ".join(md(e) for e in a["evidence"]) or "none"))
            if a["value"] is not None and a["threshold"] is not None:
                st.markdown(f"**Rule** {md(a['rule'])}: {md(a['value_what'])} **{fmt_value(a['value'])}** vs "
                            f"threshold **{fmt_value(a['threshold'])}** ({md(a['threshold_how'])})")
            else:
                st.markdown(f"**Rule** {md(a['rule'])}: {md(a['reason'] or '')}")
            if a.get("measured"):
                st.markdown(f"**Measured:** {md(a['measured'])}")
            for tip in a["suggestions"]:
                st.markdown(f"- {md(tip)}")
    with st.expander(f"{len(record['collectives'])} collectives and their axes", expanded=False):
        table = pd.DataFrame(record["collectives"])
        if not table.empty:
            table["axes"] = ["unattributed" if a is None else "+".join(a) or "local" for a in table["axes"]]
        st.dataframe(table, width="stretch", hide_index=True)
    for warning in record["warnings"]:
        st.caption(f"warning: {md(warning)}")
