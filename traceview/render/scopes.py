"""`traceview scopes` output: the scope (or source-line) tree as JSON, CSV, terminal text and Markdown."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import pandas as pd

from traceview.render.escape import markdown_text, terminal_lines
from traceview.render.tables import markdown_table, text_table
from traceview.scopes.paths import PASSES
from traceview.scopes.tree import BOUND_NAMES, ScopeTree, dominant_bound
from traceview.timeline.overlap import Overlap
from traceview.units import fmt_pct, fmt_si, fmt_time_us, json_scalar


def shown(tree: ScopeTree, depth: int | None = None) -> pd.DataFrame:
    """The nodes a report shows: all, or those at most ``depth`` deep."""
    return tree.nodes if depth is None else tree.nodes[tree.nodes["depth"] <= depth]


def node_record(row: dict, judged: bool) -> dict[str, Any]:
    """One node of the JSON contract."""
    record = {
        "path": list(row["path"]), "self_us": json_scalar(row["self_us"]), "total_us": json_scalar(row["total_us"]),
        "gain_us": json_scalar(row["gain_us"]) if judged else None,
        "self_gain_us": json_scalar(row["self_gain_us"]) if judged else None,
        "wall_gain_us": json_scalar(row["wall_gain_us"]) if judged else None,
        "self_wall_gain_us": json_scalar(row["self_wall_gain_us"]) if judged else None,
        "efficiency": json_scalar(row["efficiency"]) if judged else None,
        "time_by_bound_us": {b: json_scalar(row[f"{b}_us"]) for b in BOUND_NAMES} if judged else None,
        "bound": dominant_bound(row) if judged else None,
        "passes": {p: json_scalar(row[f"{p}_us"]) for p in PASSES},
        "flops": json_scalar(row["flops"]), "bytes_accessed": json_scalar(row["bytes_accessed"]),
        "ops": int(row["ops"]),
    }
    if isinstance(row.get("text"), str):
        record["text"] = row["text"]
    return record


def scopes_json(tree: ScopeTree, depth: int | None = None) -> dict[str, Any]:
    """The ``traceview scopes --format json`` contract (DESIGN.md; docs/scopes.md defines each field)."""
    return {
        "by": tree.by, "projected_onto": tree.projected_onto, "total_us": json_scalar(tree.total_us), "unattributed_us": json_scalar(tree.unattributed_us),
        "attributed_share": json_scalar(tree.attributed_share),
        "busy_us": json_scalar(tree.overlap.busy_ps / 1e6),
        "wall_per_op_time": json_scalar(tree.overlap.factor),
        "nodes": [node_record(row, tree.judged) for row in shown(tree, depth).to_dict("records")],
        "warnings": list(tree.warnings),
    }


def scopes_csv(tree: ScopeTree, depth: int | None = None) -> str:
    """One row per node: the path joined with "/" (and as depth), then the numbers."""
    nodes = shown(tree, depth)
    frame = pd.DataFrame({"path": ["/".join(p) for p in nodes["path"]]})
    for column in nodes.columns:
        if column not in ("path", "text") or (column == "text" and tree.by == "source"):
            frame[column] = nodes[column].to_numpy()
    if not tree.judged:
        for column in ["gain_us", "self_gain_us", "wall_gain_us", "self_wall_gain_us", "efficiency",
                       *[f"{b}_us" for b in BOUND_NAMES]]:
            frame[column] = None
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    return buffer.getvalue()


def _rows(tree: ScopeTree, depth: int | None, markdown: bool) -> list[list[str]]:
    rows = []
    total = tree.total_us or 1.0
    for row in shown(tree, depth).to_dict("records"):
        name = str(row["name"])
        label = ("  " * (row["depth"] - 1) + name) if not markdown else ("· " * (row["depth"] - 1) + name)
        if tree.by == "source" and isinstance(row.get("text"), str):
            label += f"  {row['text']}"
        bound = dominant_bound(row) if tree.judged else None
        passes = " / ".join(fmt_time_us(row[f"{p}_us"]) for p in PASSES)
        rows.append([label, fmt_time_us(row["total_us"]), fmt_pct(row["total_us"] / total),
                     fmt_time_us(row["self_us"]), fmt_time_us(row["gain_us"]) if tree.judged else "-",
                     fmt_time_us(row["wall_gain_us"]) if tree.judged else "-",
                     bound or "-", fmt_pct(row["efficiency"]) if tree.judged else "-", passes,
                     fmt_si(row["flops"]), fmt_si(row["bytes_accessed"], "B"), str(int(row["ops"]))])
    return rows


HEADERS = ["scope", "total", "share", "self", "gain", "wall gain", "bound", "efficiency", "fwd / bwd / other",
           "FLOPs", "bytes", "ops"]
ALIGN = "lrrrrrlrrrrr"
PROJECTED = ("gain", "wall gain", "bound", "efficiency")    # the columns a --target projection judges


def _headline(tree: ScopeTree, above: Sequence[str] = ()) -> list[str]:
    """What the table's figures are a part of: op time (total, share, self, gain) and busy time (wall gain)."""
    busy = tree.overlap.busy_ps / 1e6
    lines = [f"by {tree.by}: {fmt_time_us(tree.total_us)} of op time, {fmt_pct(tree.attributed_share)} attributed, "
             f"{fmt_time_us(tree.unattributed_us)} unattributed; the devices were busy {fmt_time_us(busy)}",
             "total, share, self, gain: op time; wall gain: the gain in wall time, at most the busy time"]
    if tree.overlap.overlapped:
        lines.append(tree.overlap.describe())
    if tree.projected_onto:
        lines.append(f"gain, wall gain, bound, efficiency: projected onto {tree.projected_onto} (times as measured)")
    if above:
        lines.append(f"efficiency above 100% ({', '.join(above[:3])}{' ...' if len(above) > 3 else ''}): ops ran "
                     "faster than their roofline allows, so their cost model counts more FLOPs or bytes than they "
                     "moved (or data came from caches); traceview analyze names those ops")
    return lines


def _above_roofline(tree: ScopeTree, depth: int | None) -> list[str]:
    """The shown nodes whose efficiency is above 100% (an op faster than its roofline), by path."""
    if not tree.judged:
        return []
    nodes = shown(tree, depth)
    over = nodes[nodes["efficiency"].astype(float) > 1.0]
    return ["/".join(map(str, p)) for p in over["path"]]


def scopes_text(tree: ScopeTree, depth: int | None = None, markdown: bool = False) -> str:
    """The tree as an indented table (terminal) or a Markdown table."""
    headers = [f"proj. {h}" if tree.projected_onto and h in PROJECTED else h for h in HEADERS]
    if tree.by == "source":
        headers[0] = "file / function / line"
    rows = _rows(tree, depth, markdown)
    if markdown:
        out = [f"## traceview scopes ({markdown_text(tree.by)})", "",
               *[f"- {markdown_text(line)}" for line in _headline(tree, _above_roofline(tree, depth))], "",
               markdown_table(headers, rows, ALIGN) if rows else "_no attributed ops_"]
        out += [f"- warning: {markdown_text(w)}" for w in tree.warnings]
        return "\n".join(out) + "\n"
    out = [*_headline(tree, _above_roofline(tree, depth)), "",
           text_table(headers, rows, ALIGN) if rows else "no attributed ops"]
    out += [f"warning: {w}" for w in tree.warnings if not w.startswith("ops overlap ")]
    return terminal_lines("\n".join(out)) + "\n"


def top_scope_lines(top: pd.DataFrame, total_us: float, overlap: Overlap | None = None) -> list[str]:
    """The analyze report's lines for the scopes with most gain (ScopeTree.top_by_gain): each gain against
    the op time it is part of, and, where ops overlap, first as the wall time it stands for."""
    lines = []
    for row in top.to_dict("records"):
        share = fmt_pct(row["self_us"] / total_us if total_us else None)
        gain = f"{fmt_time_us(row['self_gain_us'])} to gain of {fmt_time_us(row['self_us'])} ({share} of op time)"
        if overlap is not None and overlap.overlapped:
            gain = f"{fmt_time_us(row['self_wall_gain_us'])} of wall time to gain (op time: {gain})"
        # a program alone: its ops that sit in no named scope (the model's code did not name them)
        where = f"{row['path'][0]} (the program's ops in no named scope)" if len(row["path"]) == 1 \
            else "/".join(row["path"])
        lines.append(f"{where}: {gain}, {dominant_bound(row) or 'unknown'}-bound")
    return lines
