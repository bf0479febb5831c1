"""From a loaded Profile to the numbers every report shows.

This is the one place that assembles an analysis (data flow in DESIGN.md):
aggregate the measured ops, join them with their HLO cost, judge them
against the target chip's roofline, and summarize per step and per run.
The CLI formats, the dashboard and the regression checks all read the same
`Analysis`; re-targeting only re-runs `apply_target`, never the parse.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from traceview.aggregate import OP_KEY, op_stats, step_times
from traceview.async_ops import async_pairs, pair_times
from traceview.detect import detect_target
from traceview.hardware import Chip, get_chip, load_hardware
from traceview.intervals import covered_length, union
from traceview.join import attach_costs
from traceview.modules import cost_table, profile_modules
from traceview.profile import Profile
from traceview.roofline import BOUNDS, roofline, summarize

# The time an op is judged by: its own time (not its children's); for an async
# start, the time its transfer was in flight (see traceview.async_ops).
JUDGED = "judged_time_ps"


@dataclass
class Analysis:
    profile: Profile
    ops: pd.DataFrame                  # aggregate.op_stats + cost (join) + roofline columns
    steps: pd.DataFrame                # aggregate.step_times (+ time_by_bound columns)
    costs: pd.DataFrame                # per-instruction HLO costs of every module found
    modules: list = field(default_factory=list)
    per_device: bool = False
    target: Chip | None = None
    target_detected: bool = False
    summary: dict = field(default_factory=dict)   # roofline.summarize, times in ps
    idle_ps: int = 0
    span_ps: int = 0                   # sum over devices of first-op-start .. last-op-end
    base_warnings: list[str] = field(default_factory=list)    # reading, HLO, costs: whatever the target
    target_warnings: list[str] = field(default_factory=list)  # detection, roofline, MFU: this target's

    @property
    def warnings(self) -> list[str]:
        return _dedupe(self.base_warnings + self.target_warnings)

    @property
    def device_time_ps(self) -> int:
        return int(self.profile.ops["self_ps"].sum()) if not self.profile.ops.empty else 0


def build_analysis(profile: Profile, target: str | None = None, hardware_file: str | Path | None = None,
                   hlo_path: str | Path | None = None, stage: str = "after",
                   per_device: bool = False) -> Analysis:
    """Aggregate, cost and (when a chip is known) roofline-judge a profile."""
    warnings = list(profile.warnings)
    if profile.ops.empty:
        warnings.append("the trace holds no device op executions: nothing to analyze")
    modules, module_warnings = profile_modules(profile, hlo_path, stage)
    costs, cost_warnings = cost_table(modules)
    ops, join_warnings = attach_costs(op_stats(profile.ops, per_device=per_device), costs)
    warnings += _dedupe(module_warnings + cost_warnings + join_warnings)
    ops = _judged_and_exposed(profile.ops, ops, async_pairs(modules), per_device)
    ops["step_times_ps"] = _per_step_self_time(profile.ops, ops, per_device)
    idle_ps, span_ps = _idle_time(profile.ops)
    analysis = Analysis(profile=profile, ops=ops, steps=step_times(profile.steps), costs=costs,
                        modules=modules, per_device=per_device, idle_ps=idle_ps, span_ps=span_ps,
                        base_warnings=warnings)
    db = load_hardware(hardware_file)
    if target:
        return apply_target(analysis, get_chip(target, db), detected=False)
    chip, detect_warnings = detect_target(profile.devices, db)
    if chip is None:
        analysis.target_warnings = detect_warnings + [
            "no target chip: ops are not roofline-judged (give --target; `traceview hardware` lists the chips)"]
        return analysis
    return apply_target(analysis, chip, detected=True, extra_warnings=detect_warnings)


def apply_target(analysis: Analysis, chip: Chip, detected: bool = False,
                 extra_warnings: list[str] | None = None) -> Analysis:
    """A copy of the analysis with its ops judged against `chip` (replacing any earlier judgement
    and its warnings). The input is left as it was, so a cached analysis can be re-targeted freely.
    """
    analysis = dataclasses.replace(analysis)
    base = analysis.ops.drop(columns=[c for c in analysis.ops.columns if c in _ROOFLINE_COLUMNS])
    ops, roof_warnings = roofline(base, chip, time_column=JUDGED)
    ops = _label_dones_like_starts(ops, analysis.per_device)
    total = analysis.span_ps or analysis.device_time_ps
    summary = summarize(ops, chip, total_time_ps=total, idle_ps=analysis.idle_ps, time_column=JUDGED)
    analysis.ops = ops.sort_values("gap_ps", ascending=False, na_position="last", kind="stable") \
        .reset_index(drop=True)
    analysis.target, analysis.target_detected, analysis.summary = chip, detected, summary
    analysis.steps = _steps_by_bound(analysis)
    analysis.target_warnings = _dedupe(list(extra_warnings or []) + roof_warnings + summary.get("warnings", []))
    return analysis


_ROOFLINE_COLUMNS = {"t_compute_ps", "t_memory_ps", "t_comm_ps", "roofline_time_ps", "bound",
                     "unknown_reason", "achieved_flops", "achieved_bandwidth", "intensity",
                     "efficiency", "gap_ps"}


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _leaf_rows(raw: pd.DataFrame) -> np.ndarray:
    """Rows with no nested child op (a while op's interval would hide its body's ops)."""
    return (raw["self_ps"] == raw["duration_ps"]).to_numpy()


def _idle_time(raw: pd.DataFrame) -> tuple[int, int]:
    """Sum over devices of (span from first op start to last op end) and of its uncovered part."""
    if raw.empty:
        return 0, 0
    idle = span = 0
    starts = raw["start_ps"].to_numpy()
    ends = starts + raw["duration_ps"].to_numpy()
    codes = raw["device"].cat.codes.to_numpy() if hasattr(raw["device"], "cat") else \
        pd.factorize(raw["device"])[0]
    for code in np.unique(codes):
        mask = codes == code
        u_starts, u_ends = union(starts[mask], ends[mask])
        device_span = int(ends[mask].max() - starts[mask].min())
        span += device_span
        idle += device_span - int((u_ends - u_starts).sum())
    return idle, span


def _judged_and_exposed(raw: pd.DataFrame, ops: pd.DataFrame, pairs: pd.DataFrame,
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


def _label_dones_like_starts(ops: pd.DataFrame, per_device: bool) -> pd.DataFrame:
    """A done that was judged with its start shows the start's bound, and no roofline of its own."""
    if "paired_start" not in ops.columns or not ops["paired_start"].notna().any():
        return ops
    key = (["device"] if per_device else []) + ["program_id", "module"]
    starts = ops[key + ["op", "bound"]].rename(columns={"op": "paired_start", "bound": "_start_bound"})
    merged = ops[key + ["paired_start"]].merge(starts, on=key + ["paired_start"], how="left")
    is_done = ops["paired_start"].notna().to_numpy() & merged["_start_bound"].notna().to_numpy()
    out = ops.copy()
    bounds = out["bound"].astype(object).to_numpy(copy=True)
    bounds[is_done] = merged["_start_bound"].astype(object).to_numpy()[is_done]
    out["bound"] = pd.Categorical(bounds, categories=out["bound"].cat.categories)
    for column in ("roofline_time_ps", "t_compute_ps", "t_memory_ps", "t_comm_ps", "efficiency", "gap_ps"):
        out.loc[is_done, column] = np.nan
    return out


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


def _per_step_self_time(raw: pd.DataFrame, ops: pd.DataFrame, per_device: bool) -> pd.Series:
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


def _steps_by_bound(analysis: Analysis) -> pd.DataFrame:
    """Per step, device self time in ops of each bound (columns `<bound>_ps`)."""
    steps = analysis.steps.drop(columns=[f"{b}_ps" for b in BOUNDS if f"{b}_ps" in analysis.steps])
    raw = analysis.profile.ops
    if raw.empty or steps.empty or "bound" not in analysis.ops.columns:
        return steps
    key = (["device"] if analysis.per_device else []) + OP_KEY
    labels = analysis.ops[key + ["bound"]].astype({"module": str, "op": str})
    cols = key + ["step", "self_ps"]
    rows = raw[cols].astype({"module": str, "op": str})
    if analysis.per_device:
        rows["device"] = rows["device"].astype(str)
        labels = labels.astype({"device": str})
    rows = rows.merge(labels, on=key, how="left")
    table = rows.pivot_table(index="step", columns="bound", values="self_ps", aggfunc="sum", fill_value=0)
    table = table.reindex(columns=list(BOUNDS), fill_value=0).add_suffix("_ps").reset_index()
    return steps.merge(table, on="step", how="left").fillna({f"{b}_ps": 0 for b in BOUNDS})
