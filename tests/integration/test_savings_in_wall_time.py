"""No saving in any output exceeds the busy time of the devices it is for (timeline.overlap).

On the CPU samples ops overlap on the thread pool, so op time exceeds busy
time: gains are also stated in wall time (gain x busy / op time), and those
are what advice ranks by.
"""

from __future__ import annotations

import json
import re

import pytest

import traceview
from traceview.cli import main
from traceview.render.advice import advice_list_json
from traceview.timeline.overlap import Overlap
from traceview.units import fmt_time_us

SAMPLES = ["transformer", "mlp", "sharded", "fsdp", "moe"]


@pytest.fixture(scope="module", params=SAMPLES)
def loaded(request, sample_traces):
    return traceview.load(sample_traces / request.param)


def test_wall_gains_never_exceed_the_busy_time(loaded):
    pipeline = loaded.pipeline
    busy_us = pipeline.device_time_ps / 1e6
    op_us = pipeline.op_time_ps / 1e6
    from traceview.render.scopes import scopes_json

    record = scopes_json(loaded.scope_tree())
    assert record["busy_us"] == pytest.approx(busy_us)
    factor = min(1.0, busy_us / op_us)
    assert record["wall_per_op_time"] == pytest.approx(factor)
    for node in record["nodes"]:
        if node["gain_us"] is None:
            continue
        # by hand: the op-time gain times busy / op time, and never more than the busy time
        assert node["wall_gain_us"] == pytest.approx(node["gain_us"] * factor)
        assert node["wall_gain_us"] <= busy_us * (1 + 1e-9)
    roots = sum(n["wall_gain_us"] or 0 for n in record["nodes"] if len(n["path"]) == 1)
    assert roots <= busy_us * (1 + 1e-9)
    active = len(pipeline.device_times)
    for item in advice_list_json(loaded.advice()):
        if item["saving_us"] is not None:
            assert item["saving_us"] <= busy_us / active * (1 + 1e-9), item


def test_a_cpu_sample_overlaps_and_says_so(sample_traces, capsys):
    """The transformer sample: 97.7 ms of op time in 50.0 ms of busy time; every output says it."""
    a = traceview.load(sample_traces / "transformer")
    overlap = Overlap(float(a.pipeline.op_time_ps), float(a.pipeline.device_time_ps))
    assert overlap.overlapped and overlap.op_time_ps > 1.5 * overlap.busy_ps
    tree = a.scope_tree()
    root = tree.nodes[tree.nodes["depth"] == 1].iloc[0]
    assert root["gain_us"] > overlap.busy_ps / 1e6 > root["wall_gain_us"]   # the op-time gain exceeds the busy time
    assert main(["scopes", str(sample_traces / "transformer")]) == 0
    text = capsys.readouterr().out
    busy = fmt_time_us(overlap.busy_ps / 1e6)
    assert "ops overlap " in text and "wall gain" in text and f"the devices were busy {busy}" in text
    assert main(["analyze", str(sample_traces / "transformer")]) == 0
    text = capsys.readouterr().out
    assert "ops overlap " in text and "wall gain" in text
    assert re.search(r"of wall time to gain \(op time: ", text)


def test_no_overlap_no_change():
    """One op at a time (a TPU): the factor is 1 and the wall figures are the op-time ones."""
    overlap = Overlap(op_time_ps=5e9, busy_ps=5e9)
    assert overlap.factor == 1.0 and not overlap.overlapped and overlap.wall(3e9) == 3e9
    assert Overlap(0.0, 0.0).factor == 1.0          # unknown: nothing scaled


def test_the_overlap_ratio_is_never_written_as_no_overlap():
    """Op time 0.1-1% above busy time is an overlap: written "1.001x", not "1.00x" (which reads as none);
    from 1.01 on, two decimals. The summary line and every advice item write it the same way."""
    for busy, op, text in ((374.05, 374.42, "1.001"), (50.0, 97.7, "1.95"), (10.0, 10.1, "1.01"),
                           (10.0, 10.0, "1.000"), (0.0, 5.0, "-")):
        overlap = Overlap(op_time_ps=op * 1e9, busy_ps=busy * 1e9)
        assert overlap.ratio_text() == text
        if busy > 0:
            assert f"ops overlap {text}x" in overlap.describe() and overlap.describe().endswith(f"/ {text}")


def test_advice_json_savings_are_wall_time(sample_traces, capsys):
    assert main(["analyze", str(sample_traces / "mlp"), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    busy = sum(d["busy_us"] for d in data["summary"]["devices"])
    ops = {o["name"]: o for o in data["ops"]}
    op_time = sum(o["self_time_us"] for o in data["ops"])
    for item in data["advice"]:
        if item["kind"] == "op" and item["saving_us"] is not None:
            name = item["title"].split()[1]
            assert item["saving_us"] == pytest.approx(ops[name]["gain_us"] * min(1.0, busy / op_time), rel=1e-6)
