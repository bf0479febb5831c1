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

from traceview.timeline.activity import Activity, joined_spans, names_apart, reduce_activity
from traceview.timeline.forked import batches, fork_map_items

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


def stragglers(ops: pd.DataFrame | Activity, jobs: int = 1) -> Stragglers:
    """Stragglers from the run's activity (``timeline.activity``: each (step, device, host)'s first start
    and last end), or from the op executions (``parsers.profile.OP_COLUMNS``), reduced here. ``jobs``:
    processes a pod's hosts may be summed up in (timeline.forked)."""
    activity = ops if isinstance(ops, Activity) else reduce_activity(ops)
    if activity.n_rows == 0:
        return Stragglers(reason="the trace has no device op executions")
    tables = [t for t in activity.span_tables() if not t.empty]
    if not tables:
        return Stragglers(reason="the trace marks no steps")
    out = Stragglers()
    names = {who: [_names_in(t[who]) for t in tables] for who in ("device", "host")}
    if _distinct(names["device"]) < 2:
        out.reason = "one device: no straggler to find"
        return out
    whos = ["device", "host"] if _distinct(names["host"]) >= 2 else ["device"]
    per = _per_step_of(tables, whos, jobs, names)
    out.steps, out.most_often_last, out.device_late_steps = _ranked(per["device"])
    out.device = out.most_often_last if 2 * out.device_late_steps > len(out.steps) >= 2 else None
    if "host" in per:
        out.host_steps, out.host_most_often_last, out.host_late_steps = _ranked(per["host"])
        out.host = out.host_most_often_last if 2 * out.host_late_steps > len(out.host_steps) >= 2 else None
    return out


_MISSING = object()     # a row with no name: the same in every table


def _names_in(column: pd.Series) -> set:
    """The names a column holds (:data:`_MISSING` for a row with none); a categorical's from its codes."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()
        used = np.unique(codes)
        names = set(column.cat.categories[used[used >= 0]])
        return names | {_MISSING} if used.size and used[0] < 0 else names
    return {_MISSING if pd.isna(name) else name for name in column.unique()}


def _distinct(names: list[set]) -> int:
    """How many names the tables hold together (rows with none not counted)."""
    return len(set().union(*names) - {_MISSING})


def _per_step_of(tables: list[pd.DataFrame], whos: list[str], jobs: int,
                 names: dict[str, list[set]]) -> dict[str, _PerStep]:
    """Per ``who`` (device, host): its per-step sums. ``tables``: the step spans, one table or one per host
    (``names``: per ``who``, the names each holds); a ``who`` that is in no two hosts' tables is summed up host
    by host and the sums merged step by step (a pod: never one table of every (step, device) at once), all
    such in one pass over the hosts."""
    apart = [who for who in whos if names_apart(names[who])] if len(tables) > 1 else []
    out: dict[str, _PerStep] = {}
    if apart:
        def run_of_hosts(run: range) -> list[_PerStep]:
            return [_merged_per_step([_per_step(tables[i], who) for i in run]) for who in apart]

        # each forked task sums up a run of hosts and merges them before its result travels
        runs = fork_map_items(run_of_hosts, batches(len(tables), jobs), jobs)
        out = {who: _merged_per_step([run[k] for run in runs]) for k, who in enumerate(apart)}
    rest = [who for who in whos if who not in out]
    if rest:
        frame = tables[0] if len(tables) == 1 else joined_spans(tables)
        out.update({who: _per_step(frame, who) for who in rest})
    return {who: out[who] for who in whos}


@dataclass
class _PerStep:
    """Per step (ascending): how many take part, the earliest and latest start and end, who has the latest
    (the first in name order among ties), and the sum of their ends."""

    step: np.ndarray
    count: np.ndarray
    first_start: np.ndarray
    last_start: np.ndarray
    last_starter: np.ndarray
    first_end: np.ndarray
    last_end: np.ndarray
    last_finisher: np.ndarray
    end_sum: np.ndarray


def _per_step(frame: pd.DataFrame, who: str) -> _PerStep:
    parts = frame.groupby(["step", who], sort=True, observed=True).agg(
        start=("start", "min"), end=("end", "max")).reset_index()
    by_step = parts.groupby("step", sort=True)
    names = parts[who].to_numpy()
    return _PerStep(by_step.size().index.to_numpy(dtype=np.int64), by_step.size().to_numpy(dtype=np.int64),
                    by_step["start"].min().to_numpy(dtype=np.int64), by_step["start"].max().to_numpy(dtype=np.int64),
                    names[by_step["start"].idxmax().to_numpy()], by_step["end"].min().to_numpy(dtype=np.int64),
                    by_step["end"].max().to_numpy(dtype=np.int64), names[by_step["end"].idxmax().to_numpy()],
                    by_step["end"].sum().to_numpy(dtype=np.int64))


def _merged_per_step(parts: list[_PerStep]) -> _PerStep:
    """Hosts' per-step sums merged (no name in two hosts): counts and sums add, extremes combine, ties of the
    latest go to the first name."""
    steps = np.unique(np.concatenate([p.step for p in parts])) if parts else np.zeros(0, dtype=np.int64)
    n = steps.size
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    out = _PerStep(steps, np.zeros(n, np.int64), np.full(n, big), np.full(n, small), np.full(n, "", dtype=object),
                   np.full(n, big), np.full(n, small), np.full(n, "", dtype=object), np.zeros(n, np.int64))
    for p in parts:
        at = np.searchsorted(steps, p.step)
        out.count[at] += p.count
        out.end_sum[at] += p.end_sum
        np.minimum.at(out.first_start, at, p.first_start)
        np.minimum.at(out.first_end, at, p.first_end)
        for value, name, latest, who in ((p.last_start, p.last_starter, out.last_start, out.last_starter),
                                         (p.last_end, p.last_finisher, out.last_end, out.last_finisher)):
            names = np.asarray([str(x) for x in name], dtype=object)
            wins = (value > latest[at]) | ((value == latest[at]) & (names < who[at]))
            latest[at[wins]] = value[wins]
            who[at[wins]] = names[wins]
    return out


def _ranked(per: _PerStep) -> tuple[pd.DataFrame, str | None, int]:
    keep = per.count >= 2
    table = pd.DataFrame({
        "step": per.step[keep], "devices": per.count[keep], "last_to_start": per.last_starter[keep],
        "start_lag_ps": per.last_start[keep] - per.first_start[keep], "last_to_finish": per.last_finisher[keep],
        "finish_lag_ps": per.last_end[keep] - per.first_end[keep],
        "wait_ps": per.last_end[keep] * per.count[keep] - per.end_sum[keep]}, columns=STEP_COLUMNS)
    late = table.loc[table["finish_lag_ps"] > 0, "last_to_finish"].value_counts()
    if late.empty:
        return table, None, 0
    top = late[late == late.iloc[0]].index.astype(str)
    return table, str(sorted(top)[0]), int(late.iloc[0])
