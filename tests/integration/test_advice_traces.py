"""Idle causes, stragglers and advice on the samples and on real multi-device traces."""

from __future__ import annotations

import json

import pytest

import traceview
from traceview.advice.idle import CAUSES
from traceview.cli import main


def _load_batch_time_while_idle(analysis) -> float:
    """The host time spent in the sample's load_batch while the device ran no op, measured straight from
    the raw events with a plain sweep: each load_batch call clipped to the device's span (the first
    step's load runs before the first op), less the parts any op overlaps."""
    ops, host = analysis.pipeline.profile.op_executions(), analysis.pipeline.profile.all_host_events()
    op_spans = sorted(zip(ops["start_ps"].tolist(), (ops["start_ps"] + ops["duration_ps"]).tolist()))
    first, last = op_spans[0][0], max(end for _, end in op_spans)
    loads = host[host["name"].astype(str).str.endswith(" load_batch")]
    assert len(loads) == 5                               # one per traced step
    total = 0
    for start, duration in zip(loads["start_ps"].tolist(), loads["duration_ps"].tolist()):
        lo, hi = max(start, first), min(start + duration, last)
        cursor, busy = lo, 0
        for op_start, op_end in op_spans:                # merged on the fly: busy time inside [lo, hi)
            a, b = max(op_start, cursor), min(op_end, hi)
            if b > a:
                busy += b - a
                cursor = b
        total += max(hi - lo, 0) - busy
    return float(total)


def test_host_bound_sample_waits_for_the_host(sample_traces) -> None:
    analysis = traceview.load(sample_traces / "host_bound")
    report = analysis.advice()
    idle = report.idle
    assert idle.idle_ps == analysis.pipeline.idle_ps
    assert sum(idle.causes.values()) == idle.idle_ps
    assert idle.causes["host"] > 0.5 * idle.idle_ps                      # host holds most of the idle time
    assert idle.evidence["host"][0]["name"].endswith(" load_batch")
    first = report.items[0]
    assert first.kind == "idle" and "host" in first.title
    measured = _load_batch_time_while_idle(analysis)
    # the saving is the host cause: load_batch plus the little Python around it in the gaps
    assert measured <= first.saving_ps <= 1.1 * measured
    record = analysis.to_json()
    assert record["advice"][0]["saving_us"] == pytest.approx(first.saving_ps / 1e6)
    causes = {c["cause"]: c for c in record["summary"]["idle_causes"]}
    assert causes["host"]["share"] == pytest.approx(idle.causes["host"] / idle.idle_ps)
    assert sum(c["time_us"] for c in causes.values()) == pytest.approx(record["summary"]["idle_us"], rel=1e-9)


def test_no_host_advice_without_waits(sample_traces) -> None:
    report = traceview.load(sample_traces / "mlp").advice()
    assert report.items, "mlp has ops with time to gain"
    assert not [i for i in report.items if i.kind == "idle"]
    assert report.items[0].kind == "op"


def test_sharded_sample_reports_stragglers_over_eight_devices(sample_traces) -> None:
    analysis = traceview.load(sample_traces / "sharded")
    report = analysis.advice()
    assert len(report.stragglers.steps) == 5 and (report.stragglers.steps["devices"] == 8).all()
    for row in report.idle.per_device.itertuples():
        assert sum(getattr(row, f"{c}_ps") for c in CAUSES) == row.idle_ps
    by_device = {d["id"]: d["idle_us"] for d in analysis.to_json()["summary"]["devices"]}
    for row in report.idle.per_device.itertuples():
        assert row.idle_ps / 1e6 == pytest.approx(by_device[row.device], abs=1e-6)


@pytest.mark.parametrize("trace", ["openxla-xprof/tpu_inference_2.xplane.pb",
                                   "AMD-AGI-TraceLens/te_fused_attn/934987a2fc2f.xplane.pb"])
def test_idle_causes_add_up_to_the_idle_time_on_real_traces(shared_traces, trace, capsys) -> None:
    assert main(["analyze", str(shared_traces / trace), "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    summary = record["summary"]
    total = sum(c["time_us"] for c in summary["idle_causes"])
    assert total == pytest.approx(summary["idle_us"], rel=1e-9)
    for device in summary["idle_causes_by_device"]:
        assert sum(device["causes_us"].values()) == pytest.approx(device["idle_us"], rel=1e-9)
    assert record["advice"] and [a["rank"] for a in record["advice"]] == list(range(1, len(record["advice"]) + 1))
    quantified = [a["saving_us"] for a in record["advice"] if a["saving_us"] is not None]
    assert quantified == sorted(quantified, reverse=True)
    assert all(0 <= a["saving_share"] <= 1 for a in record["advice"] if a["saving_share"] is not None)
    stragglers = summary["stragglers"]
    if "tpu_inference" in trace:        # 4 chips, 100 steps: who finished last, each step
        assert stragglers["steps"] == 100 and len(stragglers["per_step"]) == 100
        assert all(s["devices"] == 4 for s in stragglers["per_step"])
        lags = [s["finish_lag_us"] for s in stragglers["per_step"]]
        assert min(lags) >= 0 and max(lags) > 0
        assert stragglers["most_often_last"].startswith("tpu_inference_2/TPU:")
    else:                               # 8 GPU planes, one ran ops, and no steps: null, with the reason
        assert stragglers["device"] is None and stragglers["reason"]


def test_cli_reads_the_executions_again_and_agrees_with_the_api(sample_traces, capsys) -> None:
    """`analyze` does not keep the op executions (keep_ops=False): the advice view reads them again (here
    with --no-cache, from the file itself) and prints what the API computes from the kept ones."""
    path = sample_traces / "host_bound"
    assert main(["analyze", str(path), "--format", "json", "--no-cache"]) == 0
    cli = json.loads(capsys.readouterr().out)
    api = traceview.load(path).to_json()
    assert cli["advice"] == api["advice"]
    assert cli["summary"]["idle_causes"] == api["summary"]["idle_causes"]
    assert cli["summary"]["idle_causes_by_step"] == api["summary"]["idle_causes_by_step"]
