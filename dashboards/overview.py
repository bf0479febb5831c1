"""Overview: what to fix first (the ranked advice, each item a link to its tab), devices, step time split
by bound, MFU, and the biggest gaps in one sentence each.

Drawn from the analysis' JSON record alone (dashboards/front.py), so that a
stored record draws it before the full analysis is loaded, with the same
figures."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from traceview.analysis.roofline import GAIN_DEFINITION
from traceview.dashboards.bars import share_bar_html, stacked_columns_html
from traceview.dashboards.front import ChipTraits, Front
from traceview.dashboards.tabs import TAB_KEY, TABS
from traceview.hardware.chips import dtype_class
from traceview.render.advice import saving_words
from traceview.render.charts import BOUND_COLOURS
from traceview.render.escape import markdown_text
from traceview.render.tables import markdown_table
from traceview.units import US_PER_MS, fmt_pct, fmt_share, fmt_si, fmt_time_us
from traceview.vocabulary import BOUNDS_AND_IDLE

SPLIT_COLOURS = {**BOUND_COLOURS, "idle": "#d9d9d9"}
MAX_STEP_BARS = 100    # a bar chart of thousands of steps is a blur, and slow to draw
MAX_DEVICE_ROWS = 16   # more devices: a scrollable data grid instead of a Markdown table
ADVICE_ITEMS = 5       # as many as `traceview analyze` prints
_LINK_NAMES = {"ici": "ICI", "nvlink": "NVLink", "infinity_fabric": "Infinity Fabric"}


def bound_split(summary: dict) -> pd.DataFrame:
    """The run's time by bound (and idle), in us and as a share: columns bound, time_us, share."""
    by_bound = summary.get("time_by_bound_us") or {}
    rows = [(b, by_bound.get(b) or 0.0) for b in BOUNDS_AND_IDLE if b in by_bound]
    frame = pd.DataFrame(rows, columns=["bound", "time_us"])
    total = frame["time_us"].sum()
    frame["share"] = frame["time_us"] / total if total else 0.0
    return frame


def resource_name(bound: str, record: dict, chip: ChipTraits | None) -> str:
    """Which roofline term an op hits: '<dtype> peak', 'HBM', 'ICI' / 'NVLink' / 'PCIe'..."""
    if bound == "compute":
        dtype = record.get("dtype")
        klass = dtype_class(dtype) if dtype else None
        if chip is not None and klass and klass not in chip.peak_dtypes and chip.fallback(klass) is not None:
            return f"{chip.fallback(klass)} peak"      # the peak the rule used, not the dtype's
        return f"{klass or dtype or 'compute'} peak"
    if bound == "memory":
        return "HBM" if chip is None or chip.kind != "CPU" else "memory"
    if bound == "communication":
        if record.get("collective_kind") == "host-transfer":
            return "PCIe"
        if chip is not None and chip.link is not None:
            return _LINK_NAMES.get(chip.link, chip.link)
        return "interconnect"
    return "unknown"


def gap_sentences(front: Front, limit: int = 5) -> list[str]:
    """'all-reduce.3: 121 ms measured, 45 ms at the ICI roofline, communication-bound (76 ms to gain)',
    ranked by gain (what the device would save; for async work at most the time it waited)."""
    ops = front.ops
    rank = "gain_us" if "gain_us" in ops.columns else "gap_us"
    if rank not in ops.columns:
        return []
    ranked = ops[ops[rank].fillna(0) > 0].sort_values(rank, ascending=False, kind="stable").head(limit)
    sentences = []
    for r in ranked.to_dict("records"):
        resource = resource_name(r["bound"], r, front.chip)
        measured = r.get("projected_time_us") if r.get("projected_time_us") == r.get("projected_time_us") and \
            r.get("projected_time_us") is not None else r["judged_time_us"]
        waited = ""
        exposed = r.get("exposed_time_us")
        if exposed is not None and exposed == exposed and r.get("gap_us") and exposed < r["gap_us"]:
            waited = f"; the device waited {fmt_time_us(exposed)} on it, the rest overlapped other work"
        sentences.append(f"**{markdown_text(r['name'])}** ({markdown_text(r['module'])}): "
                         f"{fmt_time_us(measured)} {'projected' if 'projected_time_us' in r else 'measured'}, "
                         f"{fmt_time_us(r['roofline_time_us'])} at the {markdown_text(resource)} roofline, {r['bound']}-bound "
                         f"({fmt_time_us(r[rank])} to gain{waited})")
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


def device_frame(front: Front) -> pd.DataFrame:
    """One row per device of the trace; with one host, devices are named without it (the header names it)."""
    one_host = len(front.record["source"]["hosts"]) == 1
    rows = [{"device": d["id"].split("/", 1)[-1] if one_host else d["id"], "kind": d["kind"],
             "model": d["model_name"], "peak FLOP/s": fmt_si(d["peak_flops"], "FLOP/s"),
             "HBM": fmt_si(d["hbm_bandwidth"], "B/s")}
            for d in front.record["devices"]]
    return pd.DataFrame(rows)


def advice_rows(front: Front, limit: int = ADVICE_ITEMS) -> list[dict]:
    """The first ``limit`` items of the record's ``advice`` (``Analysis.advice()``): rank, kind, title, saving
    (a sentence), the first piece of evidence, and the tab that shows it (the Overview when the dashboard has
    no such tab)."""
    return [{"rank": item["rank"], "kind": item["kind"], "title": item["title"],
             "saving": saving_words(item["saving_us"], item["saving_share"]),
             "evidence": item["evidence"][0] if item["evidence"] else "",
             "tab": item["tab"] if item["tab"] in TABS else "Overview"}
            for item in front.record["advice"][:limit]]


def _open_tab(name: str) -> None:
    st.session_state[TAB_KEY] = name


@dataclass
class Parts:
    """What the Overview draws, built once per analysis (every rerun of the page reuses it)."""

    split: pd.DataFrame          # bound_split
    sentences: list[str]         # gap_sentences
    steps: list[float]           # each step's time, us
    steps_frame: pd.DataFrame    # steps_frame, the first MAX_STEP_BARS steps
    devices: pd.DataFrame        # device_frame
    split_chart: str | None      # the charts, as HTML (None: nothing to draw)
    steps_chart: str | None
    advice: list[dict]           # advice_rows


def parts(front: Front) -> Parts:
    return _parts(front, front.key)


def build_parts(front: Front) -> Parts:
    s = front.summary
    split = bound_split(s)
    frame = steps_frame(s, MAX_STEP_BARS)
    return Parts(split=split, sentences=gap_sentences(front),
                 steps=[x["time_us"] for x in s.get("steps", []) if x.get("time_us") is not None],
                 steps_frame=frame, devices=device_frame(front),
                 split_chart=split_bar_chart(split) if len(split) else None,
                 steps_chart=steps_chart(frame) if len(frame) else None, advice=advice_rows(front))


@st.cache_resource(show_spinner=False, max_entries=16)
def _parts(_front: Front, key: tuple) -> Parts:
    return build_parts(_front)


def projected_note(front: Front) -> str:
    """" (projected onto CHIP)" when the record's target is not the chip the trace ran on, else ""."""
    target = front.record.get("target") or {}
    return f" (projected onto {target.get('name')})" if target.get("projected") else ""


def render(front: Front) -> None:
    s = front.summary
    p = parts(front)
    projected = projected_note(front)
    _advice(p.advice, projected)
    steps = p.steps
    cols = st.columns(5)
    active, listed = s.get("active_devices") or 0, len(front.record["devices"])
    cols[0].metric("devices", active, help=f"devices with at least one op ({listed} in the trace)")
    cols[1].metric("steps", len(steps))
    cols[2].metric("median step", fmt_time_us(float(pd.Series(steps).median())) if steps else "-")
    cols[3].metric("projected MFU" if s.get("projected") else "MFU", fmt_share(s.get("mfu")),
                   help=(f"model FLOPs / (span x active devices x the {s.get('mfu_peak_dtype')} peak of the target)"
                         if s.get("mfu") is not None else f"unknown: {s.get('mfu_reason')}"))
    cols[4].metric("projected roofline efficiency" if projected else "roofline efficiency", fmt_share(s.get("efficiency")),
                   help=s.get("efficiency_definition") or s.get("efficiency_reason") or "")

    split = p.split
    if p.split_chart is not None:
        st.markdown(f"**Where the time goes**{projected} ("
                    + ", ".join(f"{b} {fmt_pct(x)}" for b, x in zip(split["bound"], split["share"])) + ")")
        st.html(p.split_chart)
    else:
        st.info("No target chip: ops are not roofline-judged. Pick a target in the sidebar.")

    if p.sentences:
        st.markdown(f"**Biggest gaps**{projected}, ranked by what can be won ({GAIN_DEFINITION})")
        st.markdown("\n".join(f"1. {x}" for x in p.sentences))

    left, right = st.columns([1, 1])
    with left:
        if p.steps_chart is not None:
            st.markdown(f"**Steps**{projected} (per device: time by bound and idle, the mean over the step's devices" + (
                f"; the first {MAX_STEP_BARS} of {len(steps)} steps)" if len(steps) > MAX_STEP_BARS else ")"))
            st.html(p.steps_chart)
    with right:
        st.markdown("**Devices** (peak FLOP/s and HBM bandwidth as the trace states them)")
        _devices(p.devices)
        n = s.get("active_devices") or 0
        st.caption(f"{n} active devices: busy {fmt_time_us(s.get('device_time_us'))} + idle "
                   f"{fmt_time_us(s.get('idle_us'))} = span {fmt_time_us(s.get('span_us'))} x {n}"
                   + (f"; {len(s['inactive_devices'])} devices ran no op" if s.get("inactive_devices") else ""))


def _advice(rows: list[dict], projected: str = "") -> None:
    """What to fix first: one line per item, ranked by estimated saving, with a button to its tab."""
    if not rows:
        return
    st.markdown(f"**What to fix first**{projected} (ranked by estimated saving in wall time; savings of different "
                "items may overlap)")
    for row in rows:
        text, link = st.columns([7, 1], vertical_alignment="center")
        text.markdown(f"{row['rank']}. **{markdown_text(row['title'])}**: {row['saving']}")
        if row["evidence"]:
            text.caption(markdown_text(row["evidence"]))
        if row["tab"] != "Overview":
            link.button(f"{row['tab']} →", key=f"tv_advice_{row['rank']}", on_click=_open_tab, args=(row["tab"],),
                        help=f"open the {row['tab']} tab")


def warm(front: Front) -> None:
    """Build what `render` draws."""
    parts(front)


def _devices(frame: pd.DataFrame) -> None:
    """A few devices as a Markdown table: the page's Markdown code is loaded already, while a data grid
    fetches and compiles about 1 MB of scripts in the browser first. Many devices: a scrollable grid."""
    if len(frame) <= MAX_DEVICE_ROWS:
        st.markdown(markdown_table(list(frame.columns), [[str(x) for x in row] for row in frame.itertuples(index=False)]))
    else:
        st.dataframe(frame, hide_index=True, width="stretch")


def split_bar_chart(split: pd.DataFrame) -> str:
    """One bar, normalised to 100 %: the run's time by bound and idle (HTML: no Vega on the first page)."""
    return share_bar_html(split, SPLIT_COLOURS)


def steps_chart(frame: pd.DataFrame) -> str:
    """Per step, a column stacked by bound, idle on top (steps_frame's long format; HTML)."""
    return stacked_columns_html(frame, SPLIT_COLOURS, list(BOUNDS_AND_IDLE))
