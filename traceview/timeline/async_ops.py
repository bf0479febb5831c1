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

from traceview.parsers.hlo_model import HloModule


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


def pair_times(raw: pd.DataFrame, pairs: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """Per start op (grouped by `key`, which ends with module and op): summed in-flight and exposed ps.

    Executions pair up per device in time order: each start with the first
    done of its pair that begins at or after it. Starts with no done are left
    out. Columnar: one sort and one search over all pairs and devices at once.
    """
    columns = key + ["in_flight_ps", "pair_exposed_ps"]
    if raw.empty or pairs.empty:
        return pd.DataFrame(columns=columns)
    pairs = pairs.reset_index(drop=True)
    role_of = {**{(m, s): (i, 0) for i, (m, s, _) in enumerate(pairs.itertuples(index=False))},
               **{(m, d): (i, 1) for i, (m, _, d) in enumerate(pairs.itertuples(index=False))}}
    # Only rows whose op name is a start or a done matter: pick them by category code, not by string.
    op_codes, op_names = pd.factorize(raw["op"])
    wanted = np.isin(np.asarray(op_names, dtype=object), list({op for _, op in role_of}))
    rows = np.flatnonzero(wanted[op_codes])
    module_codes, module_names = pd.factorize(raw["module"])
    # Look up each distinct (module, op) once, then spread to rows by code.
    combined = module_codes[rows].astype(np.int64) * len(op_names) + op_codes[rows]
    distinct, inverse = np.unique(combined, return_inverse=True)
    looked_up = np.array([role_of.get((str(module_names[c // len(op_names)]), str(op_names[c % len(op_names)])),
                                      (-1, -1)) for c in distinct], dtype=np.int64).reshape(-1, 2)[inverse]
    keep = looked_up[:, 0] >= 0
    rows, pair_index, role = rows[keep], looked_up[keep, 0], looked_up[keep, 1]
    if rows.size == 0:
        return pd.DataFrame(columns=columns)
    device = pd.factorize(raw["device"].to_numpy()[rows])[0].astype(np.int64)
    group = device * len(pairs) + pair_index
    start = raw["start_ps"].to_numpy()[rows]
    end = start + raw["duration_ps"].to_numpy()[rows]
    own = raw["self_ps"].to_numpy()[rows]
    is_start = role == 0

    # Dones sorted by (group, start); each start finds the first done of its group at or after it.
    done = np.flatnonzero(~is_start)
    done = done[np.lexsort((start[done], group[done]))]
    first = np.flatnonzero(is_start)
    at = _search_in_groups(group[done], start[done], group[first], start[first])
    ok = at >= 0
    first, matched = first[ok], done[at[ok]]
    if first.size == 0:
        return pd.DataFrame(columns=columns)
    table = raw.iloc[rows[first]][key].astype({"module": str, "op": str})
    table = table.assign(in_flight_ps=end[matched] - start[first], pair_exposed_ps=own[first] + own[matched])
    return table.groupby(key, sort=False, observed=True)[["in_flight_ps", "pair_exposed_ps"]].sum().reset_index()


def _search_in_groups(groups: np.ndarray, times: np.ndarray, query_groups: np.ndarray,
                      query_times: np.ndarray) -> np.ndarray:
    """Index into (groups, times) (sorted by group, then time) of the first entry of the query's group
    with time >= the query's time; -1 where there is none."""
    if groups.size == 0:
        return np.full(query_groups.size, -1, dtype=np.int64)
    # Dense ranks of all times make (group, time) one exact int64 key.
    all_times, ranks = np.unique(np.concatenate([times, query_times]), return_inverse=True)
    width = np.int64(all_times.size + 1)
    key = groups * width + ranks[: times.size]
    query_key = query_groups * width + ranks[times.size:]
    pos = np.searchsorted(key, query_key, side="left")
    pos_clipped = np.minimum(pos, groups.size - 1)
    valid = (pos < groups.size) & (groups[pos_clipped] == query_groups)
    return np.where(valid, pos_clipped, -1)
