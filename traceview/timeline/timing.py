"""What the devices did with their time: idle gaps, exposed communication, time per step.

Columnar interval arithmetic over the raw op table (traceview.timeline.intervals);
the results are per-op columns the roofline and the reports read.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.timeline.aggregate import OP_KEY
from traceview.timeline.async_ops import pair_times
from traceview.timeline.intervals import covered_length, union


def judged_and_exposed(raw: pd.DataFrame, ops: pd.DataFrame, pairs: pd.DataFrame,
                        per_device: bool) -> pd.DataFrame:
    """Add `judged_time_ps` (what the roofline compares with) and `exposed_time_ps`.

    Async starts whose done is in the trace are judged by their in-flight
    time and exposed for the start's and done's own time; their dones are
    then neither judged nor counted again (NaN judged time, 0 exposed).
    Other collectives are exposed for the time no other op overlaps them.
    """
    key = (["device"] if per_device else []) + OP_KEY
    timed = pair_times(raw, pairs, key)
    out = ops.assign(judged_time_ps=ops["self_time_ps"].astype("float64"),
                     exposed_time_ps=_exposed_time(raw, ops, per_device))
    if timed.empty:
        return out
    text_key = {"module": str, "op": str} | ({"device": str} if per_device else {})
    merged = out[key].astype(text_key).merge(timed.astype(text_key), on=key, how="left")
    in_flight = merged["in_flight_ps"].to_numpy(dtype="float64")
    paired = ~np.isnan(in_flight)
    out.loc[paired, "judged_time_ps"] = in_flight[paired]
    out.loc[paired, "exposed_time_ps"] = merged["pair_exposed_ps"].to_numpy(dtype="float64")[paired]
    started = timed[["module", "op"]].merge(pairs, left_on=["module", "op"], right_on=["module", "start"])
    start_of = dict(zip(zip(started["module"], started["done"]), started["start"]))
    paired_with = [start_of.get((m, o)) for m, o in zip(out["module"].astype(str), out["op"].astype(str))]
    out["paired_start"] = pd.Series(paired_with, index=out.index, dtype=object)
    is_done = out["paired_start"].notna().to_numpy()
    out.loc[is_done, "judged_time_ps"] = np.nan
    out.loc[is_done, "exposed_time_ps"] = 0.0
    return out


def _leaf_rows(raw: pd.DataFrame) -> np.ndarray:
    """Rows with no nested child op (a while op's interval would hide its body's ops)."""
    return (raw["self_ps"] == raw["duration_ps"]).to_numpy()


def _exposed_time(raw: pd.DataFrame, ops: pd.DataFrame, per_device: bool) -> pd.Series:
    """Per collective op: its time not overlapped by non-collective ops on the same device.

    NaN for ops that are not collectives. A synchronous collective is exposed
    for its whole duration unless other work runs beside it.
    """
    out = pd.Series(np.nan, index=ops.index, dtype="float64")
    if raw.empty or "collective_kind" not in ops.columns:
        return out
    is_coll = ops["collective_kind"].fillna("").astype(str) != ""
    if not is_coll.any():
        return out
    coll_keys = ops.loc[is_coll, OP_KEY].drop_duplicates().assign(_coll=True)  # per-device rows repeat keys
    raw_keys = raw[OP_KEY].astype({"module": str, "op": str})
    raw_coll = raw_keys.merge(coll_keys.astype({"module": str, "op": str}), on=OP_KEY, how="left")["_coll"] \
        .fillna(False).to_numpy(dtype=bool)
    starts = raw["start_ps"].to_numpy()
    ends = starts + raw["duration_ps"].to_numpy()
    devices = pd.factorize(raw["device"])[0]
    self_ps = raw["self_ps"].to_numpy()
    exposed = np.zeros(len(raw), dtype=np.int64)
    compute = ~raw_coll & _leaf_rows(raw)
    for code in np.unique(devices[raw_coll]):
        on_device = devices == code
        u_starts, u_ends = union(starts[on_device & compute], ends[on_device & compute])
        rows = np.flatnonzero(on_device & raw_coll)
        uncovered = (ends[rows] - starts[rows]) - covered_length(starts[rows], ends[rows], u_starts, u_ends)
        exposed[rows] = np.minimum(uncovered, self_ps[rows])  # nested child ops keep their own time
    key = (["device"] if per_device else []) + OP_KEY
    frame = raw_keys.assign(exposed=exposed)
    if per_device:
        frame["device"] = raw["device"].astype(str).to_numpy()
    sums = frame[raw_coll].groupby(key, observed=True)["exposed"].sum().rename("exposed_sum").reset_index()
    merged = ops[key].astype({"module": str, "op": str}).merge(sums, on=key, how="left")
    return pd.Series(merged["exposed_sum"].to_numpy(dtype="float64"), index=ops.index).where(is_coll)


MAX_STEPS_PER_OP = 1000


def per_step_self_time(raw: pd.DataFrame, ops: pd.DataFrame, per_device: bool) -> pd.Series:
    """Per op, its self time in each step (a list in step order), so regressions can be judged
    against per-step distributions even from a stored JSON baseline. None without steps."""
    out = pd.Series([None] * len(ops), index=ops.index, dtype=object)
    if raw.empty or not (raw["step"] >= 0).any():
        return out
    steps = np.sort(raw.loc[raw["step"] >= 0, "step"].unique())[:MAX_STEPS_PER_OP]
    key = (["device"] if per_device else []) + OP_KEY
    text_key = {"module": str, "op": str} | ({"device": str} if per_device else {})
    rows = raw.loc[raw["step"].isin(steps), key + ["step", "self_ps"]].astype(text_key)
    table = rows.pivot_table(index=key, columns="step", values="self_ps", aggfunc="sum", fill_value=0,
                             observed=True)
    table = table.reindex(columns=steps, fill_value=0)
    lists = pd.Series([list(map(int, r)) for r in table.to_numpy()], index=table.index, name="_steps")
    merged = ops[key].astype(text_key).merge(lists.reset_index(), on=key, how="left")
    return pd.Series(merged["_steps"].to_numpy(), index=ops.index, dtype=object)
