"""From a loaded Profile to the numbers every report shows.

This is the one place that assembles an analysis (data flow in docs/architecture.md):
aggregate the measured ops, join them with their HLO cost, judge them
against the target chip's roofline, and summarize per step and per run.
The CLI formats, the dashboard and the regression checks all read the same
`PipelineResult`; re-targeting only re-runs `apply_target`, never the parse.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from traceview.analysis.accounting import (
    bound_codes,
    projected_step_times,
    totals_by_bound,
    with_step_bounds,
    without_step_bounds,
)
from traceview.analysis.cost_join import attach_costs
from traceview.analysis.modules import TraceModules, cost_table, executed_modules, profile_modules
from traceview.analysis.projection import PROJECTION_MODEL, projected_times, projected_total
from traceview.analysis.roofline import OUTPUT_COLUMNS, gain_ps, roofline, summarize
from traceview.hardware.chips import Chip
from traceview.hardware.database import get_chip, load_hardware
from traceview.hardware.detect import detect_target
from traceview.hostreduce.combine import combine
from traceview.hostreduce.profile import Profile
from traceview.hostreduce.run_ops import RunOps, per_step_self_time
from traceview.timeline.async_ops import async_pairs
from traceview.timeline.devices import inactive_devices
from traceview.vocabulary import BOUNDS

# The time an op is judged by: its own time (not its children's); for an async
# start, the time its transfer was in flight (see traceview.timeline.async_ops).
JUDGED = "judged_time_ps"


@dataclass(frozen=True)
class Judgement:
    """The ops judged against one chip: which chip, how it was chosen, and the run's summary on it.

    ``apply_target`` builds one per target, so a re-targeted copy replaces the whole judgement and no
    field of an earlier one survives."""

    chip: Chip
    # Where the chip came from: "--target" (given), "trace" (its device planes), "dump: <file>" (the
    # target config of the run's XLA dump, when the trace names no chip).
    source: str
    summary: dict                      # roofline.summarize, times in ps
    # The chip the times were measured on when it is not `chip`: every judged time is a projection from it
    measured_on: Chip | None = None

    @property
    def detected(self) -> bool:
        """Found in the trace or its dump, not given."""
        return self.source != "--target"

    @property
    def projected(self) -> bool:
        """The times are projections onto `chip` from those measured on another chip (`measured_on`)."""
        return self.measured_on is not None


@dataclass
class PipelineResult:
    """The pipeline's tables for one trace, in picoseconds with internal column names; the public
    ``traceview.Analysis`` (api/analysis.py) wraps it and derives every public table from it."""

    profile: Profile
    ops: pd.DataFrame                  # aggregate.op_stats + cost (join) + roofline columns
    steps: pd.DataFrame                # aggregate.step_times (+ time_by_bound columns)
    hlo: TraceModules                  # the HLO modules the ops ran in (their costs are joined) and every one
    run_ops: RunOps                    # the hosts' parts combined: the op table the tables were built from
    op_index: np.ndarray               # per op of run_ops.stats, its row in ops
    per_device: bool = False
    judged: Judgement | None = None    # the judgement on the target chip; None: no chip given or detected
    # per active device: busy, idle and span (timeline.devices.device_time); the run's totals are its sums
    device_times: pd.DataFrame = field(default_factory=pd.DataFrame)
    capture_chip: Chip | None = None   # the chip the trace ran on, when detected
    base_warnings: list[str] = field(default_factory=list)    # reading, HLO, costs: whatever the target
    target_warnings: list[str] = field(default_factory=list)  # detection, roofline, MFU: this target's

    @property
    def warnings(self) -> list[str]:
        return _dedupe(self.base_warnings + self.target_warnings)

    @property
    def device_time_ps(self) -> int:
        """Busy time summed over devices: the union of each device's op intervals."""
        return self._device_total("busy_ps")

    @property
    def idle_ps(self) -> int:
        """Idle time summed over the active devices: span - busy on each."""
        return self._device_total("idle_ps")

    @property
    def span_ps(self) -> int:
        """Span summed over the active devices: first op start to last op end on each."""
        return self._device_total("span_ps")

    def _device_total(self, column: str) -> int:
        return int(self.device_times[column].sum()) if not self.device_times.empty else 0

    @property
    def op_time_ps(self) -> int:
        """Sum of op self times (overlapping ops, e.g. on several streams, count once each)."""
        return self.run_ops.op_time_ps

    @property
    def active_devices(self) -> list[str]:
        return list(self.device_times["device"]) if not self.device_times.empty else []

    @property
    def inactive_devices(self) -> list[str]:
        return inactive_devices([d.id for d in self.profile.devices], self.device_times)


def build_analysis(profile: Profile, target: str | None = None, hardware_file: str | Path | None = None,
                   hlo_path: str | Path | None = None, stage: str = "after",
                   per_device: bool = False, target_chip: Chip | None = None) -> PipelineResult:
    """Aggregate, cost and (when a chip is known) roofline-judge a profile (``target_chip`` wins over ``target``)."""
    warnings = list(profile.warnings)
    ran = executed_modules(profile)
    converted: dict = {}
    modules, module_warnings = profile_modules(profile, hlo_path, stage, ran, converted)
    if ran is not None and not modules:     # no module matches the ops: every module, as without the filter
        ran = None
        modules, module_warnings = profile_modules(profile, hlo_path, stage, converted=converted)
    costs, cost_warnings = cost_table(modules)
    pairs = async_pairs(modules)
    run = combine(profile, per_device, pairs)
    if run.n_rows == 0:
        warnings.insert(len(profile.warnings), "the trace holds no device op executions: nothing to analyze")
    ops, join_warnings = attach_costs(run.stats, costs)      # keeps the rows' order
    warnings += _dedupe(module_warnings + cost_warnings + join_warnings)
    ops = run.judged_and_exposed(ops, pairs)
    ops["step_times_ps"] = per_step_self_time(run, len(ops), ops.index)
    devices = run.device_time()
    db = load_hardware(hardware_file)
    active = set(devices["device"])    # devices with no op say nothing about the program's chip
    chip, detect_warnings = detect_target([d for d in profile.devices if d.id in active] or profile.devices, db)
    given = target_chip if target_chip is not None else get_chip(target, db) if target else None
    source = "trace"
    if chip is None and given is None:
        chip, source, detect_warnings = _chip_from_dump(profile, hlo_path, db, detect_warnings)
    unjudged = [] if chip is not None or given is not None else detect_warnings + [
        "no target chip: ops are not roofline-judged (give --target; `traceview hardware` lists the chips)"]
    hlo = TraceModules(modules, costs, None if ran is None else (profile, hlo_path, stage), converted)
    pipeline = PipelineResult(profile=profile, ops=ops, steps=profile.step_times, hlo=hlo, run_ops=run,
                              op_index=np.arange(len(ops), dtype=np.int64), per_device=per_device,
                              device_times=devices, capture_chip=chip, base_warnings=warnings,
                              target_warnings=unjudged)
    if given is not None:
        return apply_target(pipeline, given, detected=False)
    if chip is None:
        return pipeline
    return apply_target(pipeline, chip, detected=True, extra_warnings=detect_warnings, source=source)


def _chip_from_dump(profile: Profile, hlo_path, db: dict, detect_warnings: list[str]):
    """(chip, source, warnings) from the target config of the run's dump (--hlo, else beside the trace),
    for a trace that names no chip; the trace's detection warnings stay when the dump names none."""
    from traceview.hardware.dump_target import dump_target
    from traceview.parsers.layout import find_dump_dir

    found = dump_target(hlo_path or find_dump_dir(profile.source.path), db)
    if found is None:
        return None, "trace", detect_warnings
    if found.chip is None:
        return None, "trace", detect_warnings + found.warnings
    return found.chip, found.source, found.warnings


def apply_target(pipeline: PipelineResult, chip: Chip, detected: bool = False,
                 extra_warnings: list[str] | None = None, source: str | None = None) -> PipelineResult:
    """A copy of the pipeline's result with its ops judged against `chip` (replacing any earlier judgement
    and its warnings). The input is left as it was, so a cached result can be re-targeted freely.
    ``source``: where a detected chip came from (default "trace"; a chip not detected was given).
    """
    capture = pipeline.capture_chip
    measured_on = capture if capture is not None and capture.name != chip.name else None
    base = pipeline.ops.drop(columns=[c for c in pipeline.ops.columns
                                      if c in OUTPUT_COLUMNS or c == "projected_time_ps"])
    ops, roof_warnings = roofline(base, chip, time_column=JUDGED)
    ops = _label_dones_like_starts(ops, pipeline.per_device)
    total = float(pipeline.span_ps or pipeline.device_time_ps)
    ratio = np.ones(len(ops))
    if measured_on is not None:
        ops, ratio, roof_warnings = _project(ops, base, measured_on, chip, roof_warnings)
        self_ps = ops["self_time_ps"].to_numpy(dtype="float64")
        total = projected_total(float(pipeline.device_time_ps), float(pipeline.idle_ps), self_ps, self_ps * ratio)
    run = pipeline.run_ops
    # the busy time by bound per device and per step, in one pass over the kept rows
    bare_steps = without_step_bounds(pipeline.steps)
    measure_steps = run.n_rows > 0 and not bare_steps.empty
    busy, step_split = run.busy_split(bound_codes(ops), len(BOUNDS), bare_steps if measure_steps else None,
                                      pipeline.op_index)
    by_bound = totals_by_bound(busy)
    projected = measured_on is not None
    summary = summarize(ops, chip, total_time_ps=total, idle_ps=pipeline.idle_ps, time_column=JUDGED,
                        by_bound_ps=None if projected else by_bound)
    if projected:
        summary["time_by_bound_ps"] = {**by_bound, "idle": float(pipeline.idle_ps)}
    summary["projected"] = projected
    if projected:
        summary["projected_time_ps"] = total
        summary["projection_model"] = PROJECTION_MODEL
    ranked = ops.reset_index(drop=True).sort_values("gain_ps", ascending=False, na_position="last", kind="stable")
    steps = bare_steps if step_split is None else with_step_bounds(bare_steps, step_split)
    if projected and not steps.empty:
        steps["projected_time_ps"] = projected_step_times(steps, ops, ratio)
    judged = Judgement(chip, (source or "trace") if detected else "--target", summary, measured_on)
    return dataclasses.replace(
        pipeline, judged=judged, ops=ranked.reset_index(drop=True), steps=steps,
        op_index=_reordered(pipeline.op_index, ranked.index.to_numpy()),
        target_warnings=_dedupe(list(extra_warnings or []) + roof_warnings + summary.get("warnings", [])))


def _project(ops: pd.DataFrame, base: pd.DataFrame, capture: Chip, chip: Chip,
             roof_warnings: list[str]) -> tuple[pd.DataFrame, np.ndarray, list[str]]:
    """Ops judged on `chip` from times measured on `capture` (traceview.analysis.projection): projected time,
    and efficiency, gap and gain against the target's roofline from it; per op the ratio
    projected / measured (1 where the model does not apply)."""
    measured_ops, capture_warnings = roofline(base, capture, time_column=JUDGED)
    on_capture = measured_ops.set_index(["program_id", "module", "op"] + (["device"] if "device" in base else []))
    key = ["program_id", "module", "op"] + (["device"] if "device" in ops else [])
    roof_c = on_capture["roofline_time_ps"].reindex(pd.MultiIndex.from_frame(ops[key])).to_numpy(dtype="float64")
    measured = ops[JUDGED].to_numpy(dtype="float64")
    roof_t = ops["roofline_time_ps"].to_numpy(dtype="float64")
    projected, modelled = projected_times(measured, roof_c, roof_t)
    out = ops.copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(modelled, projected / measured, 1.0)
        exposed = out["exposed_time_ps"].to_numpy(dtype="float64") * ratio if "exposed_time_ps" in out else \
            np.full(len(out), np.nan)
        out["projected_time_ps"] = projected
        out["efficiency"] = np.where(projected > 0, roof_t / projected, np.nan)
        out["gap_ps"] = projected - roof_t
    out["gain_ps"] = gain_ps(out["gap_ps"].to_numpy(dtype="float64"), exposed)
    kept = float(np.nansum(out["self_time_ps"].to_numpy(dtype="float64")[~modelled]))
    total = float(np.nansum(out["self_time_ps"].to_numpy(dtype="float64"))) or 1.0
    faster = [w for w in capture_warnings if "ran faster than the roofline" in w]
    warnings = [w for w in roof_warnings if "ran faster than the roofline" not in w] + faster + [
        f"projection: the trace was measured on {capture.name}, not {chip.name}; {chip.name} times are "
        f"projected ({PROJECTION_MODEL}); {100 * kept / total:.1f}% of op self time is kept as measured"]
    return out, ratio, warnings


def _reordered(rows: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Row pointers into a table after it was reordered so that new row i is old row ``order[i]``."""
    position = np.empty(len(order) + 1, dtype=np.int64)
    position[order] = np.arange(len(order))
    position[len(order)] = -1                 # -1 (no row) stays -1
    return position[rows]


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
    for column in ("roofline_time_ps", "t_compute_ps", "t_memory_ps", "t_comm_ps", "efficiency", "gap_ps",
                   "gain_ps"):
        out.loc[is_done, column] = np.nan
    return out
