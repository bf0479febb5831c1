"""What the devices did with their time: idle gaps, exposed communication, time per step.

Columnar interval arithmetic over the raw op table (traceview.timeline.intervals);
the results are per-op columns the roofline and the reports read. Raw rows reach
their op row through the index :func:`traceview.timeline.aggregate.aggregate_ops`
returns (``rows``), never through a join on names.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.runtime.forked import ForEach, added, one_chunk
from traceview.timeline.async_ops import pair_times_in_chunks
from traceview.timeline.grouping import device_rows, exact_sums
from traceview.timeline.intervals import covered_length, union


def judged_and_exposed(raw: pd.DataFrame, ops: pd.DataFrame, rows: np.ndarray, pairs: pd.DataFrame,
                       timed: pd.DataFrame | None = None, exposed_alone: np.ndarray | None = None) -> pd.DataFrame:
    """Add `judged_time_ps` (what the roofline compares with) and `exposed_time_ps`.

    Async starts whose done is in the trace are judged by their in-flight
    time and exposed for the start's and done's own time; their dones are
    then neither judged nor counted again (NaN judged time, 0 exposed).
    Other collectives are exposed for the time no other op overlaps them.
    ``rows``: each raw row's row in ``ops``.
    """
    return judged_and_exposed_in_chunks(one_chunk(raw, rows), ops, pairs, timed, exposed_alone)


def judged_and_exposed_in_chunks(for_each: ForEach, ops: pd.DataFrame, pairs: pd.DataFrame,
                                 timed: pd.DataFrame | None = None,
                                 exposed_alone: np.ndarray | None = None) -> pd.DataFrame:
    """:func:`judged_and_exposed` over rows in chunks (``for_each``: runtime.forked), each holding whole
    devices. From a
    run's merged host parts (hostreduce.run_ops): the chunks hold the rows of devices whose ops overlap,
    ``timed`` the pairs' times measured on the rows the parts kept, ``exposed_alone`` per op the exposed time
    of its rows on the other devices (where nothing overlaps them)."""
    timed = pair_times_in_chunks(for_each, ops, pairs) if timed is None else timed
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
                     exposed_time_ps=_exposed_time(for_each, ops, skip=paired | is_done, alone=exposed_alone))
    if not paired.any():
        return out
    out.loc[paired, "judged_time_ps"] = timed["in_flight_ps"].to_numpy()[paired]
    out.loc[paired, "exposed_time_ps"] = timed["pair_exposed_ps"].to_numpy()[paired]
    out["paired_start"] = pd.Series(paired_with, index=out.index, dtype=object)
    out.loc[is_done, "judged_time_ps"] = np.nan
    out.loc[is_done, "exposed_time_ps"] = 0.0
    return out


def _exposed_time(for_each: ForEach, ops: pd.DataFrame, skip: np.ndarray, alone: np.ndarray | None = None) -> pd.Series:
    """Per collective op: its time not overlapped by non-collective ops on the same device.

    NaN for ops that are not collectives. A synchronous collective is exposed
    for its whole duration unless other work runs beside it. Ops in ``skip``
    (their exposed time comes from elsewhere) get 0 without being measured. ``alone``: per op,
    exposed time measured elsewhere (rows no other op overlaps), added for the measured ops.
    """
    out = pd.Series(np.nan, index=ops.index, dtype="float64")
    if "collective_kind" not in ops.columns:
        return out
    is_coll = (ops["collective_kind"].fillna("").astype(str) != "").to_numpy()
    if not is_coll.any():
        return out
    sums = np.where(is_coll & ~skip, alone, 0) if alone is not None else np.zeros(len(ops), dtype=np.int64)
    measured = False
    for found in for_each(lambda raw, rows: None if raw.empty else
                          _measured_exposure(raw, rows, is_coll, is_coll & ~skip), fold=added):
        if found is not None:
            sums = sums + found
            measured = True
    if not measured and alone is None:
        return out
    return pd.Series(sums.astype("float64"), index=ops.index).where(is_coll)


def _measured_exposure(raw: pd.DataFrame, rows: np.ndarray, is_coll: np.ndarray, measured_ops: np.ndarray) -> np.ndarray:
    """Per op, the summed exposed time of its executions in ``raw`` that are measured (``measured_ops``)."""
    # In device order: each device's rows are one stretch; exposed time is summed per op in any order.
    by_device = device_rows(raw)
    rows = by_device.take(rows)
    raw_coll = np.append(is_coll, False)[rows]          # row -1 (no op) is no collective
    measured = np.append(measured_ops, False)[rows]
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
    return exact_sums(rows[measured], exposed[measured], len(is_coll))


MAX_STEPS_PER_OP = 1000


def per_step_self_time(raw: pd.DataFrame, ops: pd.DataFrame, rows: np.ndarray) -> pd.Series:
    """Per op, its self time in each step (a list in step order), so regressions can be judged
    against per-step distributions even from a stored JSON baseline. None without steps (or when
    none of the op's executions falls in the first MAX_STEPS_PER_OP steps). ``rows``: each raw
    row's row in ``ops``."""
    return per_step_self_time_in_chunks(one_chunk(raw, rows), ops.index)


def per_step_self_time_in_chunks(for_each: ForEach, index: pd.Index, found: np.ndarray | None = None) -> pd.Series:
    """:func:`per_step_self_time` over rows in chunks (``for_each``: runtime.forked); ``index``: the ops'
    index; ``found``: the steps the rows are in, when known (else read from the chunks first)."""
    n_ops = len(index)
    out = pd.Series([None] * n_ops, index=index, dtype=object)
    if found is None:
        uniques = [u for u in for_each(lambda raw, rows: pd.unique(raw["step"].to_numpy())) if u.size]
        found = np.concatenate(uniques) if uniques else np.zeros(0, dtype=np.int64)
    found = found[found >= 0]
    if not found.size:
        return out
    steps = np.sort(pd.unique(found))[:MAX_STEPS_PER_OP]
    sums = np.zeros(n_ops * len(steps), dtype=np.int64)
    counted = np.zeros(n_ops, dtype=bool)
    for part in for_each(lambda raw, rows: None if raw.empty else _step_sums(raw, rows, steps, n_ops), fold=added):
        if part is not None:
            sums += part[0]
            counted |= part[1]
    table = sums.reshape(n_ops, len(steps))
    lists = [table[i].tolist() if counted[i] else None for i in range(n_ops)]
    return pd.Series(lists, index=index, dtype=object)


def _step_sums(raw: pd.DataFrame, rows: np.ndarray, steps: np.ndarray, n_ops: int) -> tuple[np.ndarray, np.ndarray]:
    """One table's self time per (op, step of ``steps``), and which ops have a row in those steps."""
    n_steps = len(steps)
    step = raw["step"].to_numpy()
    in_step = step >= 0
    if steps[0] == 0 and steps[-1] == n_steps - 1:      # steps 0..n-1: a step is its own position
        where = step.astype(np.int64)
        kept = np.flatnonzero(in_step & (rows >= 0) & (step < n_steps))
    else:
        where = np.minimum(np.searchsorted(steps, step), n_steps - 1)
        kept = np.flatnonzero(in_step & (rows >= 0) & (steps[where] == step))
    return (exact_sums(rows[kept] * n_steps + where[kept], raw["self_ps"].to_numpy()[kept], n_ops * n_steps),
            np.bincount(rows[kept], minlength=n_ops) > 0)
