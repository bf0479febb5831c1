"""The bubble of an SPMD pipeline, measured in the trace from its loop's ticks.

In an SPMD pipeline every device runs every tick of the schedule's loop, holding a microbatch or not: stage
s works on ticks s .. s + n − p (n = v·m + p − 1 ticks) and computes on nothing in the first s ticks and the
last p − 1 − s. With equal ticks that is (p − 1)/n of the loop's time, the formula; measured, it is the time
of those ticks over the time of all ticks, whatever each tick took. Ticks are found as a program's calls are:
the loop body's own ops run once per tick, so on each device the k-th tick starts at the earliest k-th
occurrence of the ops that run as often as most (n × the loop's runs); a tick lasts until the next starts
(the last of a run, until its last op ends).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceview.timeline.occurrences import run_bounds

_DEVICE_ID = re.compile(r"(\d+)$")


@dataclass
class SpmdBubble:
    bubble_fraction: float              # mean over devices and loop runs
    per_stage: dict[int, float]         # stage -> its mean
    runs: int                           # loop runs measured (per device, the most)
    tick_us: float                      # the median tick
    how: str


def device_number(device: str) -> int | None:
    """The device id at the end of a trace device's name (``localhost/CPU:3`` -> 3)."""
    m = _DEVICE_ID.search(device)
    return int(m.group(1)) if m else None


def measure_spmd(executions: pd.DataFrame, module: str, body_ops: set[str], trips: int, stages: int,
                 stage_of: Callable[[str], int | None]) -> SpmdBubble | None:
    """The measured bubble of the loop ``body_ops`` of ``module`` (``trips`` ticks per run), or None when the
    trace does not show its ticks. ``stage_of``: a trace device's stage (its coordinate on the pipeline axis)."""
    if executions is None or executions.empty or trips < stages or not body_ops:
        return None
    rows = executions[(executions["module"].astype(str) == module) & executions["op"].astype(str).isin(body_ops)]
    fractions: dict[int, list[float]] = {}
    ticks: list[np.ndarray] = []
    runs = 0
    for device, mine in rows.groupby("device", observed=True):
        stage = stage_of(str(device))
        times = _tick_times(mine, trips)
        if stage is None or times is None or not 0 <= stage < stages:
            continue
        per_run = times.reshape(-1, trips)
        idle = np.r_[0:stage, stage + trips - stages + 1:trips]
        share = per_run[:, idle].sum(axis=1) / per_run.sum(axis=1)
        fractions.setdefault(stage, []).extend(share.tolist())
        ticks.append(times)
        runs = max(runs, len(per_run))
    if not fractions:
        return None
    per_stage = {s: float(np.mean(v)) for s, v in sorted(fractions.items())}
    every = [x for v in fractions.values() for x in v]
    tick = float(np.median(np.concatenate(ticks))) / 1e6
    how = (f"measured in the trace: {runs} run(s) of the loop on {sum(len(v) for v in fractions.values()) // runs} "
           f"device(s), {trips} ticks each (median tick {tick:.3g} us); stage s computes on nothing in its first "
           "s and last p - 1 - s ticks: their time over all ticks' time, mean over devices and runs")
    return SpmdBubble(float(np.mean(every)), per_stage, runs, tick, how)


def _tick_times(rows: pd.DataFrame, trips: int) -> np.ndarray | None:
    """Each tick's time (ps) on one device, in order; None unless the ticks make whole runs of the loop."""
    rows = rows.sort_values("start_ps", kind="stable")
    start = rows["start_ps"].to_numpy(dtype=np.int64)
    bounds, last = run_bounds(rows["op"].astype(str).to_numpy(), start,
                              start + rows["duration_ps"].to_numpy(dtype=np.int64))
    total = len(bounds)
    if total < trips or total % trips:
        return None
    times = np.empty(total, dtype=np.float64)
    times[:-1] = bounds[1:] - bounds[:-1]
    ends_run = (np.arange(total) + 1) % trips == 0            # a run's last tick: until its ops end
    times[ends_run] = (last - bounds)[ends_run]
    return times if (times > 0).all() else None
