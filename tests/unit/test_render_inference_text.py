"""The inference report in words: one step is "1 step", and the projection says which of its rows is the
critical batch (206.04 sequences shows as the batch 207) and which fills HBM."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from traceview.render.inference import inference_text, section_lines


def _phase(rng: random.Random, name: str, steps: int) -> SimpleNamespace:
    program = SimpleNamespace(weight_bytes=1 << 30, kv_cache_bytes=1 << 31, paging=None)
    return SimpleNamespace(phase=name, module=f"jit_{name}", steps=steps, batch=16, tokens_per_step=16,
                           step_time_us=rng.uniform(100, 5e4), floor_us=50.0, floor_bound="memory", efficiency=0.5,
                           tokens_per_s_per_chip=1e4, program=program, flops=1e9, time_per_output_token_us=None,
                           recognised_by=["a KV cache updated in place"], reasons={})


def _report(rng: random.Random, steps: list[int], critical: float, max_sequences: int) -> SimpleNamespace:
    crit = SimpleNamespace(batch=critical, peak_flops=9.89e14, bytes_per_weight=2.0, hbm_bandwidth=4.8e12,
                           verdict=None, with_kv_cache=None, with_kv_cache_reason="memory-bound at any batch")
    sizes = sorted({16, 32, 64, math.ceil(critical), max_sequences})
    projection = [SimpleNamespace(batch=b, floor_us=1.0 * b, floor_bound="memory", step_time_us=2.0 * b,
                                  tokens_per_s_per_chip=1e3, floor_tokens_per_s=2e3, hbm_bytes=float(b << 20))
                  for b in sizes]
    return SimpleNamespace(phases=[_phase(rng, n, s) for n, s in zip(("prefill", "decode"), steps)],
                           critical=crit, critical_batch=critical, kv_bytes_per_token=65536.0,
                           max_sequences=max_sequences, reasons={}, projection=projection, target=None,
                           projected=False, warnings=[])


@pytest.mark.parametrize("seed", range(4))
def test_one_step_is_one_step(seed: int) -> None:
    """h200 decode: "prefill jit_prefill: 1 steps, batch 16"."""
    rng = random.Random(seed)
    many = rng.randint(2, 99)
    lines = section_lines(_report(rng, [1, many], 206.04, 1042))
    assert lines[0].startswith("prefill jit_prefill: 1 step, batch 16")
    assert lines[1].startswith(f"decode jit_decode: {many} steps, batch 16")


@pytest.mark.parametrize("seed", range(4))
def test_the_projection_marks_the_critical_batch_and_the_hbm_limit(seed: int) -> None:
    rng = random.Random(seed)
    critical = rng.uniform(70, 500)
    fills = rng.randint(600, 2000)
    text = inference_text(_report(rng, [1, 48], critical, fills))
    assert f"Critical batch: {critical:,.0f} sequences" in text
    assert f"{math.ceil(critical)} (critical)" in text and f"{fills} (fills HBM)" in text
    assert "32 (" not in text
