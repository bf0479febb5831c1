"""Pipeline stages on small synthetic frames, worked out by hand: no trace needed.

op_stats (aggregation as XProf's HLO op stats do it), attach_costs (the
join of measured ops with HLO costs), judged_and_exposed (what the roofline
judges an op by vs what it cost the step) and apply_target (the roofline
judgement, re-done for another chip without touching the input).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from traceview.analysis.build import PipelineResult, apply_target
from traceview.analysis.cost_join import attach_costs
from traceview.analysis.modules import TraceModules
from traceview.hardware.chips import Chip
from traceview.hostreduce.combine import combine
from traceview.hostreduce.profile import Profile
from traceview.parsers.profile import HOST_EVENT_COLUMNS, STEP_COLUMNS, Source, empty_frame
from traceview.timeline.aggregate import aggregate_ops, op_stats, step_times
from traceview.timeline.timing import judged_and_exposed


def raw_ops(rows: list[tuple]) -> pd.DataFrame:
    """The profile's op table from (device, module, op, start_ps, duration_ps, self_ps, step[, trace_flops])."""
    frame = pd.DataFrame([r if len(r) == 8 else (*r, np.nan) for r in rows],
                         columns=["device", "module", "op", "start_ps", "duration_ps", "self_ps", "step",
                                  "trace_flops"])
    frame["host"] = "h"
    frame["line"] = "XLA Ops"
    frame["program_id"] = 7
    frame["category"] = ""
    frame["trace_bytes"] = np.nan
    frame["executions"] = np.int8(1)
    for column in ("host", "device", "line", "module", "op", "category"):
        frame[column] = frame[column].astype("category")
    return frame


# ------------------------------------------------------------------ op_stats

EXECUTIONS = raw_ops([
    ("h/TPU:0", "m", "fusion.1", 0, 100, 100, 0, 10.0),
    ("h/TPU:0", "m", "dot.1", 100, 30, 30, 0),
    ("h/TPU:0", "m", "while.1", 130, 70, 20, 0),     # 50 ps of nested body ops not listed here
    ("h/TPU:0", "m", "fusion.1", 200, 50, 50, 1, 10.0),
    ("h/TPU:1", "m", "fusion.1", 0, 80, 80, 0),
])


def test_op_stats_aggregate_over_devices_by_program_module_op():
    stats = op_stats(EXECUTIONS).set_index("op")
    assert list(stats.index) == ["fusion.1", "dot.1", "while.1"]           # self time, largest first
    assert stats.at["fusion.1", "occurrences"] == 3
    assert stats.at["fusion.1", "total_time_ps"] == 100 + 50 + 80
    assert stats.at["fusion.1", "self_time_ps"] == 100 + 50 + 80
    assert stats.at["fusion.1", "devices"] == 2
    assert stats.at["while.1", "total_time_ps"] == 70 and stats.at["while.1", "self_time_ps"] == 20
    # What the trace reports is summed where it says something, and stays unknown where it never does.
    assert stats.at["fusion.1", "trace_flops"] == 20.0
    assert math.isnan(stats.at["dot.1", "trace_flops"])


def test_op_stats_per_device_keeps_the_device():
    stats = op_stats(EXECUTIONS, per_device=True)
    fusion = stats[stats["op"] == "fusion.1"].set_index("device")
    assert fusion.at["h/TPU:0", "occurrences"] == 2 and fusion.at["h/TPU:0", "self_time_ps"] == 150
    assert fusion.at["h/TPU:1", "occurrences"] == 1 and fusion.at["h/TPU:1", "self_time_ps"] == 80


def test_op_stats_of_nothing_has_the_columns():
    stats = op_stats(EXECUTIONS.iloc[:0])
    assert stats.empty and {"occurrences", "self_time_ps", "total_time_ps"} <= set(stats.columns)


# ------------------------------------------------------------------ attach_costs

def _aggregated(rows: list[tuple]) -> pd.DataFrame:
    """op_stats-like rows: (program_id, module, op, category, occurrences, self_time_ps)."""
    return pd.DataFrame(rows, columns=["program_id", "module", "op", "category", "occurrences", "self_time_ps"])


COSTS = pd.DataFrame([
    # module, program_id, name, opcode, category, flops, bytes_accessed (per execution)
    ("m", 7, "fusion.1", "fusion", "loop fusion", 10.0, 4.0),
    ("m", -1, "dot.1", "dot", "matmul", 1000.0, 64.0),
], columns=["module", "program_id", "name", "opcode", "category", "flops", "bytes_accessed"])


def test_attach_costs_matches_by_program_then_module_and_scales_by_occurrences():
    ops = _aggregated([
        (7, "m_renamed", "fusion.1", "", 3, 300),     # same program id: matched although the module name differs
        (-1, "m", "dot.1", "", 5, 500),               # no program id: matched by module and name
        (7, "m", "mystery.9", "", 1, 200),            # not in the HLO
    ])
    out, warnings = attach_costs(ops, COSTS)
    out = out.set_index("op")
    assert out.at["fusion.1", "has_cost"] and out.at["fusion.1", "flops"] == 3 * 10.0
    assert out.at["fusion.1", "bytes_accessed"] == 3 * 4.0
    assert out.at["dot.1", "has_cost"] and out.at["dot.1", "flops"] == 5 * 1000.0
    assert out.at["dot.1", "category"] == "matmul"                     # the cost model's category fills the gap
    assert not out.at["mystery.9", "has_cost"] and math.isnan(out.at["mystery.9", "flops"])   # unknown, not 0
    assert len(warnings) == 1 and "1 op (20.0% of self time) has no matching HLO" in warnings[0] and "mystery.9" in warnings[0]
    assert "20.0% of self time" in warnings[0]                          # 200 of 1000 ps


def test_attach_costs_without_hlo_leaves_every_cost_unknown():
    ops = _aggregated([(7, "m", "fusion.1", "", 3, 300)])
    out, warnings = attach_costs(ops, pd.DataFrame())
    assert not out["has_cost"].any() and out["flops"].isna().all() and out["bytes_accessed"].isna().all()
    assert warnings and "no HLO modules" in warnings[0]


# ------------------------------------------------------------------ judged and exposed time

# One device: an async all-reduce in flight from 0 to 100 ps while fusion.2 computes (10..90);
# then a synchronous all-reduce.2 (100..150) that fusion.3, on another stream, overlaps for 20 ps.
ASYNC = raw_ops([
    ("h/GPU:0", "m", "all-reduce-start.1", 0, 10, 10, 0),
    ("h/GPU:0", "m", "fusion.2", 10, 80, 80, 0),
    ("h/GPU:0", "m", "all-reduce-done.1", 90, 10, 10, 0),
    ("h/GPU:0", "m", "all-reduce.2", 100, 50, 50, 0),
    ("h/GPU:0", "m", "fusion.3", 120, 20, 20, 0),
])
PAIRS = pd.DataFrame([("m", "all-reduce-start.1", "all-reduce-done.1")], columns=["module", "start", "done"])


def test_async_start_is_judged_by_its_flight_and_exposed_for_its_own_time():
    ops, rows = aggregate_ops(ASYNC)
    kinds = {"all-reduce-start.1": "all-reduce", "all-reduce-done.1": "all-reduce", "all-reduce.2": "all-reduce"}
    ops["collective_kind"] = ops["op"].map(kinds).fillna("")
    out = judged_and_exposed(ASYNC, ops, rows, PAIRS).set_index("op")
    start, done = out.loc["all-reduce-start.1"], out.loc["all-reduce-done.1"]
    assert start["judged_time_ps"] == 100 - 0                   # start's beginning to done's end
    assert start["exposed_time_ps"] == 10 + 10                  # what the step waited: the start and the done
    assert math.isnan(done["judged_time_ps"]) and done["exposed_time_ps"] == 0   # judged with its start
    assert done["paired_start"] == "all-reduce-start.1"
    assert out.at["fusion.2", "judged_time_ps"] == 80 and math.isnan(out.at["fusion.2", "exposed_time_ps"])
    # A synchronous collective is judged by its own time and exposed where no compute overlaps it.
    assert out.at["all-reduce.2", "judged_time_ps"] == 50
    assert out.at["all-reduce.2", "exposed_time_ps"] == 50 - 20


def test_a_start_without_its_done_is_judged_by_its_own_time():
    raw = ASYNC[ASYNC["op"] != "all-reduce-done.1"].reset_index(drop=True)
    ops, rows = aggregate_ops(raw)
    ops["collective_kind"] = np.where(ops["op"].str.startswith("all-reduce"), "all-reduce", "")
    out = judged_and_exposed(raw, ops, rows, PAIRS).set_index("op")
    assert out.at["all-reduce-start.1", "judged_time_ps"] == 10


# ------------------------------------------------------------------ apply_target

def chip(name: str, bf16: float, hbm: float) -> Chip:
    return Chip(name=name, kind="TPU", peak_flops={"bf16": bf16}, hbm_bandwidth=hbm)


def pipeline_result() -> PipelineResult:
    """Three ops on one device in step 0: A compute-heavy, B memory-heavy, C with no cost."""
    raw = raw_ops([
        ("h/TPU:0", "m", "A", 0, 2_000_000_000, 2_000_000_000, 0),
        ("h/TPU:0", "m", "B", 2_000_000_000, 20_000_000_000, 20_000_000_000, 0),
        ("h/TPU:0", "m", "C", 22_000_000_000, 1_000_000, 1_000_000, 0),
    ])
    steps = pd.DataFrame({"device": pd.Categorical(["h/TPU:0"]), "step": [0], "start_ps": [0],
                          "duration_ps": [22_001_000_000], "source": pd.Categorical(["steps_line"])})
    profile = Profile.from_tables(Source(path="synthetic", run=None, hosts=["h"], files=[]), raw,
                                  empty_frame(HOST_EVENT_COLUMNS),
                                  steps.astype({k: v for k, v in STEP_COLUMNS.items() if k in steps}), [])
    run = combine(profile, False, pd.DataFrame(columns=["module", "start", "done"]))
    ops = run.stats.copy()
    ops["judged_time_ps"] = ops["self_time_ps"].astype("float64")
    costs = {"A": (1e9, 1e6), "B": (1e6, 1e9), "C": (np.nan, np.nan)}
    ops["flops"] = ops["op"].map(lambda o: costs[o][0])
    ops["bytes_accessed"] = ops["op"].map(lambda o: costs[o][1])
    ops["dtype"] = "bf16"
    return PipelineResult(profile=profile, ops=ops, steps=step_times(profile.steps), hlo=TraceModules([], pd.DataFrame()),
                          run_ops=run, op_index=np.arange(len(ops), dtype=np.int64),
                          device_times=run.device_time())


def test_apply_target_judges_each_op_against_the_chip():
    base = pipeline_result()
    judged = apply_target(base, chip("toy", bf16=1e12, hbm=1e11)).ops.set_index("op")
    # A: 1e9 FLOPs / 1e12 FLOP/s = 1 ms = 1e9 ps; 1e6 B / 1e11 B/s = 1e7 ps: compute-bound, half as fast.
    assert judged.at["A", "bound"] == "compute"
    assert judged.at["A", "t_compute_ps"] == pytest.approx(1e9) and judged.at["A", "t_memory_ps"] == pytest.approx(1e7)
    assert judged.at["A", "roofline_time_ps"] == pytest.approx(1e9)
    assert judged.at["A", "efficiency"] == pytest.approx(0.5) and judged.at["A", "gap_ps"] == pytest.approx(1e9)
    # B: 1e9 B / 1e11 B/s = 1e10 ps against 2e10 measured: memory-bound at 50%.
    assert judged.at["B", "bound"] == "memory" and judged.at["B", "gap_ps"] == pytest.approx(1e10)
    # C has no cost: unknown, no roofline time, never 0.
    assert judged.at["C", "bound"] == "unknown" and math.isnan(judged.at["C", "roofline_time_ps"])
    assert list(judged.index) == ["B", "A", "C"]                    # by gap, largest first; unknown last


def test_apply_target_leaves_its_input_alone_and_replaces_an_earlier_judgement():
    base = pipeline_result()
    columns = list(base.ops.columns)
    first = apply_target(base, chip("slow", bf16=1e12, hbm=1e11))
    assert list(base.ops.columns) == columns and base.judged is None       # the input is untouched
    second = apply_target(first, chip("fast", bf16=1e13, hbm=1e12), detected=False)
    assert second.judged.chip.name == "fast" and not second.judged.detected
    a = second.ops.set_index("op").loc["A"]
    assert a["roofline_time_ps"] == pytest.approx(1e8)                   # 1e9 FLOPs at 1e13 FLOP/s
    assert list(second.ops.columns) == list(first.ops.columns)          # no columns left over from the first
    assert first.judged.chip.name == "slow" and first.ops.set_index("op").at["A", "roofline_time_ps"] == pytest.approx(1e9)


def test_a_judgement_on_another_chip_is_a_projection_and_the_capture_chip_is_not():
    slow, fast = chip("slow", bf16=1e12, hbm=1e11), chip("fast", bf16=1e13, hbm=1e12)
    captured = dataclasses.replace(pipeline_result(), capture_chip=slow)
    onto_fast = apply_target(captured, fast)
    assert onto_fast.judged.projected and onto_fast.judged.measured_on is slow
    assert onto_fast.judged.summary["projected"] and "projected_time_ps" in onto_fast.judged.summary
    assert "projected_time_ps" in onto_fast.ops and "projected_time_ps" in onto_fast.steps
    back = apply_target(onto_fast, slow, detected=True)          # re-targeted: nothing of the projection stays
    assert not back.judged.projected and back.judged.measured_on is None and back.judged.source == "trace"
    assert back.judged.detected and not back.judged.summary["projected"]
    assert "projected_time_ps" not in back.ops and "projected_time_ps" not in back.steps
    assert not any("projection" in w for w in back.target_warnings)


def test_apply_target_keeps_the_op_index_pointing_at_the_reordered_ops():
    pipeline = pipeline_result()
    names = pipeline.run_ops.stats["op"].astype(str).to_numpy()      # the combined op table's order
    for target in (chip("slow", bf16=1e12, hbm=1e11), chip("fast", bf16=1e13, hbm=1e12)):
        pipeline = apply_target(pipeline, target)                       # re-target the re-targeted result
        # the ops are re-sorted by gain (B, A, C): the index follows them
        assert list(pipeline.ops["op"]) == ["B", "A", "C"]
        assert (pipeline.ops["op"].to_numpy()[pipeline.op_index] == names).all()


def test_empty_frames_are_fresh_copies_of_the_declared_columns():
    from traceview.parsers.profile import OP_COLUMNS

    first = empty_frame(OP_COLUMNS)
    assert list(first.columns) == list(OP_COLUMNS) and first.empty
    assert {c: str(t) for c, t in first.dtypes.items()} == OP_COLUMNS
    first["extra"] = 1                                   # a caller adding a column (or rows) to its frame ...
    first.loc[0, "op"] = np.nan
    again = empty_frame(OP_COLUMNS)                      # ... leaves the next caller's frame as declared
    assert again is not first and list(again.columns) == list(OP_COLUMNS) and again.empty
    built = pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in OP_COLUMNS.items()})
    pd.testing.assert_frame_equal(again, built)


def test_as_declared_casts_only_the_columns_whose_dtype_differs():
    from traceview.parsers.profile import as_declared

    typed = pd.DataFrame({"device": pd.Categorical(["a", "b"]), "step": np.array([0, 1], dtype=np.int32),
                          "start_ps": np.array([5, 6], dtype=np.int64), "duration_ps": np.array([1, 2], dtype=np.int64),
                          "source": pd.Categorical(["module", "module"])})
    same = as_declared(typed, STEP_COLUMNS)
    assert same is typed                                  # nothing to cast: the frame itself, no copy
    raw = typed.assign(device=np.array(["a", "b"], dtype=object), step=np.array([0, 1], dtype=np.int64))
    cast = as_declared(raw, STEP_COLUMNS)
    assert {c: str(t) for c, t in cast.dtypes.items()} == STEP_COLUMNS
    assert list(cast["device"]) == ["a", "b"] and list(cast["step"]) == [0, 1]
    # the columns already right are not copied
    assert np.shares_memory(cast["start_ps"].to_numpy(), raw["start_ps"].to_numpy())
    pd.testing.assert_frame_equal(cast, raw.astype(STEP_COLUMNS))


def test_counted_puts_the_noun_in_the_number_it_takes():
    from traceview.units import counted

    assert [counted(n, "op") for n in (0, 1, 2, 11)] == ["0 ops", "1 op", "2 ops", "11 ops"]
    assert counted(1, "time") == "1 time" and counted(3, "batch", "batches") == "3 batches"

