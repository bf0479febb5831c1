"""The analyze report's op table and headings: a module name several programs share is told apart on every
row of those programs; a trace with no gain for any op is not headed "by gain"; the Markdown blocks nest an
item's evidence and fix under it."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

import traceview
from traceview.render.analyze import Section, analysis_markdown, analysis_text


@pytest.fixture(scope="module")
def mlp(sample_traces):
    return traceview.load(sample_traces / "mlp").pipeline


def _table_rows(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Top "))
    return [line for line in lines[start + 3:] if line and not line.startswith("warning:")]


@pytest.mark.parametrize("seed", range(6))
def test_a_module_name_of_several_programs_is_told_apart_on_every_row(mlp, seed: int) -> None:
    """jax08_gemm: "jit_dot(49)  custom-call.1" beside "jit_dot  gemm_fusion_dot_general.1", which read as
    another program; each row of a shared name carries its program id, a name of one program none."""
    rng = random.Random(seed)
    ops = mlp.ops.head(rng.randint(6, min(12, len(mlp.ops)))).copy().reset_index(drop=True)
    n = len(ops)
    shared, alone = f"jit_{rng.choice(['dot', 'mm', 'f'])}{rng.randint(0, 9)}", f"jit_one{rng.randint(0, 9)}"
    programs = rng.sample(range(10, 900), 3)
    modules = [shared if i % 3 else alone for i in range(n)]
    ops["module"] = modules
    ops["program_id"] = [programs[1 + i % 2] if m == shared else programs[0] for i, m in enumerate(modules)]
    ops["op"] = [f"op_{i}_{rng.randint(0, 99)}" for i in range(n)]          # every (module, op) pair unique
    text = analysis_text(dataclasses.replace(mlp, ops=ops), top=n, colour_enabled=False)
    rows = _table_rows(text)
    assert len(rows) == n
    for row, module, program in zip(rows, ops["module"], ops["program_id"]):
        cell = row.split()[0]
        assert cell == (f"{module}({program})" if module == shared else module), row


def test_no_gain_for_any_op_is_ranked_by_self_time(mlp) -> None:
    """A TensorFlow trace has no HLO: no op has a roofline, every gain is unknown; "Top 20 ops by gain" over
    a column of "-" contradicts the table."""
    ops = mlp.ops.copy()
    ops["gain_ps"] = np.nan
    unknown = dataclasses.replace(mlp, ops=ops)
    text = analysis_text(unknown, colour_enabled=False)
    assert "ops by gain" not in text and "Top 20 ops by self time  (no op has a roofline time" in text
    markdown = analysis_markdown(unknown)
    assert "ops by gain" not in markdown and "### Top 20 ops by self time" in markdown
    assert "Top 20 ops by gain" in analysis_text(mlp, colour_enabled=False)


def test_markdown_nests_an_items_evidence_and_fix_and_heads_every_table(mlp) -> None:
    rng = random.Random(2)
    lines = []
    for i in range(1, rng.randint(3, 6)):
        lines += [f"{i}. [op] op fusion.{rng.randint(0, 99)}: saves up to {rng.random():.3f} ms",
                  f"   measured {rng.random():.3f} ms", f"   fix: fuse it ({i})"]
    markdown = analysis_markdown(mlp, sections=[Section("What to fix first", tuple(lines))])
    block = markdown.split("### What to fix first\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(block) == len(lines)
    for shown, line in zip(block, lines):
        nested = line.startswith(" ")
        assert shown.startswith("  - " if nested else "- ") and line.strip().split()[-1].rstrip(")") in shown
    assert "### Devices" in markdown and "### Steps" in markdown


def test_columns_no_op_fills_are_left_out(mlp) -> None:
    """GPU-multi-worker (TensorFlow, no HLO): an empty module column and seven columns of "-" on every row."""
    rng = random.Random(4)
    ops = mlp.ops.head(rng.randint(3, 8)).copy()
    ops["module"] = ""
    for column in ("gain_ps", "gap_ps", "roofline_time_ps", "efficiency", "flops", "bytes_accessed", "dtype",
                   "category"):
        ops[column] = np.nan if column != "dtype" and column != "category" else None
    text = analysis_text(dataclasses.replace(mlp, ops=ops), colour_enabled=False)
    header = next(line for line in text.splitlines() if " count " in line)
    assert header.split() == ["op", "count", "self", "%", "op", "time", "bound", "judged"]
    full = next(line for line in analysis_text(mlp, colour_enabled=False).splitlines() if " count " in line)
    for column in ("module", "category", "roofline", "eff.", "gap", "gain", "FLOPs", "bytes", "dtype"):
        assert f" {column} " in f" {full} "
