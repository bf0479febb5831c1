"""The scope tree (traceview scopes) against the op_name metadata read straight from the sample's HLO dump.

The reference never goes through traceview.scopes: a regex reads each instruction's op_name from XLA's
own text dump, the test strips the three wrappers the sample's op_names hold (jit, jvp, transpose), and
the times come from the raw op executions (Analysis.op_executions), not from the aggregated op table.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict

import pytest

import traceview
from traceview.cli import main

INSTRUCTION = re.compile(r'^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*\bmetadata=\{[^}]*?op_name="([^"]*)"', re.M)
WRAPPED = re.compile(r"^(jit|jvp|transpose)\((.*)\)$")


@pytest.fixture(scope="module")
def transformer(sample_traces):
    return traceview.load(sample_traces / "transformer")


def _dump_op_names(sample) -> dict[str, str]:
    dump = next((sample / "hlo").glob("*.cpu_after_optimizations.txt")).read_text()
    return {m.group(1): m.group(2) for m in INSTRUCTION.finditer(dump)}


def _reference_path(op_name: str) -> tuple[tuple[str, ...], str]:
    """(scopes below the program, pass) by hand: only the wrappers this sample's op_names hold."""
    paths, passes = [], set()
    for name in op_name.split(";"):
        parts = name.split("/")
        assert parts[0] == "jit(train_step)", name
        scopes, seen = [], set()
        for component in parts[1:-1]:
            while (m := WRAPPED.match(component)):
                seen.add(m.group(1))
                component = m.group(2)
            assert "(" not in component, f"a wrapper the reference does not know: {component}"
            if component != "main":
                scopes.append(component)
        paths.append(scopes)
        passes.add("backward" if "transpose" in seen else "forward" if "jvp" in seen else "other")
    common = []
    for names in zip(*paths):
        if len(set(names)) > 1:
            break
        common.append(names[0])
    return tuple(common), passes.pop() if len(passes) == 1 else "other"


def _reference_nodes(analysis, sample) -> tuple[dict, dict, float]:
    """node path -> summed self time (us), node path -> {pass: us}, unattributed us."""
    op_names = _dump_op_names(sample)
    times = analysis.op_executions.groupby("name")["self_time_us"].sum()
    totals, passes, unattributed = defaultdict(float), defaultdict(lambda: defaultdict(float)), 0.0
    for op, us in times.items():
        if not op_names.get(op):
            unattributed += us
            continue
        scopes, pass_ = _reference_path(op_names[op])
        path = ("train_step", *scopes)
        for k in range(1, len(path) + 1):
            totals[path[:k]] += us
            passes[path[:k]][pass_] += us
    return totals, passes, unattributed


def test_every_node_total_is_the_sum_of_its_ops_from_the_dump(transformer, sample_traces):
    expected, _, unattributed = _reference_nodes(transformer, sample_traces / "transformer")
    nodes = transformer.scopes()
    got = dict(zip(nodes["path"], nodes["total_us"]))
    assert set(got) == set(expected)
    for path, us in expected.items():
        assert got[path] == pytest.approx(us, rel=1e-9, abs=1e-6), path
    assert transformer.scope_tree().unattributed_us == pytest.approx(unattributed, abs=1e-6)
    # the sample has real nested named scopes, per layer
    assert {("train_step", "Transformer", f"layer_{i}", part) for i in (0, 1) for part in ("attn", "mlp")} <= set(got)
    assert ("train_step", "Transformer", "layer_0", "attn", "softmax") in got


def test_roots_plus_unattributed_are_the_device_op_time(transformer):
    tree = transformer.scope_tree()
    assert tree.total_us == pytest.approx(transformer.summary.op_time_us, rel=1e-12)
    roots = tree.nodes[tree.nodes["depth"] == 1]["total_us"].sum()
    assert roots + tree.unattributed_us == pytest.approx(tree.total_us, rel=1e-12)
    # a node's total is its own ops' time plus its children's totals
    nodes = tree.nodes
    for row in nodes.itertuples():
        children = nodes[(nodes["depth"] == row.depth + 1) & nodes["path"].map(lambda p, r=row: p[:-1] == r.path)]
        assert row.total_us == pytest.approx(row.self_us + children["total_us"].sum(), rel=1e-9, abs=1e-6)


def test_forward_and_backward_of_a_scope_merge_with_the_split_kept(transformer, sample_traces):
    op_names = set(_dump_op_names(sample_traces / "transformer").values())
    assert any("/jvp(Transformer)/layer_0/attn/" in n for n in op_names)               # forward
    assert any("/transpose(jvp(Transformer))/layer_0/attn/" in n for n in op_names)    # backward
    _, passes, _ = _reference_nodes(transformer, sample_traces / "transformer")
    nodes = transformer.scopes().set_index("path")
    attn = nodes.loc[[("train_step", "Transformer", "layer_0", "attn")]].iloc[0]
    assert attn["forward_us"] > 0 and attn["backward_us"] > 0 and attn["other_us"] == 0
    assert attn["forward_us"] + attn["backward_us"] == pytest.approx(attn["total_us"], rel=1e-9)
    for path, split in passes.items():
        for pass_, us in split.items():
            assert nodes.loc[[path]].iloc[0][f"{pass_}_us"] == pytest.approx(us, rel=1e-9, abs=1e-6)
    sgd = nodes.loc[[("train_step", "sgd")]].iloc[0]          # the update is outside value_and_grad
    assert sgd["other_us"] == pytest.approx(sgd["total_us"]) and sgd["forward_us"] == 0


def test_gain_bound_and_efficiency_add_up_from_the_ops(transformer):
    ops = transformer.ops
    tree = transformer.scope_tree()
    root = tree.nodes.iloc[0]
    assert root["gain_us"] == pytest.approx(ops["gain_us"].sum(), rel=1e-9)
    assert sum(root[f"{b}_us"] for b in ("compute", "memory", "communication", "unknown")) == \
        pytest.approx(root["total_us"], rel=1e-9)
    assert root["flops"] == pytest.approx(ops["flops"].sum(), rel=1e-9)
    judged = ops[ops["roofline_time_us"].notna()]
    assert root["efficiency"] == pytest.approx(judged["roofline_time_us"].sum() / judged["judged_time_us"].sum(),
                                               rel=1e-9)


def test_by_source_line_gives_the_line_text_and_function(transformer, sample_traces):
    from traceview.scopes.source import is_line

    nodes = transformer.scopes("source")
    lines = nodes[nodes["path"].map(is_line)]
    assert len(lines) > 5
    capture = (sample_traces / "capture.py").read_text().splitlines()
    for row in lines.itertuples():
        if row.path[0].endswith("sample_traces/capture.py"):
            number = int(row.path[-1])
            assert row.text == capture[number - 1].strip()[:240]
            if len(row.path) == 3:     # the function: the nearest enclosing def in the file itself
                defs = [re.match(r"\s*def (\w+)", line) for line in capture[:number]]
                enclosing = [m.group(1) for m in defs if m][-1]
                named = [part for part in row.path[1].split(".") if not part.startswith("<")]   # not <genexpr>
                assert named[-1] == enclosing, (row.path, enclosing)
    functions = {p[1] for p in lines["path"] if len(p) == 3}
    assert {"build_transformer.<locals>.mlp", "build_transformer.<locals>.attention"} <= functions
    files = nodes[nodes["depth"] == 1]["total_us"].sum()
    assert files + transformer.scope_tree("source").unattributed_us == \
        pytest.approx(transformer.summary.op_time_us, rel=1e-12)


def test_cli_formats_and_schema(sample_traces, capsys, transformer):
    path = str(sample_traces / "transformer")
    assert main(["scopes", path, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    from traceview.config.files import schema

    pytest.importorskip("jsonschema").validate(out, schema("scopes"))
    assert out["by"] == "scope" and out["attributed_share"] == pytest.approx(1.0)
    assert sum(n["total_us"] for n in out["nodes"] if len(n["path"]) == 1) + out["unattributed_us"] == \
        pytest.approx(out["total_us"], rel=1e-12)
    assert main(["scopes", path, "--format", "json", "--depth", "2"]) == 0
    assert max(len(n["path"]) for n in json.loads(capsys.readouterr().out)["nodes"]) == 2
    assert main(["scopes", path, "--format", "csv", "--by", "source"]) == 0
    csv = capsys.readouterr().out
    assert csv.splitlines()[0].startswith("path,depth,name,self_us,total_us")
    assert main(["scopes", path, "--format", "markdown"]) == 0
    assert "| train_step |" in capsys.readouterr().out.replace("\\_", "_")
    assert main(["scopes", path]) == 0
    assert "layer_1" in capsys.readouterr().out
    assert main(["scopes", path, "--depth", "0"]) == 2


def test_analyze_names_the_scopes_with_most_gain_in_every_format(transformer, sample_traces, capsys):
    top = transformer.to_json()["summary"]["top_scopes"]
    assert len(top) == 3
    gains = [t["self_gain_us"] for t in top]
    assert gains == sorted(gains, reverse=True)
    best = transformer.scopes().sort_values("self_gain_us", ascending=False).iloc[0]
    assert tuple(top[0]["path"]) == best["path"]
    assert main(["analyze", str(sample_traces / "transformer")]) == 0
    assert "/".join(top[0]["path"]) in capsys.readouterr().out
    assert main(["analyze", str(sample_traces / "transformer"), "--format", "markdown"]) == 0
    assert "Where in the model" in capsys.readouterr().out


def test_without_a_target_bound_and_gain_are_null(sample_traces):
    analysis = traceview.load(sample_traces / "transformer")
    from traceview.analysis.build import build_analysis
    from traceview.render.scopes import scopes_json
    from traceview.scopes import build_scopes

    pipeline = build_analysis(analysis.pipeline.profile)
    pipeline.judged = None         # as for a trace whose chip is not known
    record = scopes_json(build_scopes(pipeline))
    assert all(n["gain_us"] is None and n["time_by_bound_us"] is None for n in record["nodes"])
    assert any("no target chip" in w for w in record["warnings"])


@pytest.mark.parametrize("trace", ["openxla-xprof/tpu_inference_2.xplane.pb",
                                   "AMD-AGI-TraceLens/jax08_attention/tw003.xplane.pb",
                                   "AMD-AGI-TraceLens/te_fused_attn/934987a2fc2f.xplane.pb"])
def test_real_traces_give_trees_with_the_attributed_share(shared_traces, trace):
    analysis = traceview.load(shared_traces / trace)
    tree = analysis.scope_tree()
    assert len(tree.nodes) >= 1
    share = tree.attributed_share
    assert share is not None and 0 < share <= 1
    roots = tree.roots["total_us"].sum()
    assert roots + tree.unattributed_us == pytest.approx(tree.total_us, rel=1e-9)
    assert tree.total_us == pytest.approx(analysis.summary.op_time_us, rel=1e-9)
    if share < 1:
        assert any("unattributed" in w for w in tree.warnings)
    assert math.isclose(tree.total_us * share, roots, rel_tol=1e-9)


def test_projected_onto_another_chip_efficiency_is_against_the_projected_times(transformer):
    projected = transformer.retarget("tpu-v5p")
    ops = projected.ops
    judged = ops[ops["roofline_time_us"].notna()]
    tree = projected.scope_tree()
    root = tree.nodes.iloc[0]
    assert root["efficiency"] == pytest.approx(judged["roofline_time_us"].sum() / judged["projected_time_us"].sum(),
                                               rel=1e-9)
    assert root["gain_us"] == pytest.approx(ops["gain_us"].sum(), rel=1e-9)
    assert root["total_us"] == pytest.approx(transformer.scope_tree().nodes.iloc[0]["total_us"])   # measured
    assert any("projected onto tpu-v5p" in w for w in tree.warnings)


def test_no_ops_and_no_metadata_give_an_empty_tree_not_an_error(transformer):
    import dataclasses

    from traceview.render.scopes import scopes_csv, scopes_json, scopes_text
    from traceview.scopes import build_scopes

    empty = build_scopes(dataclasses.replace(transformer.pipeline, ops=transformer.pipeline.ops.iloc[:0]))
    assert empty.nodes.empty and empty.total_us == 0 and empty.attributed_share is None
    assert scopes_json(empty)["nodes"] == [] and "no attributed ops" in scopes_text(empty)
    bare = transformer.pipeline.ops.assign(op_name="")
    tree = build_scopes(dataclasses.replace(transformer.pipeline, ops=bare))
    assert tree.nodes.empty and tree.unattributed_us == pytest.approx(tree.total_us) and tree.attributed_share == 0
    assert any(f"{len(bare)} ops (100.0% of op time) have no op_name metadata" in w for w in tree.warnings)
    assert scopes_csv(tree).startswith("path,")
    # one op without metadata is "1 op ... has", not "1 ops ... have"
    one = transformer.pipeline.ops.copy()
    one.loc[one.index[0], "op_name"] = ""
    warned = [w for w in build_scopes(dataclasses.replace(transformer.pipeline, ops=one)).warnings if "op_name" in w]
    assert len(warned) == 1 and warned[0].startswith("1 op (") and " has no op_name metadata" in warned[0]


def test_a_real_gpu_training_step_merges_forward_and_backward(shared_traces):
    """Transformer Engine fused attention on an AMD MI355X-class GPU: value_and_grad of loss_fn."""
    tree = traceview.load(shared_traces / "AMD-AGI-TraceLens/te_fused_attn/934987a2fc2f.xplane.pb").scope_tree()
    both = tree.nodes[(tree.nodes["forward_us"] > 0) & (tree.nodes["backward_us"] > 0)]
    assert not both.empty
    for row in both.itertuples():
        assert row.forward_us + row.backward_us + row.other_us == pytest.approx(row.total_us, rel=1e-9)
