"""OpGraph -> Graphviz DOT, SVG (Graphviz's `dot`, when installed) or JSON."""

from __future__ import annotations

import shutil
import subprocess

from traceview.errors import UserError
from traceview.graph.neighbourhood import OpGraph
from traceview.render.charts import BOUND_COLOURS
from traceview.units import fmt_time_us

NOT_MEASURED = "#ffffff"
DOT_TIMEOUT_S = 60


def _q(text: object) -> str:
    """A DOT double-quoted string: names from a trace can hold quotes, backslashes, newlines."""
    s = str(text).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + s.replace("\r", " ").replace("\n", "\\n") + '"'


def _tint(hex_colour: str) -> str:
    """A light fill of a bound colour (text stays readable)."""
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return "#{:02x}{:02x}{:02x}".format(*(int(c + (255 - c) * 0.6) for c in (r, g, b)))


def graph_json(graph: OpGraph) -> dict:
    """``traceview graph --format json``: the focus, its nodes (every field) and edges (operand -> user)."""
    return {"module": graph.module, "program_id": graph.program_id, "focus": graph.focus,
            "truncated": graph.truncated,
            "nodes": [vars(n) for n in graph.nodes.values()],
            "edges": [{"from": a, "to": b} for a, b in graph.edges]}


def to_dot(graph: OpGraph) -> str:
    lines = ["digraph hlo {", "  rankdir=TB;", '  node [shape=box, style="rounded,filled", fontname="Helvetica", '
             'fontsize=10];', '  edge [color="#555555", arrowsize=0.6];']
    clusters: dict[str, list[str]] = {}
    for node in graph.nodes.values():
        label = [node.name, f"{node.opcode}  {node.shape}"]
        if node.bound:
            label.append(f"{node.bound}-bound")
        if node.time_us is not None:
            label.append(f"time {fmt_time_us(node.time_us)}")
        if node.gain_us is not None:
            label.append(f"gain {fmt_time_us(node.gain_us)}")
        colour = BOUND_COLOURS.get(node.bound or "", None)
        fill = _tint(colour) if colour else NOT_MEASURED
        border = colour or "#999999"
        width = "3" if node.focus else "1"
        text = (f"  {_q(node.id)} [label={_q(chr(10).join(label))}, fillcolor={_q(fill)}, color={_q(border)}, "
                f"penwidth={width}, tooltip={_q(node.id)}];")
        if node.fused_in:
            clusters.setdefault(node.fused_in, []).append(text)
        else:
            lines.append(text)
    for i, (fusion, members) in enumerate(clusters.items()):
        name = graph.nodes[fusion].name if fusion in graph.nodes else fusion
        lines.append(f"  subgraph cluster_{i} {{")
        lines.append(f'    label={_q("inside " + name)}; style=dashed; color="#888888"; fontsize=10;')
        lines.extend("  " + m for m in members)
        lines.append("  }")
    for a, b in graph.edges:
        lines.append(f"  {_q(a)} -> {_q(b)};")
    if graph.truncated:
        lines.append('  truncated [shape=note, label="graph truncated: too many nodes", fillcolor="#ffffff"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_svg(dot_text: str) -> str:
    """Graphviz's rendering of the DOT text; a UserError saying how to get `dot` when it is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        raise UserError("--format svg needs Graphviz's `dot` program, which is not installed "
                        "(Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz); "
                        "--format dot or json work without it")
    try:
        done = subprocess.run([exe, "-Tsvg"], input=dot_text.encode(), capture_output=True,
                              timeout=DOT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise UserError(f"Graphviz `dot` took more than {DOT_TIMEOUT_S} s: try a smaller --depth") from None
    if done.returncode != 0:
        raise UserError(f"Graphviz `dot` failed: {done.stderr.decode(errors='replace').strip()[:300]}")
    return done.stdout.decode()
