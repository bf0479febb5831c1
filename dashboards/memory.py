"""Memory: the allocator's usage over time with its peak, what is held at the peak, and each HLO module's
static peak from its buffer assignment, with the headroom on the target chip."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from traceview.dashboards.data import View
from traceview.dashboards.persist import keep_across_tabs
from traceview.hostreduce.memory_peaks import HeldAtPeak
from traceview.memory.headroom import Headroom, headroom, is_device_memory
from traceview.memory.view import MemoryReport
from traceview.render.memory import buffer_json, fmt_bytes
from traceview.units import PS_PER_MS

KIND_COLOURS = {"parameter": "#1f77b4", "output": "#2ca02c", "temporary": "#ff7f0e", "constant": "#7f7f7f",
                "thread-local": "#9467bd", "allocation": "#ff7f0e", "before profile": "#1f77b4", "stack": "#7f7f7f"}
TOP_BUFFERS = 25


def _room(peak_bytes: int, view: View) -> Headroom | None:
    return headroom(peak_bytes, view.chip) if view.chip is not None else None


def _room_metric(col, room: Headroom | None) -> None:
    if room is None or room.headroom_bytes is None:
        col.metric("headroom on target", "-", help="pick a target chip with a known HBM capacity")
    elif room.fits:
        col.metric(f"headroom on {room.target}", fmt_bytes(room.headroom_bytes),
                   help=f"HBM {fmt_bytes(room.capacity_bytes)} ({room.capacity_source})")
    else:
        col.metric(f"headroom on {room.target}", f"misses by {fmt_bytes(-room.headroom_bytes)}",
                   delta="does not fit", delta_color="inverse")


def _bars(frame: pd.DataFrame, label: str) -> alt.LayerChart:
    """Horizontal bars, largest on top, coloured by kind, each labelled with its size: what holds the memory."""
    frame = frame.assign(MiB=frame["size_bytes"] / 2**20, size=[fmt_bytes(b) for b in frame["size_bytes"]])
    frame = frame.sort_values("size_bytes", ascending=False, kind="stable")
    y = alt.Y(f"{label}:N", sort=list(frame[label]), title=None, axis=alt.Axis(labelLimit=360, labelOverlap=False))
    kinds = [k for k in KIND_COLOURS if k in set(frame["kind"])]
    tips = [label, "size", "kind"] + [c for c in ("shape", "source", "op") if c in frame.columns]
    base = alt.Chart(frame)
    bars = base.mark_bar().encode(
        y=y, x=alt.X("MiB:Q", title="MiB"),
        color=alt.Color("kind:N", scale=alt.Scale(domain=kinds, range=[KIND_COLOURS[k] for k in kinds]),
                        legend=alt.Legend(orient="bottom", title=None)),
        tooltip=tips)
    text = base.mark_text(align="left", dx=4, color="#333333").encode(y=y, x="MiB:Q", text="size:N")
    return (bars + text).properties(height=_bar_height(frame))


def _bar_height(frame: pd.DataFrame) -> int:
    return max(160, 30 * len(frame) + 90)


def _held_label(i: int, held: HeldAtPeak, origin_ps: int) -> str:
    """What the trace says about an allocation (op, shape), else when it was made; numbered to stay unique."""
    parts = [p for p in (held.op, held.shape) if p]
    if not parts and held.time_ps is not None:
        parts = [f"allocated at {(held.time_ps - origin_ps) / PS_PER_MS:.3f} ms (step {held.step})"]
    return f"#{i + 1} " + "  ".join(parts)


def _runtime(report: MemoryReport, view: View) -> None:
    memories = sorted(report.memories, key=lambda m: (not is_device_memory(m.name), -m.peak_bytes))
    if not memories:
        st.info("No runtime allocator events in this trace (JAX on the CPU writes none): "
                "the static peaks below come from the compiler's buffer assignment.")
        return
    names = [m.device for m in memories]
    picked = st.selectbox("memory (allocator)", names, key="tv_memory_pick", **keep_across_tabs())
    chosen = memories[names.index(str(picked)) if picked in names else 0]
    cols = st.columns(3) + st.columns(3)
    cols[0].metric("peak", fmt_bytes(chosen.peak_bytes))
    cols[1].metric("allocator capacity", fmt_bytes(chosen.capacity_bytes))
    _room_metric(cols[2], _room(chosen.peak_bytes, view) if is_device_memory(chosen.name) else None)
    cols[3].metric("heap at peak", fmt_bytes(chosen.heap_bytes))
    cols[4].metric("stack at peak", fmt_bytes(chosen.stack_bytes))
    cols[5].metric("fragmentation at peak", f"{chosen.fragmentation:.1%}")
    detail = chosen.unpacked()      # its timeline and rows, unpacked once
    t = detail.timeline
    line = pd.DataFrame({"time (ms)": (t["time_ps"] - report.origin_ps) / PS_PER_MS,
                         "GiB in use": (t["stack_bytes"] + t["heap_bytes"]) / 2**30, "step": t["step"]})
    peak = pd.DataFrame({"time (ms)": [(chosen.peak_time_ps - report.origin_ps) / PS_PER_MS],
                         "GiB in use": [chosen.peak_bytes / 2**30], "label": [f"peak {fmt_bytes(chosen.peak_bytes)}"]})
    area = alt.Chart(line).mark_area(interpolate="step-after", opacity=0.35, line=True).encode(
        x="time (ms):Q", y="GiB in use:Q", tooltip=["time (ms)", "GiB in use", "step"])
    marker = alt.Chart(peak).mark_point(color="#d62728", size=120, filled=True).encode(
        x="time (ms):Q", y="GiB in use:Q", tooltip=["label", "time (ms)"])
    text = alt.Chart(peak).mark_text(color="#d62728", dy=-12, align="left").encode(
        x="time (ms):Q", y="GiB in use:Q", text="label:N")
    rule = alt.Chart(peak).mark_rule(color="#d62728", strokeDash=[4, 3]).encode(x="time (ms):Q")
    st.markdown(f"**Usage of {chosen.device} over the profile** (stack + heap; peak in red, step {chosen.step})")
    st.altair_chart((area + rule + marker + text).properties(height=260), width="stretch")
    held = pd.DataFrame(detail.at_peak[:TOP_BUFFERS])
    if not held.empty:
        held["what"] = [_held_label(i, a, report.origin_ps) for i, a in enumerate(detail.at_peak[:TOP_BUFFERS])]
        st.markdown(f"**Held at the peak** ({len(detail.at_peak)} allocations; the largest {len(held)})")
        st.altair_chart(_bars(held, "what"), width="stretch", height=_bar_height(held))


def _static(report: MemoryReport, view: View) -> None:
    if not report.modules:
        st.info("No buffer assignment in the trace's HLO: no static peaks.")
        return
    labels = [f"{m.name}" + (f" ({m.program_id})" if m.program_id is not None else "") + f"  ·  "
              f"{fmt_bytes(m.peak_bytes)}" for m in report.modules]
    picked = st.selectbox("HLO module (largest static peak first)", labels, key="tv_memory_module", **keep_across_tabs())
    chosen = report.modules[labels.index(str(picked)) if picked in labels else 0]
    cols = st.columns(4)
    cols[0].metric("static peak", fmt_bytes(chosen.peak_bytes))
    cols[1].metric("temporaries at peak", fmt_bytes(chosen.heap_peak_bytes))
    cols[2].metric("parameters, outputs, constants", fmt_bytes(chosen.indefinite_bytes))
    _room_metric(cols[3], _room(chosen.peak_bytes, view))
    buffers = pd.DataFrame([buffer_json(b) for b in chosen.buffers[:TOP_BUFFERS]])
    if not buffers.empty:
        st.markdown(f"**Buffers live at the peak** (at `{chosen.peak_instruction or '-'}`; "
                    f"{len(chosen.buffers)} buffers, the largest {len(buffers)})")
        st.altair_chart(_bars(buffers, "instruction"), width="stretch", height=_bar_height(buffers))
    if len(chosen.heap_timeline) > 1:
        steps = chosen.heap_timeline
        stride = max(1, len(steps) // 2000)
        frame = pd.DataFrame({"heap event": range(0, len(steps), stride), "MiB": [s / 2**20 for s in steps[::stride]]})
        with st.expander("heap over the program (buffer assignment's simulation)"):
            line = alt.Chart(frame).mark_line(interpolate="step-after").encode(x="heap event:Q", y="MiB:Q")
            rule = alt.Chart(pd.DataFrame({"heap event": [chosen.peak_position]})).mark_rule(
                color="#d62728", strokeDash=[4, 3]).encode(x="heap event:Q")
            st.altair_chart((line + rule).properties(height=200), width="stretch")


def render(view: View) -> None:
    with st.spinner("Reading memory events..."):
        report = view.as_loaded.memory()          # traceview.Analysis.memory(): what `traceview memory` shows
    st.markdown("#### Runtime: allocator usage")
    _runtime(report, view)
    st.markdown("#### Static: peak per HLO module (buffer assignment)")
    _static(report, view)
    if report.warnings:
        with st.expander(f"{len(report.warnings)} memory warnings"):
            for w in report.warnings:
                st.text(w)
