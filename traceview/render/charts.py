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
from traceview.hardware.chips import Chip
from traceview.units import PS_PER_US

BOUND_COLOURS = {"compute": "#2ca02c", "memory": "#1f77b4", "communication": "#9467bd", "unknown": "#7f7f7f"}


def roofline_points(ops: pd.DataFrame) -> pd.DataFrame:
    """Ops that can sit on a FLOP/s-vs-intensity plane: some FLOPs, some bytes, some measured time."""
    needed = {"flops", "bytes_accessed", "achieved_flops", "intensity", "bound"}
    if not needed <= set(ops.columns):
        return pd.DataFrame(columns=["module", "op", "bound", "intensity", "achieved_flops", "time_us"])
    keep = (ops["flops"] > 0) & (ops["bytes_accessed"] > 0) & (ops["achieved_flops"] > 0)
    points = ops.loc[keep].copy()
    time_col = "judged_time_ps" if "judged_time_ps" in points.columns else "self_time_ps"
    points["time_us"] = points[time_col] / PS_PER_US
    for column in ("module", "op", "category", "dtype", "bound"):
        if column in points.columns:
            points[column] = points[column].astype(str)
    return points.reset_index(drop=True)


def roofline_lines(chip: Chip, x_min: float, x_max: float) -> pd.DataFrame:
    """Piecewise lines: min(peak, bandwidth x intensity) per dtype, plus the interconnect slope.

    Columns: line (label), intensity, flops.
    """
    xs = np.logspace(np.log10(x_min), np.log10(x_max), 200)
    rows = []
    for dtype, peak in sorted(chip.peak_flops.items(), key=lambda kv: -kv[1]):
        if chip.hbm_bandwidth:
            ys = np.minimum(peak, chip.hbm_bandwidth * xs)
            rows.append(pd.DataFrame({"line": f"{dtype} peak / HBM", "intensity": xs, "flops": ys}))
    link = chip.interconnect_bandwidth
    if link:
        rows.append(pd.DataFrame({"line": "interconnect (per byte moved)", "intensity": xs,
                                  "flops": np.minimum(max(chip.peak_flops.values(), default=np.inf), link * xs)}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["line", "intensity", "flops"])


def _extent(points: pd.DataFrame, chip: Chip) -> tuple[float, float]:
    ridge = max(chip.peak_flops.values(), default=1.0) / (chip.hbm_bandwidth or 1.0)
    lo = min([ridge / 100] + ([points["intensity"].min() / 2] if len(points) else []))
    hi = max([ridge * 100] + ([points["intensity"].max() * 2] if len(points) else []))
    return max(lo, 1e-3), hi


def altair_chart(points: pd.DataFrame, chip: Chip, width: int = 700, height: int = 450):
    """An interactive log-log roofline (tooltips; click selects an op: selection name 'op')."""
    import altair as alt

    lo, hi = _extent(points, chip)
    lines = roofline_lines(chip, lo, hi)
    x = alt.X("intensity:Q", scale=alt.Scale(type="log"), title="arithmetic intensity (FLOPs / byte)",
              axis=alt.Axis(format="~g"))
    y = alt.Y("flops:Q", scale=alt.Scale(type="log"), title="FLOP/s", axis=alt.Axis(format="~s"))
    roof = alt.Chart(lines).mark_line(strokeDash=[4, 2]).encode(x=x, y=y, color=alt.Color(
        "line:N", legend=alt.Legend(title="roofline"), scale=alt.Scale(scheme="greys")))
    pick = alt.selection_point(name="op", fields=["module", "op"], on="click", empty=False)
    tooltip = [c for c in ("module", "op", "category", "bound", "dtype", "time_us", "efficiency",
                           "source_file", "source_line") if c in points.columns]
    dots = alt.Chart(points).mark_circle(opacity=0.75).encode(
        x=alt.X("intensity:Q", scale=alt.Scale(type="log")),
        y=alt.Y("achieved_flops:Q", scale=alt.Scale(type="log")),
        size=alt.Size("time_us:Q", legend=None, scale=alt.Scale(range=[20, 800])),
        color=alt.Color("bound:N", scale=alt.Scale(domain=list(BOUND_COLOURS), range=list(BOUND_COLOURS.values()))),
        stroke=alt.condition(pick, alt.value("black"), alt.value(None)),
        tooltip=tooltip,
    ).add_params(pick)
    return alt.layer(roof, dots).resolve_scale(color="independent").properties(
        width=width, height=height, title=f"Roofline on {chip.name}")


def save_plot(points: pd.DataFrame, chip: Chip, path: str | Path) -> Path:
    """Write the chart: .png / .svg / .pdf with matplotlib, .html with Altair."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".html":
        try:
            altair_chart(points, chip).save(str(path))
        except ImportError as exc:
            raise UserError("an .html roofline needs altair: pip install 'traceview[dashboard]'") from exc
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
    fig, ax = plt.subplots(figsize=(9, 6))
    greys = ["0.1", "0.35", "0.55", "0.7", "0.8"]
    for i, (label, line) in enumerate(roofline_lines(chip, lo, hi).groupby("line", sort=False)):
        style = ":" if label.startswith("interconnect") else "--"
        ax.plot(line["intensity"], line["flops"], linestyle=style, linewidth=1.2, color=greys[i % len(greys)],
                label=label)
    for bound, group in points.groupby("bound"):
        ax.scatter(group["intensity"], group["achieved_flops"], s=20 + 400 * group["time_us"] / max(
            points["time_us"].max(), 1e-9), color=BOUND_COLOURS.get(bound, "#7f7f7f"), alpha=0.7,
            label=f"{bound} ({len(group)} ops)", edgecolors="none")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs / byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(f"Roofline on {chip.name}: one point per op, area ~ time")
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
