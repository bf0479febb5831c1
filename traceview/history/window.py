"""The stable window ``traceview check --history`` compares against: the runs since the last change.

The window is every run since the latest significant change point of the step time (all runs when
there is none); pooled into one regress Snapshot, it is a baseline like any other: its step times
are the window's steps one after another, each op's per-step times likewise, op totals summed (so
per-step figures are the window's means), and MFU and each peak memory the window's medians.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.errors import UserError
from traceview.history.store import HistoryStore
from traceview.history.trends import DEFAULT_LAST, build_report
from traceview.regress.baseline import OP_COLUMNS, Snapshot
from traceview.units import PS_PER_US
from traceview.vocabulary import BOUNDS_AND_IDLE

WINDOW_METRIC = "step_time"


def stable_window(store: HistoryStore, confidence: float = 0.95) -> tuple[pd.DataFrame, str | None]:
    """The runs of the window (oldest first) and the label of the change it starts at (None: no change)."""
    report = build_report(store, [WINDOW_METRIC], confidence=confidence)
    runs = store.runs(last=DEFAULT_LAST)          # the runs the report looked at
    if runs.empty:
        return runs, None
    series = report.series_named(WINDOW_METRIC)
    change = series.last_change if series else None
    if change is None:
        return runs, None
    start = int(np.flatnonzero(runs["label"].to_numpy() == change.label)[0])
    return runs.iloc[start:].reset_index(drop=True), change.label


def _samples(metrics: pd.DataFrame, name: str) -> list[float]:
    rows = metrics[metrics["metric"] == name]
    out: list[float] = []
    for samples, value in zip(rows["samples"], rows["value"]):
        if samples:
            out += [s for s in samples if s is not None]
        elif value is not None and np.isfinite(value):
            out.append(float(value))
    return out


def _pooled_ops(ops: pd.DataFrame, runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Ops summed over the window (descriptive columns from the newest run holding the op) and their
    per-step times, steps numbered one after another over the runs."""
    if ops.empty:
        return pd.DataFrame(columns=OP_COLUMNS), None
    order = {run_id: i for i, run_id in enumerate(runs["id"])}
    offsets = dict(zip(runs["id"], np.concatenate([[0], np.cumsum(runs["steps"].to_numpy())[:-1]])))
    ops = ops.assign(_order=ops["run_id"].map(order)).sort_values("_order", ascending=False, kind="stable")
    sums = ["occurrences", "time_ps", "judged_time_ps", "roofline_time_ps", "flops", "bytes", "collective_bytes"]
    grouped = ops.groupby(["module", "op"], sort=False, dropna=False)
    pooled = grouped.first().drop(columns=sums).join(grouped[sums].sum(min_count=1)).reset_index()
    for column in ("module", "op", "fingerprint", "opcode", "category", "shape", "dtype", "source_file", "op_name"):
        pooled[column] = pooled[column].fillna("").astype(str)
    pooled["bound"] = pooled["bound"].astype(object).where(pooled["bound"].notna(), None)
    rows = [(module, op, int(offsets[run_id]) + i, t)
            for run_id, module, op, per_step in zip(ops["run_id"], ops["module"], ops["op"], ops["step_times_ps"])
            if per_step for i, t in enumerate(per_step) if t is not None]
    op_steps = pd.DataFrame(rows, columns=["module", "op", "step", "time_ps"]) if rows else None
    return pooled[OP_COLUMNS], op_steps


def window_snapshot(store: HistoryStore, runs: pd.DataFrame, label: str) -> Snapshot:
    """The runs pooled into one Snapshot (see the module docstring)."""
    if runs.empty:
        raise UserError(f"{store.location.shown}: no runs recorded yet")
    ids = [int(i) for i in runs["id"]]
    metrics = store.metrics(ids)
    steps_us = _samples(metrics, "step_time") if int(runs["steps"].min()) > 0 else []
    ops, op_steps = _pooled_ops(store.ops(ids), runs)

    def median(name: str) -> float | None:
        values = metrics.loc[metrics["metric"] == name, "value"].dropna()
        return float(values.median()) if len(values) else None

    by_bound = {}
    for bound in BOUNDS_AND_IDLE:
        rows = metrics[metrics["metric"] == f"time_by_bound:{bound}"]
        if len(rows):
            by_bound[bound] = float(sum(_samples(rows, f"time_by_bound:{bound}"))) * PS_PER_US
    memory = {}
    for name in metrics["metric"].unique():
        if name.count(":") >= 2 and name.startswith("peak_memory:"):
            value = median(name)
            if value is not None:
                memory[name.removeprefix("peak_memory:")] = int(value)
    device = metrics.loc[metrics["metric"] == "device_time", "value"].dropna()
    targets = runs["target"].dropna()
    return Snapshot(
        kind="trace", label=label, ops=ops,
        step_times_ps=np.asarray(steps_us, dtype="float64") * PS_PER_US, op_steps=op_steps,
        time_by_bound_ps=by_bound if len(by_bound) == len(BOUNDS_AND_IDLE) and steps_us else None,
        mfu=median("mfu"), target=str(targets.iloc[-1]) if len(targets) else None,
        device_time_ps=float(device.sum()) * PS_PER_US if len(device) else None,
        memory=memory)
