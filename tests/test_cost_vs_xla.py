"""traceview's module totals against XLA's own HloCostAnalysis (``compiled.cost_analysis()``).

The corpus (tests/corpus.py) is compiled on the CPU in a subprocess with 8 host
devices; each optimized module is parsed from ``compiled.as_text()`` and its
totals must match XLA's within 1% (FLOPs, transcendentals) and 2% (bytes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

from traceview.cost import instruction_costs, module_totals  # noqa: E402
from traceview.parsers.hlo_text import parse_hlo_text  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402

PROGRAM_NAMES = [p.name for p in corpus.PROGRAMS]


@pytest.fixture(scope="session")
def xla_corpus(tmp_path_factory) -> dict[str, dict]:
    """name -> {hlo_text, flops, transcendentals, bytes_accessed}, compiled by XLA in a subprocess."""
    out = tmp_path_factory.mktemp("corpus") / "corpus.json"
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + corpus.DEVICE_FLAG).strip())
    proc = subprocess.run([sys.executable, str(Path(corpus.__file__)), "--json", str(out)], env=env,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"compiling the corpus failed:\n{proc.stderr[-3000:]}")
    data = json.loads(out.read_text())
    return {p["name"]: p for p in data["programs"]}


def _rel(ours: float, ref: float) -> float:
    return abs(ours - ref) / max(abs(ref), 1.0)


@pytest.mark.slow
@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_module_totals_match_xla(xla_corpus, name):
    ref = xla_corpus.get(name)
    if ref is None:
        pytest.skip(f"{name} needs more host devices than the subprocess had")
    module = parse_hlo_text(ref["hlo_text"], f"{name}.after_optimizations.txt")
    totals = module_totals(module)
    if ref["flops"] < 0 or ref["bytes_accessed"] < 0:
        # XLA reports -1 for a custom call it cannot see into; we must say "unknown", not invent a number.
        df = instruction_costs(module)
        assert df["unknown"].any(), f"{name}: XLA could not cost a custom call but we flagged nothing unknown"
        assert any("custom-call" in w for w in totals["warnings"])
        return
    assert _rel(totals["flops"], ref["flops"]) <= 0.01, (totals["flops"], ref["flops"])
    assert _rel(totals["transcendentals"], ref["transcendentals"]) <= 0.01, (
        totals["transcendentals"], ref["transcendentals"])
    assert _rel(totals["bytes_accessed"], ref["bytes_accessed"]) <= 0.02, (
        totals["bytes_accessed"], ref["bytes_accessed"])


@pytest.mark.slow
def test_instruction_rows_add_up_to_module(xla_corpus):
    """Without loops, the rows (the ops a trace shows) sum to the module total."""
    ref = xla_corpus["mlp_grad"]
    module = parse_hlo_text(ref["hlo_text"])
    df = instruction_costs(module)
    assert df["flops"].sum() == pytest.approx(ref["flops"], rel=0.01)
    assert df["bytes_accessed"].sum() == pytest.approx(ref["bytes_accessed"], rel=0.02)
    assert (df["multiplier"] == 1).all()


@pytest.mark.slow
def test_loop_multipliers_and_per_step(xla_corpus):
    """A scan of 10 steps: body rows get multiplier 10 (from known_trip_count); XLA counts the body once."""
    ref = xla_corpus["scan_rnn"]
    module = parse_hlo_text(ref["hlo_text"])
    df = instruction_costs(module)
    body = df[df["multiplier"] == 10]
    assert len(body) > 0 and (body["flops"] > 0).any()
    # The per-step figure counts the body 10 times: one recurrent matmul (2*8*32*32) per step at least.
    totals = module_totals(module)
    assert totals["flops_per_step"] >= 10 * 2 * 8 * 32 * 32
    assert totals["flops_per_step"] == pytest.approx(df["flops_per_step"].sum())
    # A while loop with a data-dependent end: NaN multiplier and a warning, never a made-up count.
    unknown = instruction_costs(parse_hlo_text(xla_corpus["while_unknown"]["hlo_text"]))
    assert unknown["multiplier"].isna().any()
    assert any("trip count" in w for w in unknown.attrs["warnings"])


def test_as_text_is_the_after_optimizations_dump(jax_hlo_dump):
    """``compiled.as_text()`` is the module XLA dumps as *after_optimizations.txt (same costs)."""
    dumped = sorted((jax_hlo_dump / "dump").glob("*jit_ops*after_optimizations.txt"))
    assert dumped, "XLA wrote no after_optimizations text for jit_ops"
    ours = module_totals(parse_hlo_text((jax_hlo_dump / "ops.as_text.txt").read_text()))
    theirs = module_totals(parse_hlo_text(dumped[0].read_text()))
    for key in ("flops", "transcendentals", "bytes_accessed"):
        assert ours[key] == theirs[key], key


@pytest.mark.slow
def test_fused_instruction_costs_add_up_to_the_fusion(xla_corpus):
    from traceview.cost import fused_instruction_costs

    module = parse_hlo_text(xla_corpus["layer_norm"]["hlo_text"])
    df = instruction_costs(module)
    fusions = df[df["opcode"] == "fusion"]
    assert len(fusions) > 0
    for _, fusion in fusions.iterrows():
        inside = fused_instruction_costs(module, fusion["name"])
        assert inside["flops"].sum() == fusion["flops"]
        assert inside["transcendentals"].sum() == fusion["transcendentals"]
