"""What the devices did with their time: idle gaps, exposed communication, time per step.

Columnar interval arithmetic over the raw op table (traceview.timeline.intervals);
the results are per-op columns the roofline and the reports read. Raw rows reach
their op row through the index :func:`traceview.timeline.aggregate.aggregate_ops`
returns (``rows``), never through a join on names.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.timeline.async_ops import pair_times
from traceview.timeline.grouping import device_rows, exact_sums
from traceview.timeline.intervals import covered_length, union


def judged_and_exposed(raw: pd.DataFrame, ops: pd.DataFrame, rows: np.ndarray, pairs: pd.DataFrame,
                       timed: pd.DataFrame | None = None, exposed_alone: np.ndarray | None = None) -> pd.DataFrame:
    """Add `judged_time_ps` (what the roofline compares with) and `exposed_time_ps`.

    Async starts whose done is in the trace are judged by their in-flight
    time and exposed for the start's and done's own time; their dones are
    then neither judged nor counted again (NaN judged time, 0 exposed).
    Other collectives are exposed for the time no other op overlaps them.
    ``rows``: each raw row's row in ``ops``. From a run's merged host parts (timeline.run_ops):
    ``raw`` holds the rows of devices whose ops overlap, ``timed`` the pairs' times measured on
    the rows the parts kept, ``exposed_alone`` per op the exposed time of its rows on the other
    devices (where nothing overlaps them).
    """
    timed = pair_times(raw, ops, rows, pairs) if timed is None else timed
    paired = timed["in_flight_ps"].notna().to_numpy()
    paired_with: list[str | None] = [None] * len(ops)
    if paired.any():
        started = ops.loc[paired, ["module", "op"]].astype(str).merge(pairs, left_on=["module", "op"],
                                                                      right_on=["module", "start"])
        start_of = dict(zip(zip(started["module"], started["done"]), started["start"]))
        paired_with = [start_of.get((m, o)) for m, o in zip(ops["module"].astype(str), ops["op"].astype(str))]
    is_done = np.array([p is not None for p in paired_with], dtype=bool)
    # The exposed time of paired starts and their dones is the pair's: no need to measure it by overlap.
    out = ops.assign(judged_time_ps=ops["self_time_ps"].astype("float64"),
                     exposed_time_ps=_exposed_time(raw, ops, rows, skip=paired | is_done, alone=exposed_alone))
    if not paired.any():
        return out
    out.loc[paired, "judged_time_ps"] = timed["in_flight_ps"].to_numpy()[paired]
    out.loc[paired, "exposed_time_ps"] = timed["pair_exposed_ps"].to_numpy()[paired]
    out["paired_start"] = pd.Series(paired_with, index=out.index, dtype=object)
    out.loc[is_done, "judged_time_ps"] = np.nan
    out.loc[is_done, "exposed_time_ps"] = 0.0
    return out


def _exposed_time(raw: pd.DataFrame, ops: pd.DataFrame, rows: np.ndarray, skip: np.ndarray,
                  alone: np.ndarray | None = None) -> pd.Series:
    """Per collective op: its time not overlapped by non-collective ops on the same device.

    NaN for ops that are not collectives. A synchronous collective is exposed
    for its whole duration unless other work runs beside it. Ops in ``skip``
    (their exposed time comes from elsewhere) get 0 without being measured. ``alone``: per op,
    exposed time measured elsewhere (rows no other op overlaps), added for the measured ops.
    """
    out = pd.Series(np.nan, index=ops.index, dtype="float64")
    if (raw.empty and alone is None) or "collective_kind" not in ops.columns:
        return out
    is_coll = (ops["collective_kind"].fillna("").astype(str) != "").to_numpy()
    if not is_coll.any():
        return out
    extra = np.where(is_coll & ~skip, alone, 0) if alone is not None else np.zeros(len(ops), dtype=np.int64)
    if raw.empty:
        return pd.Series(extra.astype("float64"), index=ops.index).where(is_coll)
    # In device order: each device's rows are one stretch; exposed time is summed per op in any order.
    by_device = device_rows(raw)
    rows = by_device.take(rows)
    raw_coll = np.append(is_coll, False)[rows]          # row -1 (no op) is no collective
    measured = np.append(is_coll & ~skip, False)[rows]
    starts = by_device.take(raw["start_ps"].to_numpy())
    ends = starts + by_device.take(raw["duration_ps"].to_numpy())
    self_ps = by_device.take(raw["self_ps"].to_numpy())
    exposed = np.zeros(len(raw), dtype=np.int64)
    compute = ~raw_coll & (self_ps == ends - starts)    # leaf rows: a while op's interval would hide its body's ops
    for lo, hi in by_device.spans():
        coll = lo + np.flatnonzero(measured[lo:hi])
        if coll.size == 0:
            continue
        work = lo + np.flatnonzero(compute[lo:hi])
        u_starts, u_ends = union(starts[work], ends[work])
        uncovered = (ends[coll] - starts[coll]) - covered_length(starts[coll], ends[coll], u_starts, u_ends)
        exposed[coll] = np.minimum(uncovered, self_ps[coll])  # nested child ops keep their own time
    sums = exact_sums(rows[measured], exposed[measured], len(ops)) + extra
    return pd.Series(sums.astype("float64"), index=ops.index).where(is_coll)


MAX_STEPS_PER_OP = 1000


def per_step_self_time(raw: pd.DataFrame, ops: pd.DataFrame, rows: np.ndarray) -> pd.Series:
    """Per op, its self time in each step (a list in step order), so regressions can be judged
    against per-step distributions even from a stored JSON baseline. None without steps (or when
    none of the op's executions falls in the first MAX_STEPS_PER_OP steps). ``rows``: each raw
    row's row in ``ops``."""
    out = pd.Series([None] * len(ops), index=ops.index, dtype=object)
    if raw.empty:
        return out
    step = raw["step"].to_numpy()
    in_step = step >= 0
    if not in_step.any():
        return out
    steps = np.sort(pd.unique(step[in_step]))[:MAX_STEPS_PER_OP]
    n_steps = len(steps)
    if steps[0] == 0 and steps[-1] == n_steps - 1:      # steps 0..n-1: a step is its own position
        where = step.astype(np.int64)
        kept = np.flatnonzero(in_step & (rows >= 0) & (step < n_steps))
    else:
        where = np.minimum(np.searchsorted(steps, step), n_steps - 1)
        kept = np.flatnonzero(in_step & (rows >= 0) & (steps[where] == step))
    sums = exact_sums(rows[kept] * n_steps + where[kept], raw["self_ps"].to_numpy()[kept], len(ops) * n_steps)
    sums = sums.reshape(len(ops), n_steps)
    counted = np.bincount(rows[kept], minlength=len(ops)) > 0
    lists = [sums[i].tolist() if counted[i] else None for i in range(len(ops))]
    return pd.Series(lists, index=ops.index, dtype=object)
