"""The memory report as text and Markdown: names escaped once (a Markdown table escapes its own cells), the
peak's time in the unit a person reads, no column that no row fills, and a "more" line kept out of a table."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from traceview.hostreduce.memory_peaks import HeldAtPeak
from traceview.memory.static import StaticBuffer
from traceview.render.escape import markdown_text
from traceview.render.memory import memory_text

MS = 10**9     # ps


def _name(rng: random.Random) -> str:
    return "jit_" + "_".join(rng.choice(["train", "_normal", "step", "dot", "x"]) for _ in range(rng.randint(1, 3)))


def _report(rng: random.Random, *, shapes: bool, held: int = 3, buffers: int = 3) -> SimpleNamespace:
    at_peak = [HeldAtPeak(size_bytes=rng.randint(1, 1 << 30), requested_bytes=None,
                          shape=f"f32[{rng.randint(1, 64)}]" if shapes else None, op=f"op_{i}_x",
                          region_type="output" if shapes else None, data_type=None, step=rng.randint(0, 5),
                          time_ps=None, address=None, kind="allocation") for i in range(held)]
    memory = SimpleNamespace(device=f"host_{rng.randint(0, 9)}/GPU_0_bfc", peak_bytes=1 << 30,
                             capacity_bytes=1 << 34, stack_bytes=0, heap_bytes=1 << 30, fragmentation=0.1,
                             peak_time_ps=rng.randint(2, 9) * 1000 * MS, step=1, at_peak=at_peak)
    module = SimpleNamespace(name=_name(rng), program_id=rng.randint(1, 999), peak_bytes=1 << 20,
                             heap_peak_bytes=1 << 19, indefinite_bytes=1 << 19, peak_instruction="fusion_a.1",
                             buffers=[StaticBuffer(instruction=f"param_{i}_.1", shape=f"f32[{i + 1},8]",
                                                   size_bytes=1024, kind="parameter", source="my_model.py:12")
                                      for i in range(buffers)])
    return SimpleNamespace(target=None, target_source=None, target_detected=False, origin_ps=0,
                           memories=[memory], modules=[module], warnings=[f"check {_name(rng)}"],
                           memory_headroom=lambda m: None, module_headroom=lambda m: None)


@pytest.mark.parametrize("seed", range(5))
def test_markdown_escapes_each_name_once(seed: int) -> None:
    """Every module of a real trace read "jit\\\\\\_train\\\\\\_step" in Markdown: the name escaped by the
    report, then again by the table, so the page showed the backslashes."""
    rng = random.Random(seed)
    report = _report(rng, shapes=True)
    markdown = memory_text(report, markdown=True)
    assert "\\\\" not in markdown
    assert f"| {markdown_text(report.modules[0].name)} |" in markdown           # the name, escaped once
    assert f"| {markdown_text('param_0_.1')} | f32\\[1,8\\] |" in markdown
    assert f"- {markdown_text(report.warnings[0])}" in markdown


def test_the_peak_time_is_in_seconds_past_a_second() -> None:
    rng = random.Random(1)
    report = _report(rng, shapes=True)
    report.memories[0].peak_time_ps = 12_345 * MS
    assert " 12.345 s " in memory_text(report) and "12345.000 ms" not in memory_text(report)


def test_shape_and_region_columns_only_where_a_row_has_them() -> None:
    """A JAX GPU trace's allocator events name no shape nor region: two columns of "-" on every table."""
    rng = random.Random(2)
    text = memory_text(_report(rng, shapes=False))
    header = next(line for line in text.splitlines() if line.lstrip().startswith("size") and "op" in line)
    assert header.split() == ["size", "op", "step"]
    full = memory_text(_report(rng, shapes=True))
    header = next(line for line in full.splitlines() if line.lstrip().startswith("size") and "op" in line)
    assert header.split() == ["size", "op", "shape", "region", "step"]


def test_a_more_line_is_not_a_row_of_the_markdown_table() -> None:
    rng = random.Random(3)
    markdown = memory_text(_report(rng, shapes=True, held=14, buffers=13), top=10, markdown=True).splitlines()
    for more in ("... and 4 more", "... and 3 more buffers"):
        at = markdown.index(more)
        assert markdown[at - 1] == "" and markdown[at - 2].startswith("|")
