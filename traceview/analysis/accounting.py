"""Time that adds up: the devices' time by bound, per device and per step, and projected totals.

Reads the roofline labels of the aggregated ops and the busy split the combined host parts measure
(``hostreduce.run_ops.RunOps.busy_split``); the interval arithmetic is in traceview.timeline.devices
(busy = union of op intervals; busy + idle = span per device; bound parts add up to busy, overlapped
time going to the first of compute, memory, communication, unknown).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.vocabulary import BOUNDS


def bound_codes(ops: pd.DataFrame) -> np.ndarray:
    """Per row of ``ops``, its bound as an index into BOUNDS (-1: none)."""
    if "bound" not in ops.columns:
        return np.full(len(ops), -1, dtype=np.int64)
    return pd.Categorical(ops["bound"], categories=list(BOUNDS)).codes.astype(np.int64)


def totals_by_bound(per_device: dict[str, np.ndarray]) -> dict[str, float]:
    """Per-device busy time by bound (devices in name order) summed over devices."""
    total = np.sum(list(per_device.values()), axis=0) if per_device else np.zeros(len(BOUNDS))
    return {b: float(v) for b, v in zip(BOUNDS, total)}


def without_step_bounds(steps: pd.DataFrame) -> pd.DataFrame:
    """``steps`` without the columns an earlier target added: time by bound, idle, and the projected time."""
    return steps.drop(columns=[c for c in steps.columns if c.endswith("_ps") and c[:-3] in (*BOUNDS, "idle")
                               or c == "projected_time_ps"])


def with_step_bounds(steps: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """``steps`` (without bound columns) plus the per-step busy split of timeline.devices.step_busy_by_label."""
    table = table.rename(columns={i: f"{b}_ps" for i, b in enumerate(BOUNDS)})
    out = steps.merge(table.drop(columns="active_devices"), on="step", how="left")
    out = out.fillna({f"{b}_ps": 0.0 for b in BOUNDS})
    out["idle_ps"] = (out["time_ps"] - out[[f"{b}_ps" for b in BOUNDS]].sum(axis=1)).clip(lower=0)
    return out


def projected_step_times(steps: pd.DataFrame, ops: pd.DataFrame, ratio: np.ndarray) -> np.ndarray:
    """Each step's time with its busy part (per device: time_ps - idle_ps) scaled as the self time of
    the ops in it scales under ``ratio`` (projected / measured per op); idle kept as measured."""
    if steps.empty:
        return np.zeros(0)
    time = steps["time_ps"].to_numpy(dtype="float64")
    if "step_times_ps" not in ops.columns:
        return time
    n_steps = len(steps)
    measured, projected = np.zeros(n_steps), np.zeros(n_steps)
    for lists, r in zip(ops["step_times_ps"], ratio):
        if isinstance(lists, list) and np.isfinite(r):
            values = np.asarray(lists[:n_steps], dtype="float64")
            measured[: len(values)] += values
            projected[: len(values)] += values * r
    idle = steps["idle_ps"].to_numpy(dtype="float64") if "idle_ps" in steps.columns else np.zeros(n_steps)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(measured > 0, projected / measured, 1.0)
    return idle + (time - idle) * scale
