"""The roofline chart: one colour and label per roof, only the roofs that apply, labelled top points,
the ops left off listed with their share of time, and an HTML file that renders with the network off."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from traceview.analysis.roofline import roofline
from traceview.hardware.database import get_chip, load_hardware
from traceview.render.charts import (
    INTERCONNECT,
    roofline_lines,
    roofline_points,
    save_plot,
    unplaceable_note,
    unplaceable_ops,
)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _ops(comm: bool = False) -> pd.DataFrame:
    """Six ops on one device: four bf16 matmul-ish ops, one copy with no FLOPs, one with no cost."""
    frame = pd.DataFrame({
        "module": ["m"] * 6,
        "op": ["dot.1", "dot.2", "fusion.3", "fusion.4", "copy.5", "custom-call.6"],
        "dtype": ["bf16", "bf16", "bf16", "bf16", "bf16", "bf16"],
        "flops": [4e12, 2e12, 1e9, 1e8, 0.0, float("nan")],
        "bytes_accessed": [1e9, 1e9, 1e9, 1e8, 4e9, float("nan")],
        # self times in ps: 10, 20, 30, 40, 60, 40 ms -> 200 ms in all
        "self_time_ps": [10e9, 20e9, 30e9, 40e9, 60e9, 40e9],
    })
    frame["judged_time_ps"] = frame["self_time_ps"]
    if comm:
        frame["collective_kind"] = ["", "", "", "", "all-reduce", ""]
        frame["payload_bytes"] = [0, 0, 0, 0, 4e9, 0]
        frame["group_size"] = [0, 0, 0, 0, 8, 0]
    chip = get_chip("h100", load_hardware())
    out, _ = roofline(frame, chip, time_column="judged_time_ps")
    return out


def test_each_roof_has_its_own_colour_and_dash_and_only_applicable_roofs_are_drawn():
    chip = get_chip("h100", load_hardware())
    assert len(chip.peak_flops) > 3          # H100 has many peaks: fp8, bf16, fp32, fp64, ...
    every = roofline_lines(chip, 0.1, 1000)
    styles = every.drop_duplicates("line")[["colour", "dash"]]
    assert len(styles) == len(chip.peak_flops) + 1          # all peaks and the interconnect
    assert styles["colour"].is_unique and styles["dash"].is_unique
    ops = _ops()
    lines = roofline_lines(chip, 0.1, 1000, ops)
    names = list(dict.fromkeys(lines["line"]))
    assert len(names) == 1 and names[0].startswith("bf16 peak")   # bf16 ops only, no collective
    with_comm = list(dict.fromkeys(roofline_lines(chip, 0.1, 1000, _ops(comm=True))["line"]))
    assert INTERCONNECT in with_comm


def test_top_points_are_labelled_and_unplaceable_ops_listed_with_share():
    ops = _ops()
    points = roofline_points(ops, labelled=2)
    assert set(points["op"]) == {"dot.1", "dot.2", "fusion.3", "fusion.4"}
    # the two placed ops with the most time: fusion.4 (40 ms) and fusion.3 (30 ms)
    assert set(points.loc[points["label"] != "", "op"]) == {"fusion.4", "fusion.3"}
    rest = unplaceable_ops(ops)
    assert list(rest["op"]) == ["copy.5", "custom-call.6"]
    assert list(rest["reason"]) == ["no FLOPs", "no cost"]
    assert rest["share"].tolist() == pytest.approx([60 / 200, 40 / 200])
    note = unplaceable_note(ops)
    assert "copy.5 (no FLOPs, 30.0% of time)" in note and "2 ops, 50.0% of time" in note


def test_png_chart_lists_ops_left_off(tmp_path):
    pytest.importorskip("matplotlib")
    chip = get_chip("h100", load_hardware())
    ops = _ops()
    path = save_plot(roofline_points(ops), chip, tmp_path / "r.svg", ops=ops)
    text = path.read_text()
    assert "Not on the chart" in text and "dot.1" in text


@pytest.mark.slow
def test_html_chart_renders_offline_in_chromium(tmp_path):
    pytest.importorskip("altair")
    pytest.importorskip("vl_convert", reason="inlining Vega needs vl-convert-python")
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    chip = get_chip("h100", load_hardware())
    ops = _ops()
    html = save_plot(roofline_points(ops), chip, tmp_path / "r.html", ops=ops)
    assert "<script src=\"http" not in html.read_text()
    # No network at all: every host name fails to resolve and every request goes to a dead proxy.
    offline = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
               "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
               f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000"]
    dom = subprocess.run([CHROMIUM, *offline, "--dump-dom", Path(html).as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    # vega-embed marks the container and draws the marks into it only when Vega loaded and the
    # spec compiled; offline with a CDN script the container stays an empty <div id="vis">.
    drawn = re.search(r'<div[^>]*vega-embed[^>]*id="vis"[^>]*>.{0,400}?<(svg|canvas)', dom, re.S)
    assert drawn, dom[-2000:]
    assert "dot.1" in dom or "fusion.4" in dom
