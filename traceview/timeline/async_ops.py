"""Asynchronous op pairs (`*-start` ... `*-done`): how long each was in flight and how long it was waited on.

XLA splits collectives and host copies into a start and a done. The device
issues the start, keeps computing, and waits in the done only for what is
left. So the time the transfer took is from the start's beginning to the
done's end (in flight), while the time it cost the step is the start's and
the done's own time (exposed). The roofline judges the in-flight time; the
time-by-bound split counts only the exposed time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.parsers.hlo.model import HloModule
from traceview.runtime.forked import ForEach, added, one_chunk
from traceview.timeline.grouping import column_codes, exact_sums


def async_pairs(modules: list[HloModule]) -> pd.DataFrame:
    """One row per (module, start, done) pair found in the HLO: a done names its start as operand 0,
    directly or through ``async-update`` steps."""
    rows = []
    for module in modules:
        for computation in module.computations.values():
            by_name = {inst.name: inst for inst in computation.instructions}
            for inst in computation.instructions:
                if inst.opcode.endswith("-done") and inst.operands:
                    start = by_name.get(inst.operands[0])
                    hops = 0
                    while start is not None and start.opcode.endswith("-update") and start.operands and hops < 64:
                        start, hops = by_name.get(start.operands[0]), hops + 1
                    if start is not None and start.opcode.endswith("-start"):
                        rows.append((module.name, start.name, inst.name))
    return pd.DataFrame(rows, columns=["module", "start", "done"]).drop_duplicates()


def pair_times(raw: pd.DataFrame, ops: pd.DataFrame, rows: np.ndarray, pairs: pd.DataFrame) -> pd.DataFrame:
    """Per row of ``ops``: the summed in-flight and exposed ps of its executions as an async start.

    ``rows`` gives each raw row's op row (:func:`traceview.timeline.aggregate.aggregate_ops`).
    Executions pair up per device in time order: each start with the first
    done of its pair that begins at or after it. Starts with no done are left
    out; ops with no paired start get NaN. Columnar: one sort and one search
    over all pairs and devices at once.
    """
    return pair_times_in_chunks(one_chunk(raw, rows), ops, pairs)


def pair_times_in_chunks(for_each: ForEach, ops: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """:func:`pair_times` over rows in chunks (``for_each``: runtime.forked), each holding whole devices (a
    run's hosts): the pairs of a device are all in its chunk, so the sums per op add up over the chunks."""
    out = pd.DataFrame({"in_flight_ps": np.nan, "pair_exposed_ps": np.nan}, index=ops.index)
    if pairs.empty or ops.empty:
        return out
    pairs = pairs.reset_index(drop=True)
    roles = _op_roles(ops, pairs)
    paired = np.zeros(len(ops), dtype=bool)
    sums = np.zeros((2, len(ops)), dtype=np.int64)
    for found in for_each(lambda raw, rows: _pair_sums(raw, rows, roles, len(pairs)), fold=added):
        if found is not None:
            paired |= found[0]
            sums += found[1]
    for k, column in enumerate(("in_flight_ps", "pair_exposed_ps")):
        out.loc[paired, column] = sums[k][paired].astype("float64")
    return out


def _op_roles(ops: pd.DataFrame, pairs: pd.DataFrame) -> np.ndarray:
    """Per op row, plus a last entry for row -1: (pair index, 0 for its start / 1 for its done); (-1, -1)."""
    role_of = {**{(m, s): (i, 0) for i, (m, s, _) in enumerate(pairs.itertuples(index=False))},
               **{(m, d): (i, 1) for i, (m, _, d) in enumerate(pairs.itertuples(index=False))}}
    # Each op's role is looked up once by name, then spread to its executions by row index.
    return np.array([role_of.get(k, (-1, -1)) for k in zip(ops["module"].astype(str), ops["op"].astype(str))]
                    + [(-1, -1)], dtype=np.int32)


def _pair_sums(raw: pd.DataFrame, rows: np.ndarray, op_role: np.ndarray,
               n_pairs: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Pair one table's executions: per op, whether it was paired as a start, and its summed in-flight and
    exposed ps (None: nothing paired)."""
    if raw.empty:
        return None
    chosen = np.flatnonzero(op_role[:, 0][rows] >= 0)
    if chosen.size == 0:
        return None
    pair_index, is_start = op_role[rows[chosen]].T
    is_start = is_start == 0
    device = column_codes(raw["device"])[0][chosen].astype(np.int64)
    group = device * n_pairs + pair_index
    start = raw["start_ps"].to_numpy()[chosen]

    # Each start finds the first done of its group that begins at or after it.
    done = np.flatnonzero(~is_start)
    first = np.flatnonzero(is_start)
    at = _first_at_or_after(group[done], start[done], group[first], start[first])
    ok = at >= 0
    first, matched = chosen[first[ok]], chosen[done[at[ok]]]        # raw rows of each start and its done
    if first.size == 0:
        return None
    n_ops = op_role.shape[0] - 1
    op_of_start = rows[first]
    start_ps, duration, own = (raw[c].to_numpy() for c in ("start_ps", "duration_ps", "self_ps"))
    return (np.bincount(op_of_start, minlength=n_ops) > 0,
            np.stack([exact_sums(op_of_start, start_ps[matched] + duration[matched] - start_ps[first], n_ops),
                      exact_sums(op_of_start, own[first] + own[matched], n_ops)]))


def _first_at_or_after(groups: np.ndarray, times: np.ndarray, query_groups: np.ndarray,
                       query_times: np.ndarray) -> np.ndarray:
    """Per query, the index into (groups, times) of the entry of the query's group with the smallest
    time >= the query's time (ties: the first in input order); -1 where there is none."""
    if groups.size == 0:
        return np.full(query_groups.size, -1, dtype=np.int64)
    key, query_key = _group_time_keys(groups, times, query_groups, query_times)
    order = _key_order(groups, key)
    pos = np.searchsorted(key[order], query_key, side="left")
    at = order[np.minimum(pos, groups.size - 1)]
    return np.where((pos < groups.size) & (groups[at] == query_groups), at, -1)


def _key_order(groups: np.ndarray, key: np.ndarray) -> np.ndarray:
    """The stable order that sorts ``key``. Rows come in time order per device, so a stable sort by
    group alone (a radix sort when groups are few) usually sorts the key already; else a full sort."""
    if groups.min() >= 0 and groups.max() < 2 ** 15:
        order = np.argsort(groups.astype(np.int16), kind="stable")
        ordered = key[order]
        if (ordered[1:] >= ordered[:-1]).all():
            return order
    return np.argsort(key, kind="stable")


def _group_time_keys(groups: np.ndarray, times: np.ndarray, query_groups: np.ndarray,
                     query_times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One exact int64 key per (group, time), ordered as the pairs are: each group gets its own
    stretch of the time axis where that fits in int64, else times are replaced by their dense ranks."""
    all_groups = np.concatenate([groups, query_groups])
    all_times = np.concatenate([times, query_times])
    g_low, t_low = int(all_groups.min()), int(all_times.min())
    width = int(all_times.max()) - t_low + 1
    if (int(all_groups.max()) - g_low + 1) * width >= 2 ** 62:
        _, ranks = np.unique(all_times, return_inverse=True)
        all_times, t_low, width = ranks.astype(np.int64), 0, int(ranks.max()) + 1
    key = (all_groups - g_low) * width + (all_times - t_low)
    return key[: groups.size], key[groups.size:]
