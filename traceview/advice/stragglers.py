"""Stragglers: per step, the device (and host) that started last and the one that finished last.

A device's part of a step runs from its first op start to its last op end among the ops the trace
puts in that step. Per step: ``last_to_start`` and ``start_lag_ps`` (its start less the earliest
start), ``last_to_finish`` and ``finish_lag_ps`` (its end less the earliest end), and ``wait_ps``:
the time the other devices spent between their own end and the straggler's end (what a step that
ends in a synchronisation costs them). A device that finishes last in more than half of the steps
(with at least two steps and two devices) is named the straggler; the same for hosts in a multi-host
run, with a host's part of a step running from its devices' first start to their last end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceview.timeline.activity import Activity, reduce_activity

STEP_COLUMNS = ["step", "devices", "last_to_start", "start_lag_ps", "last_to_finish", "finish_lag_ps", "wait_ps"]


@dataclass
class Stragglers:
    """Per-step lateness of devices (``steps``) and hosts (``host_steps``, only with several hosts)."""

    steps: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=STEP_COLUMNS))
    device: str | None = None          # finished last in more than half of the steps
    most_often_last: str | None = None  # finished last in the most steps (a majority or not)
    device_late_steps: int = 0         # how many steps ``most_often_last`` finished last in
    host_steps: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=STEP_COLUMNS))
    host: str | None = None
    host_most_often_last: str | None = None
    host_late_steps: int = 0
    reason: str | None = None          # why there is no per-step table


def stragglers(ops: pd.DataFrame | Activity) -> Stragglers:
    """Stragglers from the run's activity (``timeline.activity``: each (step, device, host)'s first start
    and last end), or from the op executions (``parsers.profile.OP_COLUMNS``), reduced here."""
    activity = ops if isinstance(ops, Activity) else reduce_activity(ops)
    if activity.n_rows == 0:
        return Stragglers(reason="the trace has no device op executions")
    frame = activity.step_spans
    if frame.empty:
        return Stragglers(reason="the trace marks no steps")
    out = Stragglers()
    if frame["device"].nunique() < 2:
        out.reason = "one device: no straggler to find"
        return out
    out.steps, out.most_often_last, out.device_late_steps = _late(frame, "device")
    out.device = out.most_often_last if 2 * out.device_late_steps > len(out.steps) >= 2 else None
    if frame["host"].nunique() >= 2:
        out.host_steps, out.host_most_often_last, out.host_late_steps = _late(frame, "host")
        out.host = out.host_most_often_last if 2 * out.host_late_steps > len(out.host_steps) >= 2 else None
    return out


def _late(frame: pd.DataFrame, who: str) -> tuple[pd.DataFrame, str | None, int]:
    parts = frame.groupby(["step", who], sort=True).agg(start=("start", "min"), end=("end", "max")).reset_index()
    counts = parts.groupby("step", sort=True)["start"].transform("size")
    parts = parts[counts.to_numpy() >= 2].reset_index(drop=True)
    by_step = parts.groupby("step", sort=True)
    first_start, last_start = by_step["start"].min(), by_step["start"].max()
    first_end, last_end = by_step["end"].min(), by_step["end"].max()
    size = by_step.size()
    table = pd.DataFrame({
        "step": size.index.to_numpy(dtype=np.int64), "devices": size.to_numpy(dtype=np.int64),
        "last_to_start": parts.loc[by_step["start"].idxmax().to_numpy(), who].to_numpy(),
        "start_lag_ps": (last_start - first_start).to_numpy(dtype=np.int64),
        "last_to_finish": parts.loc[by_step["end"].idxmax().to_numpy(), who].to_numpy(),
        "finish_lag_ps": (last_end - first_end).to_numpy(dtype=np.int64),
        "wait_ps": (last_end * size - by_step["end"].sum()).to_numpy(dtype=np.int64)}, columns=STEP_COLUMNS)
    late = table.loc[table["finish_lag_ps"] > 0, "last_to_finish"].value_counts()
    if late.empty:
        return table, None, 0
    top = late[late == late.iloc[0]].index.astype(str)
    return table, str(sorted(top)[0]), int(late.iloc[0])
