"""The graph viewer: edges checked against the HLO text, colours and labels from the analysis, DOT/SVG/JSON."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from traceview.cli import main
from traceview.graph.neighbourhood import Node, OpGraph, op_graph
from traceview.parsers.hlo.dump import load_hlo_modules
from traceview.render.graph import to_dot

REPO = Path(__file__).resolve().parents[2]
MLP = REPO / "sample_traces" / "mlp"

_COMP = re.compile(r"^(?:ENTRY )?%?(?P<name>[\w.\-]+) \(.*\{\s*$")
_INST = re.compile(r"^\s*(?:ROOT )?%(?P<name>[\w.\-]+) = .*? (?P<opcode>[\w\-]+)\((?P<args>[^)]*)\)")


def _text_edges(text: str) -> dict[str, set[tuple[str, str]]]:
    """(operand, user) pairs per computation, read straight off the HLO text with a regex."""
    edges: dict[str, set[tuple[str, str]]] = {}
    comp = None
    for line in text.splitlines():
        m = _COMP.match(line)
        if m:
            comp = m.group("name")
            edges[comp] = set()
            continue
        m = _INST.match(line)
        if m and comp:
            for arg in re.findall(r"%([\w.\-]+)", m.group("args")):
                edges[comp].add((arg, m.group("name")))
    return edges


def _mlp():
    dump = MLP / "hlo"
    texts = list(dump.glob("*cpu_after_optimizations.txt"))
    if not texts:
        pytest.skip("sample_traces/mlp has no after-optimizations HLO dump")
    modules, _ = load_hlo_modules(dump)
    return modules, _text_edges(texts[0].read_text())


@pytest.mark.parametrize("depth", [1, 2])
def test_edges_match_the_hlo_text(depth):
    modules, text_edges = _mlp()
    graph = op_graph(modules, "broadcast_maximum_fusion", depth=depth)
    entry = next(c for c in text_edges if c.startswith("main"))
    fused = "fused_computation.20"
    ours = {(a.split("/", 1)[1], b.split("/", 1)[1]) for a, b in graph.edges if a.startswith(entry + "/")}
    names = {n.name for n in graph.nodes.values() if n.computation == entry}
    # every edge of the text between two drawn nodes is drawn, and nothing else
    assert ours == {(a, b) for a, b in text_edges[entry] if a in names and b in names}
    # depth 1: exactly the operands and the users of the focus op
    if depth == 1:
        operands = {a for a, b in text_edges[entry] if b == "broadcast_maximum_fusion"}
        users = {b for a, b in text_edges[entry] if a == "broadcast_maximum_fusion"}
        assert names == operands | users | {"broadcast_maximum_fusion"}
    inside = {(a.split("/", 1)[1], b.split("/", 1)[1]) for a, b in graph.edges if a.startswith(fused + "/")}
    assert inside == text_edges[fused]


def test_trace_colours_and_labels(capsys):
    if not any(MLP.glob("plugins/profile/*/*.xplane.pb")):
        pytest.skip("sample_traces/mlp is not captured")
    assert main(["graph", str(MLP), "--op", "broadcast_maximum_fusion", "--format", "json"]) == 0
    graph = json.loads(capsys.readouterr().out)
    assert main(["analyze", str(MLP), "--format", "json"]) == 0
    ops = {o["name"]: o for o in json.loads(capsys.readouterr().out)["ops"]}
    focus = next(n for n in graph["nodes"] if n["focus"])
    assert focus["name"] == "broadcast_maximum_fusion"
    for node in graph["nodes"]:
        if node["fused_in"] is None and node["name"] in ops:
            assert node["bound"] == ops[node["name"]]["bound"]
            op = ops[node["name"]]
            judged = op.get("judged_time_us")
            assert node["time_us"] == (judged if judged is not None else op["self_time_us"])
            if op.get("gap_us") is not None:
                assert node["gain_us"] is not None and 0 <= node["gain_us"] <= op["gap_us"] + 1e-9
    assert main(["graph", str(MLP), "--op", "broadcast_maximum_fusion"]) == 0
    dot = capsys.readouterr().out
    assert dot.startswith("digraph") and f"{ops['broadcast_maximum_fusion']['bound']}-bound" in dot


def test_dot_escapes_hostile_names():
    graph = OpGraph(module="m", program_id=None, focus='c/a"b')
    graph.nodes['c/a"b'] = Node(id='c/a"b', name='a"b\\\n}', opcode="add", shape="f32[]", computation="c",
                                focus=True)
    dot = to_dot(graph)
    assert '"c/a\\"b"' in dot and "a\\\"b\\\\\\n}" in dot


def test_svg_with_graphviz_or_a_clear_message(capsys):
    modules_dir = MLP / "hlo"
    if not any(modules_dir.glob("*after_optimizations*")):
        pytest.skip("sample_traces/mlp has no HLO dump")
    code = main(["graph", str(modules_dir), "--op", "dot.1", "--format", "svg"])
    captured = capsys.readouterr()
    if shutil.which("dot"):
        assert code == 0 and "<svg" in captured.out and "dot.1" in captured.out
    else:
        assert code == 2 and "graphviz" in captured.err.lower()


def test_unknown_op_and_bad_depth(capsys):
    modules_dir = MLP / "hlo"
    if not any(modules_dir.glob("*after_optimizations*")):
        pytest.skip("sample_traces/mlp has no HLO dump")
    assert main(["graph", str(modules_dir), "--op", "no_such_op"]) == 2
    assert "no_such_op" in capsys.readouterr().err
    assert main(["graph", str(modules_dir), "--op", "dot.1", "--depth", "99"]) == 2
    assert "--depth" in capsys.readouterr().err


def test_svg_without_graphviz_says_how_to_get_it(monkeypatch):
    import traceview.render.graph as render
    from traceview.errors import UserError

    monkeypatch.setattr(render.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="apt-get install graphviz"):
        render.to_svg("digraph { a -> b }")


def test_gain_is_the_gap_capped_by_exposed_time():
    from traceview.graph.neighbourhood import gain_of

    assert gain_of({"gap_us": 5.0}) == 5.0
    assert gain_of({"gap_us": 5.0, "exposed_time_us": 2.0}) == 2.0     # mostly hidden async work
    assert gain_of({"gap_us": 5.0, "gain_us": 1.5}) == 1.5             # the analysis' own figure wins
    assert gain_of({"gap_us": None}) is None
