"""Model: device time along the model's named scopes, as an icicle coloured by the bound that holds it.

Width = op time; colour = the dominant bound; hover gives total/self time, gain,
efficiency and the forward/backward split. Clicking a node (or picking it in the
box) lists its ops; selecting one makes it Op detail's op. Below, the hottest
source lines with their text.
The numbers are the records of `traceview scopes --format json`, so the page and the CLI agree.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from traceview.dashboards import selection
from traceview.dashboards.data import View
from traceview.render.charts import BOUND_COLOURS
from traceview.render.parallelism import md
from traceview.scopes.source import is_line
from traceview.scopes.tree import dominant_bound
from traceview.units import fmt_pct, fmt_time_us

# The bounds' colours of every other chart (render.charts); grey where no bound is known.
SCOPE_COLOURS: dict[str | None, str] = {None: "#d9d9d9"}
SCOPE_COLOURS.update(BOUND_COLOURS)
MAX_NODES = 2000          # the icicle draws the largest nodes; the table and the CLI have them all
PICK = "tv_model_scope"


def plain(text: object) -> str:
    """A name from a trace as literal text in Plotly, which reads a subset of HTML (<b>, <br>, <a href>)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _gain_text(row: dict, judged: bool) -> str:
    """A node's gain in op time and, beside it, in wall time (never more than the busy time: docs/scopes.md)."""
    if not judged:
        return "gain unknown"
    return f"gain {fmt_time_us(row['gain_us'])} of op time ({fmt_time_us(row['wall_gain_us'])} of wall time)"


def icicle(nodes: pd.DataFrame, judged: bool) -> go.Figure:
    """The scope tree as a Plotly icicle (ids are the "/"-joined paths; what is shown goes through `plain`)."""
    nodes = nodes.nlargest(MAX_NODES, "total_us") if len(nodes) > MAX_NODES else nodes
    ids = ["/".join(p) for p in nodes["path"]]
    kept = set(ids)
    parents = ["/".join(p[:-1]) if len(p) > 1 and "/".join(p[:-1]) in kept else "" for p in nodes["path"]]
    bounds = [dominant_bound(r) if judged else None for r in nodes.to_dict("records")]
    hover = [f"<b>{plain(i)}</b><br>{fmt_time_us(r['total_us'])} total, {fmt_time_us(r['self_us'])} own ops<br>"
             f"{_gain_text(r, judged)}, "
             f"efficiency {fmt_pct(r['efficiency']) if judged else 'unknown'}, {b or 'not judged'}<br>"
             f"forward {fmt_time_us(r['forward_us'])}, backward {fmt_time_us(r['backward_us'])}, "
             f"other {fmt_time_us(r['other_us'])}<br>{int(r['ops'])} ops"
             for i, r, b in zip(ids, nodes.to_dict("records"), bounds)]
    figure = go.Figure(go.Icicle(
        ids=ids, labels=[plain(n) for n in nodes["name"]], parents=parents, values=nodes["total_us"].tolist(),
        branchvalues="total", marker={"colors": [SCOPE_COLOURS[b] for b in bounds]},
        customdata=hover, hovertemplate="%{customdata}<extra></extra>",
        tiling={"orientation": "v"}, root={"color": "#ffffff"}))
    figure.update_layout(margin={"t": 10, "l": 10, "r": 10, "b": 10}, height=460)
    return figure


def _ops_of(view: View, path: tuple[str, ...]) -> pd.DataFrame:
    tree = view.result.scope_tree()
    ops = view.analysis.ops[tree.under(path)]
    columns = [c for c in ("module", "op", "op_name", "self_time_ps", "gain_ps", "bound") if c in ops.columns]
    table = ops[columns].sort_values("self_time_ps", ascending=False)
    return table.assign(self_time_us=table["self_time_ps"] / 1e6, gain_us=table.get("gain_ps", 0) / 1e6) \
        .drop(columns=[c for c in ("self_time_ps", "gain_ps") if c in table.columns])


def _clicked(event) -> str | None:
    """The id ("/"-joined path) of the icicle node a click selected, if any."""
    points = getattr(getattr(event, "selection", None), "points", None) or []
    for point in points:
        node = point.get("id") if isinstance(point, dict) else None
        if isinstance(node, str):
            return node
    return None


def _legend() -> str:
    return " ".join(f"<span style='color:{c}'>■</span> {b}" for b, c in SCOPE_COLOURS.items() if b)


def render(view: View) -> None:
    tree = view.result.scope_tree()
    share = tree.attributed_share
    st.markdown(f"**{fmt_time_us(tree.total_us)}** of op time by named scope: **{fmt_pct(share)}** attributed, "
                f"{fmt_time_us(tree.unattributed_us)} with no op_name metadata.")
    if tree.nodes.empty:
        st.info("No op carries op_name metadata: nothing to place in the model.")
        return
    st.markdown("Colour: the bound holding most of a scope's time. " + _legend(), unsafe_allow_html=True)
    event = st.plotly_chart(icicle(tree.nodes, tree.judged), width="stretch", key="tv_model_icicle",
                            on_select="rerun", selection_mode="points")
    labels = {"/".join(p): p for p in tree.nodes["path"]}
    clicked = _clicked(event)
    memo = "_tv_model_clicked"
    if clicked is not None and clicked in labels and st.session_state.get(memo) != clicked:    # a new click, not a stale one
        st.session_state[PICK] = clicked
    st.session_state[memo] = clicked
    top = tree.top_by_gain(1)
    default = "/".join(top["path"].iloc[0]) if not top.empty else next(iter(labels))
    if st.session_state.get(PICK) not in labels:
        st.session_state[PICK] = default
    picked = str(st.selectbox("Scope", list(labels), key=PICK))
    ops = _ops_of(view, labels[picked])
    st.caption(f"{len(ops)} ops under {md(picked)}")
    picked_ops = st.dataframe(ops, width="stretch", hide_index=True, on_select="rerun",
                              selection_mode="single-row", key="tv_model_ops")
    rows = getattr(getattr(picked_ops, "selection", None), "rows", None) or []
    if rows:
        row = ops.iloc[rows[0]]
        selection.select_if_changed("model_ops", (str(row["module"]), str(row["op"])))
        st.caption(f"{md(row['op'])} is selected: open the Op detail tab to read it.")
    source = view.result.scope_tree("source")
    lines = source.nodes[source.nodes["path"].map(is_line)].nlargest(15, "total_us")
    if not lines.empty:
        st.subheader("Hottest source lines")
        st.dataframe(pd.DataFrame({
            "file": [p[0] for p in lines["path"]], "function": [p[1] if len(p) == 3 else "" for p in lines["path"]],
            "line": [int(p[-1]) for p in lines["path"]],
            "text": [t if isinstance(t, str) else "" for t in lines["text"]],
            "time": [fmt_time_us(t) for t in lines["total_us"]],
            "share": [fmt_pct(t / tree.total_us if tree.total_us else None) for t in lines["total_us"]],
            "gain (op time)": [fmt_time_us(g) if source.judged else "-" for g in lines["gain_us"]],
            "gain (wall)": [fmt_time_us(g) if source.judged else "-" for g in lines["wall_gain_us"]],
            "bound": [dominant_bound(r) or "-" if source.judged else "-" for r in lines.to_dict("records")]}),
            width="stretch", hide_index=True)
    for warning in tree.warnings:
        st.caption(f"warning: {md(warning)}")
