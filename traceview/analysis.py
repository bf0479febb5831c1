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

from traceview.hardware.chips import Chip
from traceview.hardware.database import get_chip, load_hardware
from traceview.hardware.detect import detect_target
from traceview.join import attach_costs
from traceview.modules import cost_table, profile_modules
from traceview.profile import Profile
from traceview.roofline import OUTPUT_COLUMNS, roofline, summarize
from traceview.timeline.aggregate import OP_KEY, op_stats, step_times
from traceview.timeline.async_ops import async_pairs
from traceview.timeline.timing import idle_time, judged_and_exposed, per_step_self_time
from traceview.vocabulary import BOUNDS

# The time an op is judged by: its own time (not its children's); for an async
# start, the time its transfer was in flight (see traceview.timeline.async_ops).
JUDGED = "judged_time_ps"


@dataclass
class Analysis:
    """The pipeline's tables for one trace, in picoseconds with internal column names; the public
    ``traceview.Analysis`` (api/analysis.py) wraps it and derives every public table from it."""

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
                   per_device: bool = False, chip: Chip | None = None) -> Analysis:
    """Aggregate, cost and (when a chip is known) roofline-judge a profile (``chip`` wins over ``target``)."""
    warnings = list(profile.warnings)
    if profile.ops.empty:
        warnings.append("the trace holds no device op executions: nothing to analyze")
    modules, module_warnings = profile_modules(profile, hlo_path, stage)
    costs, cost_warnings = cost_table(modules)
    ops, join_warnings = attach_costs(op_stats(profile.ops, per_device=per_device), costs)
    warnings += _dedupe(module_warnings + cost_warnings + join_warnings)
    ops = judged_and_exposed(profile.ops, ops, async_pairs(modules), per_device)
    ops["step_times_ps"] = per_step_self_time(profile.ops, ops, per_device)
    idle_ps, span_ps = idle_time(profile.ops)
    analysis = Analysis(profile=profile, ops=ops, steps=step_times(profile.steps), costs=costs,
                        modules=modules, per_device=per_device, idle_ps=idle_ps, span_ps=span_ps,
                        base_warnings=warnings)
    if chip is not None:
        return apply_target(analysis, chip, detected=False)
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
    base = analysis.ops.drop(columns=[c for c in analysis.ops.columns if c in OUTPUT_COLUMNS])
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


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


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
