"""The book's arithmetic from MaxText's reference HLO (../shared/traces/AI-Hypercomputer-maxtext; v6e-4, FSDP,
per_device_batch_size=1, max_target_length=128 in MaxText's hlo_diff_test), as far as the dumps carry shapes.

The dumps are cut to 2,000 lines without their ENTRY: the layer's weights are there (each FSDP all-gather
gathers one whole), the layer count and the vocabulary are not. References: the models' published configs
(Llama-3 8B: hidden 4096, intermediate 14336, 32 heads, 8 K/V heads, head_dim 128, 32 layers, vocabulary
128,256, 8.03e9 parameters; Qwen3 1.7B: hidden 2048, intermediate 6144, 16 heads, 8 K/V heads, head_dim 128)
and the book's per-layer count 3 D F + 2 D N H + 2 D K H (chapter 6).
"""

from __future__ import annotations

import pytest

from traceview.hardware.database import get_chip, load_hardware
from traceview.parallelism.diagnose import from_hlo
from traceview.whatif.describe import plan
from traceview.whatif.layer import layer_shapes


@pytest.fixture(scope="module")
def v6e():
    return get_chip("tpu-v6e", load_hardware(None))


@pytest.mark.parametrize("model, d, f, n, k, h", [("llama3_8b", 4096, 14336, 32, 8, 128),
                                                  ("qwen3_1.7b", 2048, 6144, 16, 8, 128)])
def test_the_layer_of_a_dump(shared_traces, v6e, model, d, f, n, k, h):
    report = from_hlo(shared_traces / "AI-Hypercomputer-maxtext" / f"reference_hlo_{model}.txt", v6e)
    layer = layer_shapes(report)
    assert (layer.d_model, layer.d_ff, layer.heads, layer.kv_heads, layer.head_dim) == (d, f, n, k, h)
    assert layer.params == 3 * d * f + 2 * d * n * h + 2 * d * k * h and layer.gated


def test_llama3_8b_from_its_dump_against_the_book(shared_traces, v6e):
    report = from_hlo(shared_traces / "AI-Hypercomputer-maxtext" / "reference_hlo_llama3_8b.txt", v6e)
    spec = layer_shapes(report).spec(layers=32, vocab=128256)       # what the cut dump does not carry
    fsdp = next(a for a in report.axes if a.role.role == "fsdp")
    batch = report.per_chip_tokens.value * fsdp.size                  # 128 tokens per chip x 4 chips
    run = plan(spec, {"fsdp": fsdp.size}, v6e, batch)
    assert run.params == pytest.approx(8.03e9, rel=0.01)
    assert run.flops_per_token == pytest.approx(6 * 8.03e9, rel=0.01)
    assert run.param_bytes == pytest.approx(2 * 8.03e9, rel=0.01) and run.optimizer_bytes == pytest.approx(8 * 8.03e9,
                                                                                                           rel=0.01)
    (rule,) = run.crossovers
    # the same rule, figures and verdict as the parallelism view's (B/X against C/W on one v6e ICI axis)
    assert rule.value == fsdp.verdict.value == 128
    assert rule.threshold == pytest.approx(fsdp.verdict.threshold)
    assert rule.compute_bound is False and fsdp.verdict.verdict == "communication-bound"


def test_a_layer_that_is_not_the_books_is_not_guessed(shared_traces, v6e):
    """DeepSeek-3's MLA attention and experts are not the book's layer: no shapes rather than wrong ones."""
    report = from_hlo(shared_traces / "AI-Hypercomputer-maxtext" / "reference_hlo_deepseek3.txt", v6e)
    assert layer_shapes(report) is None
