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

import pandas as pd

from traceview.hostreduce.activity import Activity, joined_spans, names_apart, reduce_activity
from traceview.runtime.forked import batches, fork_map_items
from traceview.timeline.lateness import WHOS, PerStep, distinct, merged_per_step, names_in, per_step
from traceview.timeline.packed_frame import Table, as_frame

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
    """Stragglers from the run's activity (``hostreduce.activity``: each (step, device, host)'s first start
    and last end), or from the op executions (``parsers.profile.OP_COLUMNS``), reduced here. ``jobs``:
    processes a pod's hosts may be summed up in (runtime.forked)."""
    activity = ops if isinstance(ops, Activity) else reduce_activity(ops)
    if activity.n_rows == 0:
        return Stragglers(reason="the trace has no device op executions")
    tables = [t for t in activity.span_tables() if not t.empty]
    if not tables:
        return Stragglers(reason="the trace marks no steps")
    out = Stragglers()
    summaries = activity.host_summaries if activity.host_spans is not None else None
    if summaries is not None and len(summaries) != len(tables):
        summaries = None
    names = {who: [s.names[who] for s in summaries] if summaries is not None else [names_in(as_frame(t)[who]) for t in tables]
             for who in WHOS}
    if distinct(names["device"]) < 2:
        out.reason = "one device: no straggler to find"
        return out
    whos = ["device", "host"] if distinct(names["host"]) >= 2 else ["device"]
    per = _per_step_of(tables, whos, jobs, names, activity.span_sums if activity.host_spans is not None else None)
    out.steps, out.most_often_last, out.device_late_steps = _ranked(per["device"])
    out.device = out.most_often_last if 2 * out.device_late_steps > len(out.steps) >= 2 else None
    if "host" in per:
        out.host_steps, out.host_most_often_last, out.host_late_steps = _ranked(per["host"])
        out.host = out.host_most_often_last if 2 * out.host_late_steps > len(out.host_steps) >= 2 else None
    return out


def _per_step_of(tables: list[Table], whos: list[str], jobs: int,
                 names: dict[str, list[set]], sums: dict[str, PerStep] | None = None) -> dict[str, PerStep]:
    """Per ``who`` (device, host): its per-step sums. ``tables``: the step spans, one table or one per host
    (``names``: per ``who``, the names each holds); a ``who`` that is in no two hosts' tables is summed up host
    by host and the sums merged step by step (a pod: never one table of every (step, device) at once), all
    such in one pass over the hosts; or taken from ``sums``, the hosts' sums folded as they arrived (the run's
    ``Activity.span_sums``), where given."""
    apart = [who for who in whos if names_apart(names[who])] if len(tables) > 1 else []
    out: dict[str, PerStep] = {}
    if apart and sums is not None:
        out = {who: sums[who] for who in apart}
    elif apart:
        def run_of_hosts(run: range) -> list[PerStep]:
            return [merged_per_step([per_step(tables[i], who) for i in run]) for who in apart]

        # each forked task sums up a run of hosts and merges them before its result travels
        runs = fork_map_items(run_of_hosts, batches(len(tables), jobs), jobs)
        out = {who: merged_per_step([run[k] for run in runs]) for k, who in enumerate(apart)}
    rest = [who for who in whos if who not in out]
    if rest:
        frame = tables[0] if len(tables) == 1 else joined_spans(tables)
        out.update({who: per_step(frame, who) for who in rest})
    return {who: out[who] for who in whos}


def _ranked(per: PerStep) -> tuple[pd.DataFrame, str | None, int]:
    keep = per.count >= 2
    table = pd.DataFrame({
        "step": per.step[keep], "devices": per.count[keep], "last_to_start": per.names[per.last_starter[keep]],
        "start_lag_ps": per.last_start[keep] - per.first_start[keep], "last_to_finish": per.names[per.last_finisher[keep]],
        "finish_lag_ps": per.last_end[keep] - per.first_end[keep],
        "wait_ps": per.last_end[keep] * per.count[keep] - per.end_sum[keep]}, columns=STEP_COLUMNS)
    late = table.loc[table["finish_lag_ps"] > 0, "last_to_finish"].value_counts()
    if late.empty:
        return table, None, 0
    top = late[late == late.iloc[0]].index.astype(str)
    return table, str(sorted(top)[0]), int(late.iloc[0])
