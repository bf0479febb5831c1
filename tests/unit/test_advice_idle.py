"""Idle causes and stragglers on hand-built timelines, against hand calculations (times in ps)."""

from __future__ import annotations

import pandas as pd

from traceview.advice.idle import CAUSES, idle_causes
from traceview.advice.stragglers import stragglers

HOST = "h"


def ops_table(rows: list[tuple[str, str, int, int, int]]) -> pd.DataFrame:
    """(device, op, start, end, step) -> an op table as parsers.profile declares it."""
    return pd.DataFrame({
        "host": HOST, "device": [f"{HOST}/{r[0]}" for r in rows], "line": "XLA Ops", "op": [r[1] for r in rows],
        "start_ps": [r[2] for r in rows], "duration_ps": [r[3] - r[2] for r in rows], "step": [r[4] for r in rows]})


def host_table(rows: list[tuple[str, str, int, int]]) -> pd.DataFrame:
    """(thread, name, start, end) -> a host event table."""
    return pd.DataFrame({"host": HOST, "thread": [r[0] for r in rows], "name": [r[1] for r in rows],
                         "start_ps": [r[2] for r in rows], "duration_ps": [r[3] - r[2] for r in rows]})


def test_one_device_gaps_split_by_the_first_cause_that_holds() -> None:
    # Device busy [0,10) [30,40) [60,70) [80,90): gaps [10,30) [40,60) [70,80), idle 50.
    ops = ops_table([("TPU:0", "fusion", 0, 10, 0), ("TPU:0", "fusion", 30, 40, 0),
                     ("TPU:0", "fusion", 60, 70, 1), ("TPU:0", "fusion", 80, 90, 1)])
    host = host_table([
        ("python", "train", 0, 75),                       # the step annotation around everything
        ("python", "$data.py:3 load_batch", 10, 25),      # host work in gap 1: 15
        ("python", "PjitFunction(step)", 25, 30),         # dispatch: 5
        ("python", "$api.py:1 block_until_ready", 40, 55),  # a wait with no other device busy: launch 15
        ("python", "np.asarray(jax.Array)", 55, 60),      # a device-to-host copy: transfer 5
        ("worker", "$other.py:1 unrelated", 10, 80),      # a thread that never dispatches: not counted
    ])                                                    # [70,75): the annotation alone: host 5; [75,80) unknown
    steps = pd.DataFrame({"step": [0, 1], "start_ps": [0, 50], "time_ps": [50, 45]})
    result = idle_causes(ops, host, steps)
    assert result.idle_ps == 50
    assert result.causes == {"host": 20, "launch": 20, "sync": 0, "transfer": 5, "unknown": 5}
    assert result.feeding_threads == ["h/python"]
    host_evidence = {e["name"]: e["time_ps"] for e in result.evidence["host"]}
    assert host_evidence == {"$data.py:3 load_batch": 15, "train": 5}    # self time: nested time goes to the leaf
    assert {e["name"]: e["time_ps"] for e in result.evidence["launch"]} == {
        "$api.py:1 block_until_ready": 15, "PjitFunction(step)": 5}
    # step 0 window [0,50): gap 1 (host 15, launch 5) and [40,50) of gap 2 (launch 10)
    step0 = result.per_step.set_index("step").loc[0]
    assert (step0["host_ps"], step0["launch_ps"], step0["transfer_ps"], step0["idle_ps"]) == (15, 15, 0, 30)
    step1 = result.per_step.set_index("step").loc[1]
    assert (step1["launch_ps"], step1["transfer_ps"], step1["host_ps"], step1["unknown_ps"]) == (5, 5, 5, 5)
    device = result.per_device.iloc[0]
    assert sum(device[f"{c}_ps"] for c in CAUSES) == device["idle_ps"] == 50


def test_a_device_waiting_at_a_collective_for_a_busy_peer_is_sync() -> None:
    # TPU:1 busy [0,50); TPU:0 runs [0,10), then an all-reduce at [50,60): its gap [10,50) waits for TPU:1.
    # A host wait [20,30) on the feeding thread would be launch without the peer; with it, sync too.
    ops = ops_table([("TPU:0", "fusion", 0, 10, 0), ("TPU:0", "all-reduce.1", 50, 60, 0),
                     ("TPU:1", "fusion", 0, 50, 0), ("TPU:1", "all-reduce.1", 50, 60, 0)])
    host = host_table([("main", "PjitFunction(step)", 0, 5), ("main", "block_until_ready", 20, 30)])
    result = idle_causes(ops, host)
    assert result.causes == {"host": 0, "launch": 0, "sync": 40, "transfer": 0, "unknown": 0}
    names = {e["name"]: (e["time_ps"], e["source"]) for e in result.evidence["sync"]}
    assert names["before all-reduce.1"] == (40, "device")
    assert names["block_until_ready"] == (10, "host")


def test_no_feeding_thread_leaves_the_gaps_unknown_and_says_why() -> None:
    ops = ops_table([("GPU:0", "gemm", 0, 10, -1), ("GPU:0", "gemm", 20, 30, -1)])
    result = idle_causes(ops, host_table([("pool", "$x.py:1 f", 0, 30)]))
    assert result.causes["unknown"] == 10 and result.idle_ps == 10
    assert result.reason and "dispatches" in result.reason


def test_straggler_is_the_device_that_finishes_last_in_most_steps() -> None:
    rows = []
    # step 0: A [0,10) B [0,12) C [2,15); step 1: A [20,30) B [21,35) C [20,31); step 2: A [40,50) B [40,49) C [43,58)
    for step, parts in enumerate([[("A", 0, 10), ("B", 0, 12), ("C", 2, 15)],
                                  [("A", 20, 30), ("B", 21, 35), ("C", 20, 31)],
                                  [("A", 40, 50), ("B", 40, 49), ("C", 43, 58)]]):
        for device, start, end in parts:
            rows += [(device, "fusion", start, start + 1, step), (device, "fusion", end - 1, end, step)]
    result = stragglers(ops_table(rows))
    table = result.steps.set_index("step")
    assert list(table["last_to_finish"]) == ["h/C", "h/B", "h/C"]
    assert list(table["last_to_start"]) == ["h/C", "h/B", "h/C"]
    assert list(table["finish_lag_ps"]) == [15 - 10, 35 - 30, 58 - 49]
    assert list(table["start_lag_ps"]) == [2, 1, 3]
    assert list(table["wait_ps"]) == [(15 - 10) + (15 - 12), (35 - 30) + (35 - 31), (58 - 50) + (58 - 49)]
    assert result.device == "h/C" and result.device_late_steps == 2
    assert result.host is None                            # one host


def test_no_straggler_named_without_a_majority() -> None:
    rows = []
    for step, late in enumerate(["A", "B", "C", "A"]):
        for device in "ABC":
            rows.append((device, "fusion", 100 * step, 100 * step + (20 if device == late else 10), step))
    result = stragglers(ops_table(rows))
    assert result.device is None and result.most_often_last == "h/A" and result.device_late_steps == 2
