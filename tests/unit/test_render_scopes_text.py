"""The scopes view in words: a program alone in "Where in the model" says it stands for the program's ops in
no named scope; an efficiency above 100% is explained above the table."""

from __future__ import annotations

import random

import pandas as pd
import pytest

from traceview.render.scopes import scopes_text, top_scope_lines
from traceview.scopes.tree import NODE_COLUMNS, ScopeTree


def _nodes(rows: list[dict]) -> pd.DataFrame:
    full = [{**dict.fromkeys(NODE_COLUMNS, 0.0), "text": None, **row, "depth": len(row["path"]),
             "name": row["path"][-1]} for row in rows]
    return pd.DataFrame(full, columns=NODE_COLUMNS).astype({"ops": "int64"})


def _random_tree(rng: random.Random, efficiencies: list[float]) -> ScopeTree:
    program = f"step{rng.randint(0, 99)}"
    rows = [{"path": (program,), "total_us": 1000.0, "self_us": 300.0, "self_gain_us": 200.0, "gain_us": 500.0,
             "self_wall_gain_us": 200.0, "wall_gain_us": 500.0, "efficiency": 0.4, "memory_us": 1000.0, "ops": 9}]
    for i, eff in enumerate(efficiencies):
        gain = rng.uniform(1, 150)
        rows.append({"path": (program, f"layer_{i}"), "total_us": 100.0, "self_us": 100.0, "self_gain_us": gain,
                     "gain_us": gain, "self_wall_gain_us": gain, "wall_gain_us": gain, "efficiency": eff,
                     "compute_us": 100.0, "ops": 1})
    return ScopeTree(by="scope", nodes=_nodes(rows), op_paths=pd.Series(dtype=object), total_us=1000.0,
                     unattributed_us=0.0, judged=True)


@pytest.mark.parametrize("seed", range(5))
def test_a_program_alone_is_named_as_its_ops_in_no_scope(seed: int) -> None:
    """te_fused_attn: "loss_fn: 6.175 ms to gain" under "scopes with most to gain" reads as a scope holding the
    program's whole gain; it is the program's ops outside any named scope (advice leaves it out as no place)."""
    rng = random.Random(seed)
    tree = _random_tree(rng, [rng.uniform(0.1, 0.9) for _ in range(3)])
    lines = top_scope_lines(tree.top_by_gain(4), tree.total_us)
    program = tree.nodes["path"][0][0]
    own = [line for line in lines if line.startswith(f"{program} ")]
    assert own and own[0].startswith(f"{program} (the program's ops in no named scope): 200.00 us to gain")
    assert all(line.startswith(f"{program}/layer_") for line in lines if line not in own)


@pytest.mark.parametrize("markdown", [False, True])
def test_an_efficiency_above_100_percent_is_explained(markdown: bool) -> None:
    """h200 train: loss/take_along_axis 246.4% with nothing to say why (analyze warns, scopes did not)."""
    rng = random.Random(4)
    over = rng.uniform(1.05, 3.0)
    text = scopes_text(_random_tree(rng, [0.5, over, 0.7]), markdown=markdown)
    head = text.split("| scope" if markdown else "scope ", 1)[0]
    assert "efficiency above 100% (" in head and "/layer_1)" in head and "/layer_0" not in head
    assert f"{100 * over:.1f}%" in text.replace("\\", "")
    assert "efficiency above 100%" not in scopes_text(_random_tree(rng, [0.5, 0.9]), markdown=markdown)
