"""Parallelism: the device mesh, each axis's communication (in flight vs exposed), its roles and the book's verdicts.

A pipeline axis shows its schedule (stages x ticks, the bubble's idle slots; for a pipeline that runs a program
per stage, the measured schedule of one step: each stage's executions in time and its idle waits), a
ring-attention axis its ring
(which chip passes K/V to which, the block per chip), an expert axis its routing (E, k, capacity).

The numbers are the records of `traceview parallelism --format json`, so the page and the CLI agree.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from traceview.dashboards.data import View
from traceview.parallelism.roles import ROLE_NAMES
from traceview.render.parallelism import fmt_value, md, parallelism_json
from traceview.units import fmt_pct, fmt_si, fmt_time_us

MAX_SCHEDULE_CELLS = 4096     # stages x ticks drawn at most (hostile sizes)


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


def pipeline_schedule(pipeline: dict) -> pd.DataFrame | None:
    """The SPMD schedule: stage s works on microbatch t - s at tick t, idle otherwise (the bubble)."""
    p, m = pipeline.get("stages"), pipeline.get("microbatches")
    if not p or not m or p * (m + p - 1) > MAX_SCHEDULE_CELLS:
        return None
    rows = []
    for stage in range(p):
        for tick in range(m + p - 1):
            work = 0 <= tick - stage < m
            rows.append({"stage": stage, "tick": tick, "state": "microbatch" if work else "bubble (idle)",
                         "microbatch": tick - stage if work else None})
    return pd.DataFrame(rows)


def schedule_chart(frame: pd.DataFrame) -> alt.Chart:
    return alt.Chart(frame).mark_rect(stroke="white").encode(
        x=alt.X("tick:O", title="tick (loop iteration)"), y=alt.Y("stage:O", title="stage"),
        color=alt.Color("state:N", scale=alt.Scale(domain=["microbatch", "bubble (idle)"],
                                                   range=["#4c78a8", "#f58518"])),
        tooltip=["stage", "tick", "state", "microbatch"],
    ).properties(height=40 + 28 * int(frame["stage"].max() + 1))


def measured_schedule(pipeline: dict) -> pd.DataFrame | None:
    """A pipeline measured in the trace (a program per stage): one step's executions per stage, and each
    stage's idle time before its first and after its last microbatch (its bubble), in time from the step's
    start."""
    measured = pipeline.get("measured")
    if not measured or not measured.get("schedule"):
        return None
    runs = pd.DataFrame(measured["schedule"][:MAX_SCHEDULE_CELLS])
    runs["state"] = "microbatch"
    start, end = runs["start_us"].min(), runs["end_us"].max()
    edges = runs.groupby("stage").agg(first=("start_us", "min"), last=("end_us", "max")).reset_index()
    waits = pd.concat([
        pd.DataFrame({"stage": edges["stage"], "start_us": start, "end_us": edges["first"]}),
        pd.DataFrame({"stage": edges["stage"], "start_us": edges["last"], "end_us": end})])
    waits = waits[waits["end_us"] > waits["start_us"]].assign(state="bubble (waiting)",
                                                              microbatch=None)
    return pd.concat([runs, waits], ignore_index=True)


def measured_chart(frame: pd.DataFrame) -> alt.Chart:
    return alt.Chart(frame).mark_bar(stroke="white", strokeWidth=0.5).encode(
        x=alt.X("start_us:Q", title="time from the step's start (us)"), x2="end_us:Q",
        y=alt.Y("stage:O", title="stage"),
        color=alt.Color("state:N", scale=alt.Scale(domain=["microbatch", "bubble (waiting)"],
                                                   range=["#4c78a8", "#f58518"])),
        tooltip=["stage", "microbatch", "state", alt.Tooltip("start_us:Q", format=",.1f"),
                 alt.Tooltip("end_us:Q", format=",.1f")],
    ).properties(height=40 + 36 * int(frame["stage"].max() + 1))


def stage_idle_table(pipeline: dict) -> pd.DataFrame | None:
    """Each stage's measured time, means per step."""
    measured = pipeline.get("measured")
    if not measured:
        return None
    return pd.DataFrame([{
        "stage": s["stage"], "programs": ", ".join(s["programs"]), "devices": ", ".join(s["devices"]),
        "microbatches": s["microbatches"], "busy": fmt_time_us(s["busy_us"]),
        "idle before first": fmt_time_us(s["idle_before_us"]), "idle after last": fmt_time_us(s["idle_after_us"]),
        "idle between": fmt_time_us(s["idle_between_us"]), "step span": fmt_time_us(s["span_us"]),
        "bubble": fmt_pct(s["bubble_fraction"])} for s in measured["stages"]])


def ring_chart(size: int) -> alt.Chart | None:
    """The ring of an axis: chip i passes its K/V block to chip i + 1 at every step."""
    if size < 2 or size > 64:
        return None
    angles = np.linspace(0, 2 * np.pi, size, endpoint=False)
    nodes = pd.DataFrame({"chip": range(size), "x": np.sin(angles), "y": np.cos(angles)})
    edges = pd.DataFrame([{"pair": i, "x": nodes.x[i], "y": nodes.y[i], "order": 0} for i in range(size)]
                         + [{"pair": i, "x": nodes.x[(i + 1) % size], "y": nodes.y[(i + 1) % size], "order": 1}
                            for i in range(size)])
    axis = alt.Axis(labels=False, ticks=False, grid=False, title=None, domain=False)
    lines = alt.Chart(edges).mark_line(color="#bab0ac", point=False).encode(
        x=alt.X("x:Q", axis=axis), y=alt.Y("y:Q", axis=axis), detail="pair:N", order="order:Q")
    dots = alt.Chart(nodes).mark_circle(size=500, color="#4c78a8").encode(x="x:Q", y="y:Q", tooltip=["chip"])
    labels = alt.Chart(nodes).mark_text(color="white", fontWeight="bold").encode(x="x:Q", y="y:Q", text="chip:N")
    return (lines + dots + labels).properties(width=220, height=220)


def _roles_text(a: dict) -> str:
    roles = a.get("roles") or []
    return " + ".join(ROLE_NAMES.get(r["role"], r["role"]) for r in roles) or (a["role_name"] or "no role")


def _axis_table(axes: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{
        "axis": a["name"], "size": a["size"], "roles": _roles_text(a), "collectives": a["collectives"],
        "bytes": fmt_si(a["bytes"] if a["bytes"] is not None else a["bytes_per_step"], "B"),
        "in flight": fmt_time_us(a["time_us"]), "exposed": fmt_time_us(a["exposed_time_us"]),
        "share of step": fmt_pct(a["share_of_step"]), "link": (a["link"] or {}).get("kind", "-"),
        "efficiency": fmt_pct(a["efficiency"]), "verdict": a["verdict"] or "-",
        "value": fmt_value(a["value"]), "threshold": fmt_value(a["threshold"])} for a in axes])


def render(view: View) -> None:
    with st.spinner("Reading the mesh..."):
        record = parallelism_json(view.result.parallelism())   # what `traceview parallelism --format json` prints
    mesh = record.get("mesh")
    target = record.get("target") or {}
    if target.get("projected"):
        st.info(f"Projected: the verdicts, links and link efficiencies are for {md(target['name'])}; times and "
                f"exposed shares are as measured on {md(target['measured_on'])}.")
    staged = next((a for a in record["axes"] if (a.get("pipeline") or {}).get("measured")), None)
    if mesh and mesh["axes"]:
        shape = " × ".join(f"**{md(a['name'])}**={a['size']}" for a in mesh["axes"])
        st.markdown(f"Mesh {shape} over {mesh['device_count']} devices · names from "
                    f"{md(mesh['axes'][0]['source'])}")
    elif staged is not None:
        st.markdown(f"No device mesh in the HLO (no collective): the trace shows a pipeline of **{staged['size']}** "
                    "stages, each running its own program.")
    else:
        st.info(f"No device mesh: {record.get('why_no_mesh') or 'the HLO holds no collective'}.")
        return
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
        with st.expander(f"{a['name']} ({a['size']}): {_roles_text(a)} — {verdict}", expanded=True):
            st.markdown("**Evidence:** " + ("; ".join(md(e) for e in a["evidence"]) or "none"))
            _structure(a)
            for role in a.get("roles") or [a]:
                _rule(role)
            if a.get("measured"):
                st.markdown(f"**Measured:** {md(a['measured'])}")
    with st.expander(f"{len(record['collectives'])} collectives and their axes", expanded=False):
        table = pd.DataFrame(record["collectives"])
        if not table.empty:
            table["axes"] = ["unattributed" if a is None else "+".join(a) or "local" for a in table["axes"]]
        st.dataframe(table, width="stretch", hide_index=True)
    for warning in record["warnings"]:
        st.caption(f"warning: {md(warning)}")


def _rule(v: dict) -> None:
    name = ROLE_NAMES.get(v.get("role") or "", "")
    lead = f"**{md(name)}** · " if name else ""
    if v["value"] is not None and v["threshold"] is not None:
        st.markdown(f"{lead}**Rule** {md(v['rule'])}: {md(v['value_what'])} **{fmt_value(v['value'])}** vs "
                    f"threshold **{fmt_value(v['threshold'])}** → {v['verdict'] or 'not judged'} "
                    f"({md(v['threshold_how'])})")
    else:
        st.markdown(f"{lead}**Rule** {md(v['rule'])}: {md(v['reason'] or '')}")
    for tip in v["suggestions"]:
        st.markdown(f"- {md(tip)}")


def _structure(a: dict) -> None:
    """The pipeline's schedule and bubble, the ring, the routing."""
    pipe, ring, expert = a.get("pipeline"), a.get("context"), a.get("expert")
    if pipe:
        bubble = pipe["bubble_fraction"]
        st.markdown(f"**Pipeline:** {pipe['stages']} stages, {pipe['microbatches'] or '-'} microbatches, bubble "
                    f"**{'-' if bubble is None else fmt_pct(bubble)}** — {md(pipe['how'])}")
        if pipe.get("measured_bubble_fraction") is not None:      # an SPMD schedule's ticks in the trace
            st.markdown(f"Measured from the schedule loop's ticks: bubble **{fmt_pct(pipe['measured_bubble_fraction'])}**"
                        f" against the {md(pipe.get('schedule') or '')} formula **{fmt_pct(bubble)}** — "
                        f"{md(pipe.get('measured_how') or '')}")
        measured = measured_schedule(pipe)
        if measured is not None:
            st.markdown(f"Measured bubble **{fmt_pct(pipe['bubble_fraction'])}** (each stage's idle time waiting on "
                        f"its neighbours over the step span, mean of the stages) against the formula (p-1)/(m+p-1) "
                        f"**{fmt_pct(pipe.get('formula_bubble_fraction'))}**.")
            st.caption(f"Step {pipe['measured']['schedule_step']} (the one of median span) as the trace shows it: "
                       "each stage's program executions (microbatches) and its waits before the first and after "
                       "the last.")
            st.altair_chart(measured_chart(measured), width="stretch")
            st.dataframe(stage_idle_table(pipe), hide_index=True, width="stretch")
        elif (frame := pipeline_schedule(pipe)) is not None:
            st.altair_chart(schedule_chart(frame), width="stretch")
    if ring:
        st.markdown(f"**Context ({md(ring['style'])}):** {ring['seq_per_chip']} tokens of sequence per chip, head dim "
                    f"{ring['head_dim']}, {fmt_value(ring['heads_per_kv_head'])} query heads per K/V head, "
                    f"{fmt_si(ring['bytes_per_pass'], 'B')} of K/V per pass, {ring['passes'] or '-'} passes per "
                    f"loop, {fmt_si(ring['bytes_per_step'], 'B')} per step, exposed "
                    f"{fmt_time_us(ring['exposed_time_us'])}")
        chart = ring_chart(a["size"]) if ring["style"] == "ring" else None
        if chart is not None:
            st.caption(f"The ring: at each of the loop's {ring['passes'] or '-'} passes, chip i sends the K/V block "
                       f"it holds to chip i + 1 (mod {a['size']}) while it computes attention on it.")
            st.altair_chart(chart, width="content")
    if expert:
        st.markdown(f"**Experts:** E={expert['experts'] or '-'}, top-{expert['top_k'] or '-'}, capacity "
                    f"{fmt_value(expert['capacity'])}, D={expert['d_model'] or '-'}, F={expert['ffn'] or '-'} — "
                    f"{md(expert['how'])}")
