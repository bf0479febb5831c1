"""Labels that agree: projected figures say so, the peak named in the text is the one drawn, sizes of
memory are binary (KiB, MiB, GiB) in every view and data moved is decimal (docs/architecture.md)."""

from __future__ import annotations

import json
import re

import pytest

import traceview
from traceview.cli import main
from traceview.render.charts import applicable_roofs, roofline_lines


def _out(capsys, *argv) -> str:
    assert main([*map(str, argv)]) in (0, 1)
    return capsys.readouterr().out


@pytest.mark.parametrize("target", ["tpu-v5p", "h100-sxm", "tpu-v6e"])
def test_a_projection_is_labelled_projected_everywhere(sample_traces, capsys, target):
    path = sample_traces / "transformer"          # captured on a CPU: any TPU or GPU target is a projection
    text = _out(capsys, "analyze", path, "--target", target)
    assert "measured):" not in text               # no projected split called measured
    assert re.search(rf"time by bound \(share of busy \+ idle measured on cpu, bounds projected onto {target}\)",
                     text)
    assert "projected roofline efficiency" in text and "projected MFU" in text
    for title in ("What to fix first", "Steps", "Top 20 ops by gain"):
        assert f"{title} (projected onto {target})" in text, title
    header = next(line for line in text.splitlines() if line.startswith("module ") and "judged" in line)
    for column in ("bound", "roofline", "eff.", "gap", "gain"):
        assert f"proj. {column}" in header
    markdown = _out(capsys, "analyze", path, "--target", target, "--format", "markdown")
    assert f"Top 20 ops by gain (projected onto {target})" in markdown
    scopes = _out(capsys, "scopes", path, "--target", target)
    assert f"projected onto {target}" in scopes and "proj. gain" in scopes and "proj. bound" in scopes
    assert json.loads(_out(capsys, "scopes", path, "--target", target, "--format", "json"))["projected_onto"] == target
    roofline = _out(capsys, "roofline", path, "--target", target)
    assert roofline.startswith("projected: the points are the rates measured on cpu")
    assert json.loads(_out(capsys, "roofline", path, "--target", target, "--format", "json"))["projected"] is True
    for fmt in ("table", "markdown"):
        diff = _out(capsys, "diff", sample_traces / "mlp", sample_traces / "mlp_slow", "--target", target,
                    "--format", fmt)
        assert f"bounds, efficiency and MFU (projected onto {target}); times as measured" in diff
        assert f"Time by bound, per step (projected onto {target})" in diff


def test_on_the_capture_chip_nothing_says_projected(sample_traces, capsys):
    path = sample_traces / "transformer"
    for argv in (("analyze", path), ("scopes", path), ("roofline", path),
                 ("diff", sample_traces / "mlp", sample_traces / "mlp_slow")):
        text = _out(capsys, *argv)
        assert "projected" not in text.replace("projected_time", ""), argv
    assert json.loads(_out(capsys, "roofline", path, "--format", "json"))["projected"] is False


@pytest.mark.parametrize("target", [None, "tpu-v5p", "h100-sxm"])
def test_the_ridge_point_names_the_peak_the_chart_draws(sample_traces, capsys, target):
    path = sample_traces / "transformer"
    extra = ["--target", target] if target else []
    text = _out(capsys, "roofline", path, *extra)
    a = traceview.load(path, target=target)
    chip, ops = a.target, a.pipeline.ops
    dtypes, _ = applicable_roofs(chip, ops)
    drawn = set(roofline_lines(chip, 0.1, 1e4, ops)["line"])
    named = re.findall(r"(\w+) peak ", text.splitlines()[1 if target else 0])   # under the "projected:" line
    assert named == dtypes                               # the text's peaks, in the chart's order
    for dtype in named:
        assert any(line.startswith(f"{dtype} peak") for line in drawn), (dtype, drawn)
    doc = json.loads(_out(capsys, "roofline", path, *extra, "--format", "json"))
    assert doc["ridge_point_dtype"] == dtypes[0]
    assert doc["ridge_point"] == pytest.approx(chip.peak_flops[dtypes[0]] / chip.hbm_bandwidth)


_BINARY = re.compile(r"^-?\d+(\.\d\d)? (B|KiB|MiB|GiB|TiB)$")


def test_memory_sizes_are_binary_in_every_view(sample_traces, capsys):
    diff = _out(capsys, "diff", sample_traces / "mlp", sample_traces / "mlp_slow")
    rows = [line for line in diff.splitlines() if line.startswith("peak_memory:")]
    assert rows
    for row in rows:
        cells = re.split(r"\s{2,}", row)
        assert _BINARY.match(cells[2]) and _BINARY.match(cells[3]), row
    memory = _out(capsys, "memory", sample_traces / "mlp")
    sizes = re.findall(r"\d+(?:\.\d+)? ([kMGT]?i?B)\b(?!/)", memory)   # rates (GB/s) are data moved
    assert sizes and all(unit in ("B", "KiB", "MiB", "GiB", "TiB") for unit in sizes), set(sizes)
    analyze = _out(capsys, "analyze", sample_traces / "transformer", "--target", "tpu-v5p")
    memory_lines = [line for line in analyze.splitlines() if "peak" in line and "capacity" in line or " free)" in line]
    assert memory_lines
    for line in memory_lines:
        assert not re.search(r"\d (kB|MB|GB|TB)\b", line), line
    hardware = _out(capsys, "hardware")
    assert "HBM GiB" in hardware.splitlines()[0]
