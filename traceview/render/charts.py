"""The roofline chart: the target's peak lines and one point per op, sized by time, coloured by bound.

One data preparation (`roofline_points`, `roofline_lines`) feeds two
renderers: matplotlib for PNG/SVG files and Altair (Vega-Lite) for HTML and
the dashboard, so every view plots the same numbers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from traceview.errors import UserError
from traceview.hardware.chips import Chip, dtype_class
from traceview.units import PS_PER_US, fmt_si

BOUND_COLOURS = {"compute": "#2ca02c", "memory": "#1f77b4", "communication": "#9467bd", "unknown": "#7f7f7f"}
# One colour and one dash pattern per roof, none of them a bound's colour, so no two roofs look alike.
ROOF_STYLES = (("#d62728", (6, 2)), ("#ff7f0e", (2, 2)), ("#8c564b", (8, 3, 2, 3)), ("#e377c2", (1, 1)),
               ("#17becf", (4, 4)), ("#bcbd22", (10, 2)), ("#393b79", (3, 1, 1, 1)), ("#843c39", (12, 4)),
               ("#000000", (2, 6)))
INTERCONNECT = "interconnect (per byte moved)"
LABELLED_POINTS = 5
_POINT_COLUMNS = ["module", "op", "bound", "intensity", "achieved_flops", "time_us"]


def _time_ps(ops: pd.DataFrame) -> pd.Series:
    column = "judged_time_ps" if "judged_time_ps" in ops.columns else "self_time_ps"
    if column not in ops.columns:
        return pd.Series(np.nan, index=ops.index)
    return pd.to_numeric(ops[column], errors="coerce")


def _placeable(ops: pd.DataFrame) -> pd.Series:
    needed = {"flops", "bytes_accessed", "achieved_flops", "intensity", "bound"}
    if not needed <= set(ops.columns):
        return pd.Series(False, index=ops.index)
    return (ops["flops"] > 0) & (ops["bytes_accessed"] > 0) & (ops["achieved_flops"] > 0)


def roofline_points(ops: pd.DataFrame, labelled: int = LABELLED_POINTS) -> pd.DataFrame:
    """Ops that can sit on a FLOP/s-vs-intensity plane: some FLOPs, some bytes, some measured time.

    ``label`` holds the op name for the ``labelled`` points with the most time (else "").
    """
    keep = _placeable(ops)
    if not keep.any():
        return pd.DataFrame(columns=_POINT_COLUMNS + ["label"])
    points = ops.loc[keep].copy()
    points["time_us"] = _time_ps(points) / PS_PER_US
    for column in ("module", "op", "category", "dtype", "bound"):
        if column in points.columns:
            points[column] = points[column].astype(str)
    points = points.reset_index(drop=True)
    top = points["time_us"].fillna(0).nlargest(labelled).index
    points["label"] = ""
    points.loc[top, "label"] = points.loc[top, "op"]
    return points


def unplaceable_ops(ops: pd.DataFrame) -> pd.DataFrame:
    """Ops the chart cannot place, why, and their share of the ops' self time (largest first).

    Columns: module, op, reason, time_us (self time), share (0..1 of all ops' self time).
    """
    columns = ["module", "op", "reason", "time_us", "share"]
    if ops.empty or "op" not in ops.columns:
        return pd.DataFrame(columns=columns)
    rest = ops.loc[~_placeable(ops)]
    self_ps = pd.to_numeric(ops.get("self_time_ps", _time_ps(ops)), errors="coerce")
    total = float(self_ps.sum())
    flops = pd.to_numeric(rest.get("flops", pd.Series(np.nan, index=rest.index)), errors="coerce")
    nbytes = pd.to_numeric(rest.get("bytes_accessed", pd.Series(np.nan, index=rest.index)), errors="coerce")
    lower = rest["cost_lower_bound"].fillna(False).astype(bool) if "cost_lower_bound" in rest.columns else \
        pd.Series(False, index=rest.index)
    reason = np.select([flops.isna() & lower & nbytes.notna(), flops.isna() | nbytes.isna(), flops <= 0, nbytes <= 0],
                       ["no FLOP figure (kernel without cost estimate)", "no cost", "no FLOPs", "no bytes"],
                       default="no measured time")
    time = self_ps.loc[rest.index]
    out = pd.DataFrame({"module": rest.get("module", "").astype(str), "op": rest["op"].astype(str),
                        "reason": reason, "time_us": time / 1e6,
                        "share": time / total if total > 0 else np.nan})
    return out.sort_values("time_us", ascending=False, na_position="last").reset_index(drop=True)


def unplaceable_note(ops: pd.DataFrame, limit: int = 6) -> str:
    """One line naming the ops the chart leaves out, with their share of time; "" when none."""
    rest = unplaceable_ops(ops)
    if rest.empty:
        return ""
    items = [f"{r.op} ({r.reason}, {_share(r.share)})" for r in rest.head(limit).itertuples()]
    more = f", and {len(rest) - limit} more" if len(rest) > limit else ""
    return (f"Not on the chart ({len(rest)} ops, {_share(rest['share'].sum())}): "
            + ", ".join(items) + more)


def _share(value: float) -> str:
    return "share unknown" if value is None or not np.isfinite(value) else f"{100 * value:.1f}% of time"


def applicable_roofs(chip: Chip, ops: pd.DataFrame | None) -> tuple[list[str], bool]:
    """(dtype classes whose peak the program's FLOPs use, whether an interconnect roof applies).

    With no ops (or no dtypes) every peak of the chip is drawn. The interconnect applies only when
    some op moves data between devices (a modelled link time above zero).
    """
    peaks = sorted(chip.peak_flops, key=lambda k: -chip.peak_flops[k])
    if ops is None or ops.empty:
        return peaks, bool(chip.interconnect_bandwidth)
    used: set[str] = set()
    if "dtype" in ops.columns and "flops" in ops.columns:
        flops = pd.to_numeric(ops["flops"], errors="coerce").fillna(0)
        for dtype in ops.loc[flops > 0, "dtype"].dropna().unique():
            klass = dtype_class(dtype)
            if klass in chip.peak_flops:
                used.add(klass)
            elif klass in chip.dtype_fallbacks:          # the class whose peak the rule uses
                used.add(chip.dtype_fallbacks[klass][0])
    roofs = [k for k in peaks if k in used] or peaks
    comm = ops.get("t_comm_ps")
    link = bool(chip.interconnect_bandwidth) and comm is not None and \
        bool((pd.to_numeric(comm, errors="coerce") > 0).any())
    return roofs, link


def drawn_ridge_points(chip: Chip, ops: pd.DataFrame | None) -> list[tuple[str, float, float]]:
    """(dtype class, peak FLOP/s, ridge point in FLOPs/byte) of each peak the chart draws (applicable_roofs),
    so the text names the same peak as the chart: on a CPU running f32 that is the fp32 peak, not bf16."""
    if not chip.hbm_bandwidth:
        return []
    dtypes, _ = applicable_roofs(chip, ops)
    return [(d, chip.peak_flops[d], chip.peak_flops[d] / chip.hbm_bandwidth) for d in dtypes]


def ridge_text(chip: Chip, ops: pd.DataFrame | None) -> str:
    """"ridge point 10 FLOPs/byte (fp32 peak 500 GFLOP/s / HBM 50 GB/s)", one per drawn peak; "" if none."""
    parts = [f"{ridge:.0f} FLOPs/byte ({dtype} peak {fmt_si(peak, 'FLOP/s')} / HBM {fmt_si(chip.hbm_bandwidth, 'B/s')})"
             for dtype, peak, ridge in drawn_ridge_points(chip, ops)]
    return ("ridge point " + ", ".join(parts)) if parts else ""


def roofline_lines(chip: Chip, x_min: float, x_max: float, ops: pd.DataFrame | None = None) -> pd.DataFrame:
    """Piecewise lines: min(peak, bandwidth x intensity) per dtype, plus the interconnect slope.

    Only the roofs that apply to ``ops`` (see :func:`applicable_roofs`). Columns: line (label),
    intensity, flops, colour, dash (a dash pattern as "on,off,...").
    """
    xs = np.logspace(np.log10(x_min), np.log10(x_max), 200)
    rows = []
    dtypes, link = applicable_roofs(chip, ops)
    for i, dtype in enumerate(dtypes):
        peak = chip.peak_flops[dtype]
        if chip.hbm_bandwidth:
            colour, dash = ROOF_STYLES[i % len(ROOF_STYLES)]
            rows.append(pd.DataFrame({"line": f"{dtype} peak {fmt_si(peak, 'FLOP/s')} / HBM", "intensity": xs,
                                      "flops": np.minimum(peak, chip.hbm_bandwidth * xs), "colour": colour,
                                      "dash": ",".join(map(str, dash))}))
    link_bandwidth = chip.interconnect_bandwidth
    if link and link_bandwidth:
        colour, dash = ROOF_STYLES[-1]
        top = max((chip.peak_flops[d] for d in dtypes), default=np.inf)
        rows.append(pd.DataFrame({"line": INTERCONNECT, "intensity": xs, "colour": colour,
                                  "flops": np.minimum(top, link_bandwidth * xs),
                                  "dash": ",".join(map(str, dash))}))
    if not rows:
        return pd.DataFrame(columns=["line", "intensity", "flops", "colour", "dash"])
    return pd.concat(rows, ignore_index=True)


def _extent(points: pd.DataFrame, chip: Chip) -> tuple[float, float]:
    ridge = max(chip.peak_flops.values(), default=1.0) / (chip.hbm_bandwidth or 1.0)
    lo = min([ridge / 100] + ([points["intensity"].min() / 2] if len(points) else []))
    hi = max([ridge * 100] + ([points["intensity"].max() * 2] if len(points) else []))
    return max(lo, 1e-3), hi


def _roof_label_rows(lines: pd.DataFrame) -> pd.DataFrame:
    """One point per roof where its label is written: staggered from the right end so that
    roofs sharing a plateau do not print their labels on top of each other."""
    if lines.empty:
        return lines
    picks = []
    for i, (name, line) in enumerate(lines.groupby("line", sort=False)):
        at = int(len(line) * 0.45) if name == INTERCONNECT else len(line) - 1 - 30 * i   # its slope
        picks.append(line.iloc[max(at, 0)])
    return pd.DataFrame(picks)


def chart_title(chip: Chip, measured_on: str | None = None) -> str:
    """The chart's title; ``measured_on``: the capture chip when it is not ``chip`` (a projection)."""
    projected = f" (projected: rates measured on {measured_on})" if measured_on else ""
    return f"Roofline on {chip.name}{projected}: one point per op, area ~ time"


def altair_chart(points: pd.DataFrame, chip: Chip, width: int = 700, height: int = 450,
                 ops: pd.DataFrame | None = None, measured_on: str | None = None):
    """An interactive log-log roofline (tooltips; click selects an op: selection name 'op').

    Each roof has its own colour, dash and label; the points with the most time carry their
    names; ``ops`` (all ops) picks the roofs that apply and names the ops left off in the subtitle.
    """
    import altair as alt

    lo, hi = _extent(points, chip)
    lines = roofline_lines(chip, lo, hi, ops)
    names = list(dict.fromkeys(lines["line"]))
    styles = lines.drop_duplicates("line")
    x = alt.X("intensity:Q", scale=alt.Scale(type="log"), title="arithmetic intensity (FLOPs / byte)",
              axis=alt.Axis(format="~g"))
    y = alt.Y("flops:Q", scale=alt.Scale(type="log"), title="FLOP/s", axis=alt.Axis(format="~s"))
    colour = alt.Color("line:N", legend=alt.Legend(title="roofline", symbolType="stroke", labelLimit=320),
                       scale=alt.Scale(domain=names, range=list(styles["colour"])))
    dash = alt.StrokeDash("line:N", legend=None, scale=alt.Scale(
        domain=names, range=[[int(v) for v in d.split(",")] for d in styles["dash"]]))
    roof = alt.Chart(lines).mark_line(strokeWidth=2).encode(x=x, y=y, color=colour, strokeDash=dash)
    roof_text = alt.Chart(_roof_label_rows(lines)).mark_text(align="right", dy=-7, fontSize=11).encode(
        x=x, y=y, text="line:N", color=alt.Color("line:N", legend=None, scale=alt.Scale(
            domain=names, range=list(styles["colour"]))))
    pick = alt.selection_point(name="op", fields=["module", "op"], on="click", empty=False)
    tooltip = [c for c in ("module", "op", "category", "bound", "dtype", "time_us", "efficiency",
                           "source_file", "source_line") if c in points.columns]
    px = alt.X("intensity:Q", scale=alt.Scale(type="log"))
    py = alt.Y("achieved_flops:Q", scale=alt.Scale(type="log"))
    dots = alt.Chart(points).mark_circle(opacity=0.75).encode(
        x=px, y=py,
        size=alt.Size("time_us:Q", legend=None, scale=alt.Scale(range=[20, 800])),
        color=alt.Color("bound:N", title="bound",
                        scale=alt.Scale(domain=list(BOUND_COLOURS), range=list(BOUND_COLOURS.values()))),
        stroke=alt.condition(pick, alt.value("black"), alt.value(None)),
        tooltip=tooltip,
    ).add_params(pick)
    labels = alt.Chart(points).mark_text(align="left", dx=8, dy=-6, fontSize=10, color="#222").encode(
        x=px, y=py, text="label:N")
    note = unplaceable_note(ops) if ops is not None else ""
    title = alt.TitleParams(chart_title(chip, measured_on),
                            subtitle=_wrap(note) if note else alt.Undefined, anchor="start")
    return alt.layer(roof, roof_text, dots, labels).resolve_scale(color="independent").properties(
        width=width, height=height, title=title)


def _wrap(text: str, width: int = 110) -> list[str]:
    import textwrap
    return textwrap.wrap(text, width)


def save_plot(points: pd.DataFrame, chip: Chip, path: str | Path, ops: pd.DataFrame | None = None,
              measured_on: str | None = None) -> Path:
    """Write the chart: .png / .svg / .pdf with matplotlib, .html with Altair (Vega inlined: works offline)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".html":
        try:
            altair_chart(points, chip, ops=ops, measured_on=measured_on).save(str(path), inline=True)
        except ImportError as exc:
            raise UserError("an .html roofline needs altair and vl-convert-python: "
                            "pip install 'traceview[dashboard]'") from exc
        return path
    if suffix not in (".png", ".svg", ".pdf"):
        raise UserError(f"{path}: the plot must be .png, .svg, .pdf or .html")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UserError("a .png/.svg roofline needs matplotlib: pip install 'traceview[plot]'") from exc
    lo, hi = _extent(points, chip)
    note = unplaceable_note(ops) if ops is not None else ""
    fig, ax = plt.subplots(figsize=(10, 7 if note else 6))
    lines = roofline_lines(chip, lo, hi, ops)
    for label, line in lines.groupby("line", sort=False):
        dash = tuple(int(v) for v in line["dash"].iloc[0].split(","))
        ax.plot(line["intensity"], line["flops"], linestyle=(0, dash), linewidth=1.6,
                color=line["colour"].iloc[0], label=label)
    for row in _roof_label_rows(lines).itertuples():
        ax.annotate(str(row.line), (row.intensity, row.flops), ha="right", va="bottom", fontsize=8,
                    color=row.colour, xytext=(0, 3), textcoords="offset points")
    for bound, group in points.groupby("bound"):
        ax.scatter(group["intensity"], group["achieved_flops"], s=20 + 400 * group["time_us"] / max(
            points["time_us"].max(), 1e-9), color=BOUND_COLOURS.get(bound, "#7f7f7f"), alpha=0.7,
            label=f"{bound} ({len(group)} ops)", edgecolors="none")
    for row in points.loc[points.get("label", pd.Series(dtype=str)).astype(bool)].itertuples():
        ax.annotate(str(row.label), (row.intensity, row.achieved_flops), fontsize=8, xytext=(6, 4),
                    textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs / byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(chart_title(chip, measured_on))
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=8, loc="lower right")
    if note:
        fig.text(0.01, 0.01, "\n".join(_wrap(note, 150)), fontsize=8, va="bottom")
        fig.tight_layout(rect=(0, 0.08, 1, 1))
    else:
        fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
