"""Per-scope changes between two snapshots: each named scope's op time per step, base vs new.

An op's scope is the path of its op_name metadata (traceview.scopes.paths)
under its program; a scope's time per step is the sum of its ops' (and its
descendants'), so a change is judged where the model code is, not per HLO op
(XLA renames and re-fuses ops between builds; the scope path survives that).
Where both sides have per-step op times, a scope's row shows its median time
per step on each side (over the steps it ran in), the change between those two
medians and the Mann-Whitney interval, as for the step time and the ops.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.regress.baseline import Snapshot
from traceview.regress.stats import median_change
from traceview.scopes.paths import MAX_COMPONENTS, parse_op_name
from traceview.scopes.tree import program_name

SCOPE_COLUMNS = ["scope", "depth", "base_time_ps", "new_time_ps", "change", "change_low", "change_high", "method"]


def _op_scopes(snap: Snapshot) -> dict[tuple[str, str], tuple[str, ...]]:
    """(module, op) -> scope path (program first), for ops with op_name metadata."""
    if "op_name" not in snap.ops.columns:
        return {}
    column = snap.ops["op_name"].astype(object)
    names = column.where(column.notna(), "").astype(str)
    parsed = {n: parse_op_name(n) for n in pd.unique(names) if n}
    out = {}
    for module, op, name in zip(snap.ops["module"].astype(str), snap.ops["op"].astype(str), names):
        found = parsed.get(name)
        if found is not None:
            out[(module, op)] = (program_name(module),) + found.scopes
    return out


def _per_step(snap: Snapshot, scopes: dict[tuple[str, str], tuple[str, ...]]) -> pd.DataFrame:
    """scope key ("/"-joined path), step -> time_ps; one step (the totals) when there are no per-step times."""
    if snap.op_steps is not None and not snap.op_steps.empty:
        frame = snap.op_steps[["module", "op", "step", "time_ps"]]
    else:
        frame = snap.ops[["module", "op", "time_ps"]].assign(step=0)
        frame = frame.assign(time_ps=frame["time_ps"] / snap.n_steps)
    keys = list(zip(frame["module"].astype(str), frame["op"].astype(str)))
    paths = pd.Series([scopes.get(k) for k in keys], index=frame.index, dtype=object)
    kept = paths.notna().to_numpy()
    frame, paths = frame[kept], paths[kept]
    codes, unique_paths = pd.factorize(paths, sort=False)
    per_path = frame.assign(path=codes).groupby(["path", "step"], as_index=False)["time_ps"].sum()
    link = pd.DataFrame([(code, "/".join(p[:k]), k) for code, p in enumerate(unique_paths)
                         for k in range(1, min(len(p), MAX_COMPONENTS) + 1)], columns=["path", "scope", "depth"])
    spread = link.merge(per_path, on="path")
    return spread.groupby(["scope", "depth", "step"], as_index=False)["time_ps"].sum()


def scope_changes(base: Snapshot, new: Snapshot, confidence: float = 0.95) -> pd.DataFrame:
    """One row per scope on both sides (SCOPE_COLUMNS; times per step, the median step where per-step
    times exist), largest absolute change of time first. Empty when either side has no op_name metadata
    or no times (HLO inputs)."""
    if base.kind != "trace" or new.kind != "trace":
        return pd.DataFrame(columns=SCOPE_COLUMNS)
    b_scopes, n_scopes = _op_scopes(base), _op_scopes(new)
    if not b_scopes or not n_scopes:
        return pd.DataFrame(columns=SCOPE_COLUMNS)
    b, n = _per_step(base, b_scopes), _per_step(new, n_scopes)
    stepped = base.op_steps is not None and new.op_steps is not None and b["step"].nunique() > 1 \
        and n["step"].nunique() > 1
    rows = []
    b_groups = dict(tuple(b.groupby("scope")))
    for scope, n_rows in n.groupby("scope"):
        b_rows = b_groups.get(scope)
        if b_rows is None:
            continue
        depth = int(n_rows["depth"].iloc[0])
        if stepped:
            # medians over the steps the scope ran in (a step where it took no time is not a sample)
            bs = _all_steps(b_rows, base.n_steps)
            ns = _all_steps(n_rows, new.n_steps)
            shift = median_change(bs, ns, confidence)
            rows.append((scope, depth, shift.base_median, shift.new_median, shift.estimate, shift.low,
                         shift.high, shift.method))
        else:
            bt, nt = float(b_rows["time_ps"].sum()), float(n_rows["time_ps"].sum())
            change = nt / bt - 1.0 if bt > 0 else None
            rows.append((scope, depth, bt, nt, change, None, None, "per-step totals"))
    out = pd.DataFrame(rows, columns=SCOPE_COLUMNS)
    order = np.argsort(-np.abs(out["new_time_ps"].to_numpy(dtype="float64") - out["base_time_ps"].to_numpy(dtype="float64")),
                       kind="stable")
    return out.iloc[order].reset_index(drop=True)


def _all_steps(rows: pd.DataFrame, n_steps: int) -> np.ndarray:
    times = np.zeros(max(n_steps, int(rows["step"].max()) + 1))
    times[rows["step"].to_numpy(dtype=np.int64)] = rows["time_ps"].to_numpy(dtype="float64")
    return times
