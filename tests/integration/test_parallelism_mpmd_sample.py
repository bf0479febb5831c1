"""The pipeline_mpmd sample: a separately jitted program per stage on its own CPU device, activations moved
with jax.device_put, m microbatches in a GPipe forward schedule (sample_traces/capture.py).

The references are the capture's configuration (stages, microbatches) and the bubble worked out here, by
hand, from the trace's own op executions (``traceview.load(...).op_executions``): 8 CPU devices share 2
cores, so the timings vary from capture to capture and the test compares the measurement with the same
trace's ops, never with wall-clock expectations.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict

import pytest

import traceview
from traceview.parallelism.diagnose import from_analysis
from traceview.render.parallelism import parallelism_json, parallelism_markdown, parallelism_text, summary_line


@pytest.fixture(scope="module")
def sample(sample_traces):
    trace = sample_traces / "pipeline_mpmd"
    loaded = traceview.load(trace)
    report = from_analysis(loaded.pipeline)
    cfg = json.loads((trace / "capture.json").read_text())["config"]
    return loaded, report, cfg


def _by_hand(executions) -> tuple[dict, dict]:
    """Per device: its program, and per step its executions [(start, end)] (each op runs once per execution:
    an execution is the next len(distinct ops) ops in time); per step: the span over all devices."""
    ops: dict[tuple[str, int], list[tuple[float, float, str]]] = defaultdict(list)
    program: dict[str, set[str]] = defaultdict(set)
    for rec in executions.itertuples(index=False):
        if rec.step < 0:
            continue
        ops[(rec.device, rec.step)].append((rec.start_us, rec.start_us + rec.duration_us, rec.name))
        program[rec.device].add(rec.module)
    runs: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for key, rows in ops.items():
        rows.sort()
        per_run = len({name for _, _, name in rows})
        chunks = [rows[i:i + per_run] for i in range(0, len(rows), per_run)]
        runs[key] = [(chunk[0][0], max(end for _, end, _ in chunk)) for chunk in chunks]
    spans = {}
    for (_, step), rows in ops.items():
        lo, hi = min(r[0] for r in rows), max(r[1] for r in rows)
        old = spans.get(step, (lo, hi))
        spans[step] = (min(lo, old[0]), max(hi, old[1]))
    return {"program": program, "runs": runs}, spans


def test_stages_microbatches_and_bubble_by_hand(sample):
    loaded, report, cfg = sample
    p, m = cfg["stages"], cfg["microbatches"]
    axis = next(a for a in report.axes if a.pipeline is not None)
    pipe = axis.pipeline
    assert axis.name == "stage" and axis.role.role == "pipeline" and [r.role for r in axis.roles] == ["pipeline"]
    assert report.mesh is None                                   # no collective: the stages only copy
    schedule = pipe.schedule
    assert schedule is not None and pipe.stages == p == schedule.p and pipe.microbatches == m
    assert [s.programs for s in schedule.stages] == [[f"jit_stage{s}"] for s in range(p)]

    found, spans = _by_hand(loaded.op_executions)
    devices = [s.devices[0] for s in schedule.stages]
    assert [found["program"][d] for d in devices] == [{f"jit_stage{s}"} for s in range(p)]
    assert schedule.steps == len(spans) == cfg["traced_steps"]
    fractions = []
    for stage, device in enumerate(devices):
        before, after = [], []
        for step, (lo, hi) in spans.items():
            runs = found["runs"][(device, step)]
            assert len(runs) == m                                # each stage runs its program m times a step
            if stage:                                            # it waited for the previous stage's output
                previous = found["runs"][(devices[stage - 1], step)]
                assert all(start >= prev_end for (start, _), (_, prev_end) in zip(runs, previous))
            before.append(runs[0][0] - lo)
            after.append(hi - runs[-1][1])
            fractions.append((before[-1] + after[-1]) / (hi - lo))
        st = schedule.stages[stage]
        assert st.microbatches == m
        assert st.idle_before_ps / 1e6 == pytest.approx(sum(before) / len(before), rel=1e-6, abs=1e-3)
        assert st.idle_after_ps / 1e6 == pytest.approx(sum(after) / len(after), rel=1e-6, abs=1e-3)
    assert pipe.bubble_fraction == pytest.approx(sum(fractions) / len(fractions), rel=1e-6)
    assert schedule.in_sequence[0] == schedule.in_sequence[1] == (p - 1) * m * cfg["traced_steps"]
    # the formula beside it: (p - 1)/(m + p - 1) = 3/7 for 4 stages and 4 microbatches
    assert pipe.formula_bubble_fraction == pytest.approx((p - 1) / (m + p - 1)) == pytest.approx(3 / 7)
    # the verdict judges the measured bubble against GPipe's m >= 4p: (p - 1)/(5p - 1) = 3/19
    assert axis.verdict.value == pipe.bubble_fraction and axis.verdict.threshold == pytest.approx(3 / 19)
    assert axis.verdict.verdict == ("bubble-bound" if pipe.bubble_fraction > 3 / 19 else "compute-bound")


def test_outputs_carry_the_measurement(sample):
    _, report, cfg = sample
    record = parallelism_json(report)
    jsonschema = pytest.importorskip("jsonschema")
    from traceview.config.files import schema

    jsonschema.validate(record, schema("parallelism"))
    rec = next(a for a in record["axes"] if a["pipeline"])
    pipe = rec["pipeline"]
    assert pipe["stages"] == cfg["stages"] and pipe["microbatches"] == cfg["microbatches"]
    assert pipe["how"].startswith("measured in the trace")
    measured = pipe["measured"]
    assert [s["programs"] for s in measured["stages"]] == [[f"jit_stage{s}"] for s in range(cfg["stages"])]
    assert pipe["bubble_fraction"] == pytest.approx(
        sum(s["bubble_fraction"] for s in measured["stages"]) / cfg["stages"])
    # the drawn step: every stage's m executions, times from the step's start
    drawn = measured["schedule"]
    assert len(drawn) == cfg["stages"] * cfg["microbatches"] and min(r["start_us"] for r in drawn) == 0
    text, markdown = parallelism_text(report), parallelism_markdown(report)
    for out in (text, markdown):
        assert "pipeline of 4 stages, each its own program" in out
        assert "idle before its first" in out and "formula (p-1)/(m+p-1) 42.9%" in out
    assert "mesh none in the HLO, a program per stage: stage=4" in summary_line(report)
    assert not any(w.startswith("mesh not determined") for w in report.warnings)


def test_the_bubble_is_a_percentage_in_every_line(sample, sample_traces):
    """The pipeline line wrote the bubble as a fraction ("bubble 0.4099 (measured ...") above stage lines and a
    summary that write it as a percentage ("bubble measured 41.0%")."""
    _, report, _ = sample
    pipe = next(a for a in report.axes if a.pipeline is not None).pipeline
    shown = f"{100 * pipe.bubble_fraction:.1f}%"
    for out in (parallelism_text(report), parallelism_markdown(report)):
        line = next(x for x in out.splitlines() if "pipeline (GPipe)" in x)
        assert f"bubble {shown} (measured in the trace" in line and f"{pipe.bubble_fraction:.4f}" not in line
    spmd = from_analysis(traceview.load(sample_traces / "pipeline").pipeline)
    axis = next(a for a in spmd.axes if a.pipeline is not None)
    line = next(x for x in parallelism_text(spmd).splitlines() if "pipeline (GPipe)" in x)
    formula = f"{100 * axis.pipeline.bubble_fraction:.1f}%"
    if axis.pipeline.measured is None:
        assert f"bubble {formula} (" in line
    else:
        assert f"bubble {100 * axis.pipeline.measured.bubble_fraction:.1f}% measured in the trace, {formula} by " \
            "the schedule" in line
    assert "0." not in line.split("bubble ", 1)[1].split("(", 1)[0]


def test_spmd_pipeline_is_not_measured(sample_traces):
    """One program on every device (the SPMD pipeline sample): read from its loop, not measured."""
    report = from_analysis(traceview.load(sample_traces / "pipeline").pipeline)
    pipe = next(a for a in report.axes if a.pipeline is not None).pipeline
    assert pipe.schedule is None and pipe.how.startswith("SPMD pipeline")


def test_stage_split_decided_from_the_partials_without_reading_executions(sample, sample_traces, shared_traces):
    """The merged host partials give the same (device, module, program_id) pairs as the executions, and a run
    whose devices all run the same programs is judged without reading one execution again."""
    from traceview.parallelism.mpmd import may_have_stages

    loaded = sample[0]
    executions = loaded.pipeline.profile.op_executions()
    by_rows = executions[["device", "module", "program_id"]].astype(str).drop_duplicates()
    by_parts = loaded.pipeline.run_ops.device_programs().astype(str)
    assert sorted(map(tuple, by_rows.to_numpy())) == sorted(map(tuple, by_parts.to_numpy()))
    assert may_have_stages(by_parts)

    pod = traceview.load(shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb").pipeline
    assert len(set(pod.ops["module"].astype(str))) >= 2           # the pipeline check would read the executions
    assert not may_have_stages(pod.run_ops.device_programs())
    calls: list[int] = []
    class Counting:                                               # a reader that counts the executions read
        def op_executions(self):
            calls.append(1)
            return pod.profile.op_executions()

    profile = dataclasses.replace(pod.profile, kept=None, reader=Counting())   # as `analyze`
    from_analysis(dataclasses.replace(pod, profile=profile))
    assert calls == []
