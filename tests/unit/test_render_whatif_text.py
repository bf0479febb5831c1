"""The what-if table: tokens per second in plain digits, no "-0.0%", MFU as analyze writes it, and no
column that no config knows (its reason said once under the table)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from traceview.render.whatif import whatif_markdown, whatif_text


def _projection(rng: random.Random, batch: float, step_ps: float, tokens: float | None, fits: bool | None,
                mfu: float) -> SimpleNamespace:
    config = SimpleNamespace(mesh={"expert": 8}, batch=batch, chip=SimpleNamespace(name="cpu"), chips=8, label="")
    return SimpleNamespace(config=config, step_ps=step_ps, step_reason="", tokens_per_s_per_chip=tokens, mfu=mfu,
                           bound="memory", memory_per_chip_bytes=float(rng.randint(1, 1 << 30)), fits=fits,
                           crossovers=[], dominant_change=None, notes=[])


def _report(rng: random.Random, tokens: list[float | None], fits: list[bool | None], mfu: float = 0.005,
            today_ps: float = 7.123e9) -> SimpleNamespace:
    projections = [_projection(rng, 256 * 2**i, today_ps * (0.5 + i / 2) if i != 1 else today_ps - 0.4, t, f, mfu)
                   for i, (t, f) in enumerate(zip(tokens, fits))]
    today = SimpleNamespace(mesh={"expert": 8}, batch=512.0, chips=8, chip="cpu", step_ps=today_ps, mfu=mfu,
                            memory_per_chip_bytes=1 << 20)
    return SimpleNamespace(today=today, projections=projections, assumptions=["same kernels"], warnings=[])


def _rows(text: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("rank"))
    return [line.split("  ") for line in lines[start + 2:] if line[:4].strip().isdigit()]


@pytest.mark.parametrize("seed", range(5))
def test_tokens_per_second_are_plain_digits_and_no_change_is_plus_zero(seed: int) -> None:
    """moe sample: "5899", "8985", "1.217e+04" down one column, and "-0.0%" for today's own config."""
    rng = random.Random(seed)
    tokens = [rng.uniform(1_000, 9_999), rng.uniform(10_000, 99_999), rng.uniform(100_000, 10**7)]
    text = whatif_text(_report(rng, tokens, [True, True, False]))
    assert "e+0" not in text and "-0.0%" not in text and "+0.0%" in text
    for value in tokens:
        assert f"{value:,.0f}" in text


def test_mfu_keeps_its_digits_when_tiny() -> None:
    """TPU inference: analyze says MFU 0.00049%, what-if said 0.0% on every row."""
    rng = random.Random(1)
    text = whatif_text(_report(rng, [1.0, 2.0, 3.0], [True] * 3, mfu=4.9e-6))
    assert "MFU 0.00049%" in text and " 0.0% " not in text


@pytest.mark.parametrize("markdown", [False, True])
def test_columns_no_config_knows_are_left_out_with_their_reason(markdown: bool) -> None:
    """Batch not read in tokens and a CPU with no capacity: "?" in every row of two columns."""
    rng = random.Random(2)
    render = whatif_markdown if markdown else whatif_text
    text = render(_report(rng, [None] * 3, [None] * 3))
    header = next(line for line in text.splitlines() if "rank" in line and "mesh" in line)
    assert "tokens/s/chip" not in header and "fits" not in header
    assert "tokens/s/chip: unknown for every config" in text and "fits: unknown for every config" in text
    partly = render(_report(rng, [None, 5.0, None], [None, True, None]))
    header = next(line for line in partly.splitlines() if "rank" in line and "mesh" in line)
    assert "tokens/s/chip" in header and "fits" in header and "unknown for every config" not in partly
