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
    """One row per (module, start, done) pair found in the HLO: a done names its start as operand 0."""
    rows = []
    for module in modules:
        for computation in module.computations.values():
            opcodes = {inst.name: inst.opcode for inst in computation.instructions}
            for inst in computation.instructions:
                if inst.opcode.endswith("-done") and inst.operands:
                    start = inst.operands[0]
                    if opcodes.get(start, "").endswith("-start"):
                        rows.append((module.name, start, inst.name))
    return pd.DataFrame(rows, columns=["module", "start", "done"]).drop_duplicates()


def pair_times(raw: pd.DataFrame, pairs: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """Per start op (grouped by `key`, which ends with module and op): summed in-flight and exposed ps.

    Executions pair up per device in time order: each start with the first
    done of its pair that begins after it. Starts with no done are left out.
    """
    columns = key + ["in_flight_ps", "pair_exposed_ps"]
    if raw.empty or pairs.empty:
        return pd.DataFrame(columns=columns)
    names = set(pairs["start"]) | set(pairs["done"])
    rows = raw[raw["op"].astype(str).isin(names)]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame({
        "device": rows["device"].astype(str).to_numpy(),
        "program_id": rows["program_id"].to_numpy(),
        "module": rows["module"].astype(str).to_numpy(),
        "op": rows["op"].astype(str).to_numpy(),
        "start_ps": rows["start_ps"].to_numpy(),
        "end_ps": (rows["start_ps"] + rows["duration_ps"]).to_numpy(),
        "self_ps": rows["self_ps"].to_numpy(),
    })
    groups = {k: g for k, g in frame.groupby(["device", "module", "op"], sort=False)}
    out = []
    for module, start, done in pairs.itertuples(index=False):
        for device in frame["device"].unique():
            starts = groups.get((device, module, start))
            dones = groups.get((device, module, done))
            if starts is None or dones is None:
                continue
            starts = starts.sort_values("start_ps")
            dones = dones.sort_values("start_ps")
            at = np.searchsorted(dones["start_ps"].to_numpy(), starts["start_ps"].to_numpy(), side="left")
            ok = at < len(dones)
            if not ok.any():
                continue
            matched = dones.iloc[at[ok]]
            first = starts[ok]
            in_flight = matched["end_ps"].to_numpy() - first["start_ps"].to_numpy()
            exposed = first["self_ps"].to_numpy() + matched["self_ps"].to_numpy()
            out.append(first.assign(in_flight_ps=in_flight, pair_exposed_ps=exposed))
    if not out:
        return pd.DataFrame(columns=columns)
    table = pd.concat(out, ignore_index=True)
    return table.groupby(key, sort=False)[["in_flight_ps", "pair_exposed_ps"]].sum().reset_index()
