"""Timeline: ops over time per device (a Gantt chart), with steps and idle gaps, kept small for big traces.

A browser cannot draw millions of bars, so the chart shows one window (a
step, or the whole trace) and within it only the `limit` longest ops. Idle
gaps are per device (time no op of any of its lanes covers, as in the
summary's idle time): a device with one lane shows them in that lane, a
device with several (GPU streams, CPU threads) in a lane of its own; they
are in the colour legend as "idle".

A pod (more than MAX_DEVICE_LANES devices over several hosts) first shows one
aggregated lane per host: the window cut into equal slices, each coloured by
the share of the host's device time that ops kept busy there (the union of
each device's op intervals, as the summary's busy time). No event is drawn;
a click on a host's lane (or the host box) opens that host's devices as above.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from traceview.dashboards import selection
from traceview.dashboards.data import View
from traceview.dashboards.persist import keep_across_tabs
from traceview.dashboards.roofline_view import clicked_op
from traceview.render.charts import BOUND_COLOURS
from traceview.timeline.intervals import covered_length, union
from traceview.units import PS_PER_MS, PS_PER_US, fmt_time_us

IDLE_COLOUR = "#f6c4c4"
MAX_STEP_CHOICES = 200   # steps offered around the median one (plus the fastest and the slowest)
MAX_DEVICE_LANES = 16    # more devices than this over several hosts (a pod): one aggregated lane per host first
HOST_SLICES = 300        # slices of the window in a host's aggregated lane
HOST_PICKED = "tv_timeline_host"   # session-state key: the host whose devices are drawn (None: all, aggregated)


@dataclass
class Timeline:
    bars: pd.DataFrame      # lane, op, module, bound, start_ms, end_ms, duration_us (ms from the window start)
    idle: pd.DataFrame      # lane, start_ms, end_ms, duration_us, bound ("idle")
    idle_share: dict        # device -> idle time / window, per device (all its gaps, not only those drawn)
    steps: pd.DataFrame     # step, start_ms, end_ms
    ops_in_window: int
    window_ms: float
    note: str


def timeline(view: View, step: int | None = None, limit: int = 2000, max_idle: int = 500,
             host: str | None = None) -> Timeline:
    """The bars for one step (or all steps when `step` is None): the `limit` longest leaf ops per window;
    ``host``: that host's devices only (the window stays the whole run's)."""
    raw = view.analysis.profile.op_executions()
    if raw.empty:
        empty = pd.DataFrame(columns=["lane", "start_ms", "end_ms", "duration_us", "bound"])
        return Timeline(empty, empty, {}, pd.DataFrame(columns=["step", "start_ms", "end_ms"]), 0, 0.0, "no ops")
    lo, hi, in_step = _window(view, raw, step)
    if host is not None:
        raw = raw[(raw["host"].astype(str) == host).to_numpy()]
    starts = raw["start_ps"].to_numpy()
    ends = starts + raw["duration_ps"].to_numpy()
    mask = np.array(raw["self_ps"] == raw["duration_ps"], dtype=bool)   # leaves: a while op would hide its body
    if in_step:
        mask &= (ends > lo) & (starts < hi)
    steps = view.analysis.steps
    rows = np.flatnonzero(mask)
    in_window = len(rows)
    if len(rows) > limit:
        longest = np.argpartition(-(ends[rows] - starts[rows]), limit - 1)[:limit]
        rows = np.sort(rows[longest])
    lanes, lane_names, devices, idle_lanes = _lanes(raw)
    picked = raw.iloc[rows]
    bars = pd.DataFrame({
        "lane": [lane_names[c] for c in lanes[rows]], "op": picked["op"].astype(str).to_numpy(),
        "module": picked["module"].astype(str).to_numpy(),
        "start_ms": (starts[rows] - lo) / PS_PER_MS, "end_ms": (ends[rows] - lo) / PS_PER_MS,
        "duration_us": (ends[rows] - starts[rows]) / PS_PER_US,
    })
    bars["bound"] = _bounds(view, bars)
    idle, share = _idle(devices, starts, ends, mask, lo, hi, max_idle)
    idle["lane"] = [idle_lanes[int(c)] for c in idle["lane"]]
    idle["bound"] = "idle"
    idle_share = {idle_lanes[d].removesuffix(" · idle"): v for d, v in share.items()}
    step_bars = _step_bars(steps, lo, hi)
    where = f"step {step}" if step is not None and len(step_bars) else "the whole trace"
    note = (f"{len(bars)} of {in_window} ops in {where} ({fmt_time_us((hi - lo) / PS_PER_US)})"
            + (" (the longest)" if len(bars) < in_window else "")
            + "; idle gaps per device (no op on the device): "
            + ", ".join(f"{d} {100 * v:.1f}%" for d, v in list(idle_share.items())[:8])
            + (" ..." if len(idle_share) > 8 else ""))
    return Timeline(bars, idle, idle_share, step_bars, in_window, (hi - lo) / PS_PER_MS, note)


def _window(view: View, raw: pd.DataFrame, step: int | None) -> tuple[int, int, bool]:
    """The window drawn (ps): the step's, or the whole run's; whether it is a step's."""
    steps = view.analysis.steps
    if step is not None and not steps.empty and step in set(steps["step"]):
        row = steps[steps["step"] == step].iloc[0]
        return int(row["start_ps"]), int(row["start_ps"] + row["time_ps"]), True
    starts = raw["start_ps"].to_numpy()
    return int(starts.min()), int((starts + raw["duration_ps"].to_numpy()).max()), False


def _step_bars(steps: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    if steps.empty:
        return pd.DataFrame(columns=["step", "start_ms", "end_ms"])
    s = steps[(steps["start_ps"] + steps["time_ps"] > lo) & (steps["start_ps"] < hi)]
    return pd.DataFrame({"step": s["step"].astype(int).to_numpy(),
                         "start_ms": (s["start_ps"].to_numpy() - lo) / PS_PER_MS,
                         "end_ms": ((s["start_ps"] + s["time_ps"]).to_numpy() - lo) / PS_PER_MS})


@dataclass
class HostLanes:
    cells: pd.DataFrame     # host, start_ms, end_ms, busy (share of the host's device time), devices
    steps: pd.DataFrame     # step, start_ms, end_ms
    hosts: list[str]        # in the run's order
    window_ms: float
    note: str


def is_pod(view: View) -> bool:
    """Whether the timeline opens on the hosts' aggregated lanes (too many devices to draw one by one)."""
    raw = view.analysis.profile.op_executions()
    return not raw.empty and raw["host"].nunique() > 1 and raw["device"].nunique() > MAX_DEVICE_LANES


def host_lanes(view: View, step: int | None = None, slices: int = HOST_SLICES) -> HostLanes:
    """Per host, per slice of the window: the share of its devices' time that some leaf op (one holding no
    other, as the drawn bars) kept busy (per device the union of those ops' intervals, summed over the
    host's devices, over their number times the slice). One cell per host and slice: no event is drawn."""
    raw = view.analysis.profile.op_executions()
    lo, hi, _ = _window(view, raw, step)
    edges = np.unique(np.linspace(lo, hi, slices + 1).round().astype(np.int64))
    starts = raw["start_ps"].to_numpy(dtype=np.int64)
    ends = starts + raw["duration_ps"].to_numpy(dtype=np.int64)
    leaf = np.array(raw["self_ps"] == raw["duration_ps"], dtype=bool)   # as the drawn bars: an op holding
    d_codes, d_names = pd.factorize(raw["device"], sort=False)          # others (a loop) would cover them all
    h_codes, h_names = pd.factorize(raw["host"], sort=False)
    d_codes = np.where(leaf, d_codes, -1)
    order = np.argsort(d_codes, kind="stable")
    bounds = np.searchsorted(d_codes[order], np.arange(len(d_names) + 1))
    busy = np.zeros((len(h_names), edges.size - 1))
    devices = np.zeros(len(h_names), dtype=np.int64)
    for k in range(len(d_names)):
        rows = order[bounds[k]:bounds[k + 1]]
        if not rows.size:
            continue
        h = h_codes[rows[0]]
        devices[h] += 1
        u = union(np.maximum(starts[rows], lo), np.minimum(ends[rows], hi))
        busy[h] += covered_length(edges[:-1], edges[1:], *u)
    width = np.diff(edges).astype(float)
    share = busy / np.maximum(devices[:, None] * width[None, :], 1)
    hosts = [str(h) for h in h_names]
    cells = pd.DataFrame({"host": np.repeat(hosts, width.size),
                          "start_ms": np.tile((edges[:-1] - lo) / PS_PER_MS, len(hosts)),
                          "end_ms": np.tile((edges[1:] - lo) / PS_PER_MS, len(hosts)),
                          "busy": share.ravel(), "devices": np.repeat(devices, width.size)})
    mean = busy.sum() / max(float(devices.sum()) * float(hi - lo), 1.0)
    note = (f"{len(hosts)} hosts, {int(devices.sum())} devices, {len(raw):,} op executions: one lane per host, "
            f"{width.size} slices of {fmt_time_us(float(width.mean()) / PS_PER_US)}, coloured by the share of the "
            f"host's device time a leaf op ran (run mean {100 * mean:.1f}%)")
    return HostLanes(cells, _step_bars(view.analysis.steps, lo, hi), hosts, (hi - lo) / PS_PER_MS, note)


_THREAD_ID = re.compile(r"^(?:tf_)?(?P<name>.+?)/-?\d+$")


def readable_line_names(lines: list[str]) -> dict[str, str]:
    """Short lane names for a device's lines: thread lines named "tf_XLAEigen/-742557..." (the
    profiler's thread name and id) become "XLAEigen #1", "XLAEigen #2" in order; other names stay."""
    out: dict[str, str] = {}
    counts: dict[str, int] = {}
    for line in lines:
        m = _THREAD_ID.match(line)
        if m is None:
            out[line] = line
            continue
        base = m.group("name")
        counts[base] = counts.get(base, 0) + 1
        out[line] = f"{base} #{counts[base]}"
    return out


def _lanes(raw: pd.DataFrame) -> tuple[np.ndarray, dict[int, str], np.ndarray, dict[int, str]]:
    """A lane code per row and the lanes' names: one lane per device, or per device and line when a
    device has several (GPU streams, CPU threads). Codes, not strings: traces have millions of rows.
    Also a device code per row and the name of each device's idle lane (its own lane when it has one)."""
    device = raw["device"].cat if hasattr(raw["device"], "cat") else raw["device"].astype("category").cat
    line = raw["line"].cat if hasattr(raw["line"], "cat") else raw["line"].astype("category").cat
    d_codes, l_codes = device.codes.to_numpy().astype(np.int64), line.codes.to_numpy().astype(np.int64)
    n_lines = max(len(line.categories), 1)
    codes = d_codes * n_lines + l_codes
    pairs = np.unique(codes)
    one_host = raw["host"].nunique() == 1
    names_d = [str(d).split("/", 1)[-1] if one_host else str(d) for d in device.categories]
    lines_per_device = pd.Series(pairs // n_lines).value_counts()
    short = {d: readable_line_names([str(line.categories[int(c) % n_lines]) for c in pairs if c // n_lines == d])
             for d in np.unique(pairs // n_lines)}
    names = {}
    for code in pairs:
        d, li = divmod(int(code), n_lines)
        label = short[d][str(line.categories[li])]
        names[int(code)] = names_d[d] if lines_per_device[d] == 1 else f"{names_d[d]} · {label}"
    idle_lanes = {int(d): names_d[d] if lines_per_device[d] == 1 else f"{names_d[d]} · idle"
                  for d in lines_per_device.index}
    return codes, names, d_codes, idle_lanes


def _bounds(view: View, bars: pd.DataFrame) -> list[str]:
    ops = view.analysis.ops
    if "bound" not in ops.columns or bars.empty:
        return ["unknown"] * len(bars)
    labels = ops[["module", "op", "bound"]].astype(str).drop_duplicates(["module", "op"])
    merged = bars[["module", "op"]].merge(labels, on=["module", "op"], how="left")
    return merged["bound"].fillna("unknown").tolist()


def _idle(devices: np.ndarray, starts: np.ndarray, ends: np.ndarray, mask: np.ndarray, lo: int, hi: int,
          limit: int) -> tuple[pd.DataFrame, dict[int, float]]:
    """Per device, the time in [lo, hi) that no op of any of its lanes covers: the `limit` longest
    gaps overall (`lane` holds device codes), and each device's idle share of the window."""
    frames = []
    share: dict[int, float] = {}
    for dev in np.unique(devices[mask]):
        on = mask & (devices == dev)
        u_starts, u_ends = union(np.maximum(starts[on], lo), np.minimum(ends[on], hi))
        gap = pd.DataFrame({"lane": dev, "start": np.concatenate(([lo], u_ends)),
                            "end": np.concatenate((u_starts, [hi]))})
        gap = gap[gap["end"] > gap["start"]]
        share[int(dev)] = float((gap["end"] - gap["start"]).sum()) / (hi - lo) if hi > lo else 0.0
        frames.append(gap)
    columns = ["lane", "start_ms", "end_ms", "duration_us"]
    if not frames:
        return pd.DataFrame(columns=columns), share
    gaps = pd.concat(frames, ignore_index=True)
    gaps = gaps.assign(length=gaps["end"] - gaps["start"]).nlargest(limit, "length")
    return pd.DataFrame({"lane": gaps["lane"].to_numpy(), "start_ms": (gaps["start"].to_numpy() - lo) / PS_PER_MS,
                         "end_ms": (gaps["end"].to_numpy() - lo) / PS_PER_MS,
                         "duration_us": gaps["length"].to_numpy() / PS_PER_US}), share


@st.cache_data(show_spinner=False, max_entries=32)
def _cached_timeline(_view: View, key: tuple, step: int | None, limit: int, host: str | None = None) -> Timeline:
    return timeline(_view, step, limit, host=host)


def render(view: View) -> None:
    steps = view.analysis.steps
    choices: list[int | None] = [None]
    default = 0
    if not steps.empty:   # the whole trace, the median-length step (a typical one) and the steps around it
        order = steps.sort_values("time_ps", kind="stable")["step"].astype(int).tolist()
        median = order[(len(order) - 1) // 2]
        numbers = steps["step"].astype(int).tolist()
        at = numbers.index(median)
        nearby = numbers[max(0, at - MAX_STEP_CHOICES // 2): at + MAX_STEP_CHOICES // 2]
        extremes = [order[0], order[-1]]
        choices += sorted(set(nearby) | set(extremes))
        default = choices.index(median)
    c1, c2, _ = st.columns([2, 2, 4])
    times = dict(zip(steps["step"].astype(int), steps["time_ps"] / PS_PER_US)) if not steps.empty else {}
    step = c1.selectbox("window", choices, index=default, key="timeline_step", **keep_across_tabs(),
                        format_func=lambda s: "whole trace" if s is None else f"step {s} ({fmt_time_us(times[s])})")
    limit = c2.select_slider("ops drawn (longest)", [250, 500, 1000, 2000, 5000], value=1000, key="timeline_limit", **keep_across_tabs())
    key = (view.request, view.stamp, view.target_label)
    host = None
    if is_pod(view):
        hosts = [str(h) for h in view.analysis.profile.op_executions()["host"].unique()]
        picked = st.session_state.get(HOST_PICKED)
        options = [None, *hosts]
        host = c1.selectbox("host", options, index=options.index(picked) if picked in options else 0,
                            format_func=lambda h: "all hosts (busy share per host)" if h is None else h)
        if host != picked:
            st.session_state[HOST_PICKED] = host
        if host is None:
            lanes = _cached_host_lanes(view, key, step)
            st.caption(lanes.note + ". Click a host's lane (or pick it above) to draw its devices' ops.")
            event = st.altair_chart(host_lanes_chart(lanes), width="stretch", on_select="rerun",
                                    selection_mode="host", key="timeline_hosts_chart")
            clicked = _clicked_host(event)
            if clicked is not None and clicked != st.session_state.get("_tv_last_host_click"):
                st.session_state["_tv_last_host_click"] = clicked
                st.session_state[HOST_PICKED] = clicked
                st.rerun()
            return
    tl = _cached_timeline(view, key, step, limit, host)
    st.caption(tl.note + ". Hover a bar for the op, click it to open it in Op detail; drag or scroll to zoom; "
               "colour = bound on the target; idle = time no op of the device runs."
               + (f" {view.projected}" if view.projected else ""))
    if tl.bars.empty:
        st.info("No device ops to draw in this window.")
        return
    _chart(tl)


@st.cache_data(show_spinner=False, max_entries=8)
def _cached_host_lanes(_view: View, key: tuple, step: int | None) -> HostLanes:
    return host_lanes(_view, step)


def _clicked_host(event) -> str | None:
    """The host of the lane a click on the aggregated chart picked, if any."""
    picked = ((getattr(event, "selection", None) or {}).get("host") or []) if event is not None else []
    return str(picked[0]["host"]) if picked and picked[0].get("host") is not None else None


def host_lanes_chart(lanes: HostLanes):
    """One lane per host, its slices coloured by busy share; a click picks the host."""
    import altair as alt

    domain = alt.Scale(domain=[0, lanes.window_ms])
    x = alt.X("start_ms:Q", title="ms from the window start", scale=domain)
    pick = alt.selection_point(name="host", fields=["host"], on="click")
    layers = [alt.Chart(lanes.cells).mark_rect().add_params(pick).encode(
        x=x, x2="end_ms:Q", y=alt.Y("host:N", title=None, sort=lanes.hosts, axis=alt.Axis(labelLimit=360, labelOverlap=False)),
        color=alt.Color("busy:Q", title="busy share", scale=alt.Scale(domain=[0, 1], scheme="blues")),
        tooltip=["host", alt.Tooltip("busy:Q", format=".1%", title="busy"), "devices",
                 alt.Tooltip("start_ms:Q", format=",.3f")])]
    if len(lanes.steps):
        layers.append(alt.Chart(lanes.steps).mark_rule(color="#444", strokeDash=[3, 3]).encode(
            x=alt.X("start_ms:Q", scale=domain), tooltip=["step"]))
    return alt.layer(*layers).properties(height=alt.Step(18), width="container")


def _chart(tl: Timeline) -> None:
    event = st.altair_chart(timeline_chart(tl), width="stretch", on_select="rerun", selection_mode="op",
                            key="timeline_chart")
    selection.select_if_changed("timeline", clicked_op(event))


def timeline_chart(tl: Timeline):
    """The Gantt chart: op bars coloured by bound, idle gaps in the same legend, step boundaries."""
    import altair as alt

    lanes = sorted(set(tl.bars["lane"]) | set(tl.idle["lane"]))
    domain = alt.Scale(domain=[0, tl.window_ms])
    colours = alt.Scale(domain=[*BOUND_COLOURS, "idle"], range=[*BOUND_COLOURS.values(), IDLE_COLOUR])
    colour = alt.Color("bound:N", scale=colours, legend=alt.Legend(orient="bottom", title="bound / idle"))
    y = alt.Y("lane:N", title=None, sort=lanes, axis=alt.Axis(labelLimit=360))
    x = alt.X("start_ms:Q", title="ms from the window start", scale=domain)
    layers = []
    if len(tl.idle):
        layers.append(alt.Chart(tl.idle).mark_bar(clip=True).encode(
            x=x, x2="end_ms:Q", y=y, color=colour,
            tooltip=[alt.Tooltip("duration_us:Q", format=",.2f", title="idle us"), "lane"]))
    pick = alt.selection_point(name="op", fields=["module", "op"], on="click")
    layers.append(alt.Chart(tl.bars).mark_bar(clip=True).add_params(pick).encode(
        x=x, x2="end_ms:Q", y=y,
        color=colour,
        tooltip=["op", "module", "bound", alt.Tooltip("duration_us:Q", format=",.2f", title="us"),
                 alt.Tooltip("start_ms:Q", format=",.4f")]))
    if len(tl.steps):
        layers.append(alt.Chart(tl.steps).mark_rule(color="#444", strokeDash=[3, 3]).encode(
            x=alt.X("start_ms:Q", scale=domain), tooltip=["step"]))
    return alt.layer(*layers).properties(height=alt.Step(36), width="container").interactive(bind_y=False)
