"""What `diff` and `check` compare: one Snapshot per side, from a trace, an HLO dump or a stored JSON.

A Snapshot is the small, comparable part of an analysis: per-op totals (one
row per module and op), per-step times, the split by bound, MFU, and for HLO
inputs the cost-model totals per module. A live analysis (the pipeline's PipelineResult) and the JSON that
`traceview analyze --format json` wrote for it become the same Snapshot, so
CI can keep that small file as its baseline instead of a whole trace; the
JSON `traceview hlo --format json` writes is a baseline for static checks.

Op columns (totals over the whole capture, times in ps):
module, op, opcode, category, shape, dtype, occurrences, time_ps (self time),
judged_time_ps, roofline_time_ps, flops, bytes, collective_bytes, bound,
source_file, source_line, fingerprint (hash of the op's HLO content, or "").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from traceview.analysis.modules import NOT_EXECUTED, op_fingerprints
from traceview.config.files import read_json, validate
from traceview.errors import UserError
from traceview.parsers.hlo.model import HloModule
from traceview.parsers.profile import OP_COLUMNS as EXECUTION_COLUMNS
from traceview.parsers.profile import empty_frame
from traceview.units import PS_PER_US
from traceview.vocabulary import BOUNDS_AND_IDLE

if TYPE_CHECKING:
    from traceview.analysis.build import PipelineResult

OP_COLUMNS = ["module", "op", "opcode", "category", "shape", "dtype", "occurrences", "time_ps",
              "judged_time_ps", "roofline_time_ps", "flops", "bytes", "collective_bytes", "bound",
              "source_file", "source_line", "fingerprint", "op_name"]
MODULE_COLUMNS = ["module", "flops", "transcendentals", "bytes_accessed", "collective_bytes"]

@dataclass
class Snapshot:
    """One side of a comparison. `kind` is "trace" (measured times) or "hlo" (cost model only)."""

    kind: str
    label: str
    ops: pd.DataFrame
    step_times_ps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    op_steps: pd.DataFrame | None = None    # module, op, step, time_ps: per-step op times, when known
    time_by_bound_ps: dict | None = None    # whole capture, by bound (incl. idle)
    mfu: float | None = None
    target: str | None = None
    device_time_ps: float | None = None
    modules: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=MODULE_COLUMNS))
    warnings: list[str] = field(default_factory=list)
    memory: dict[str, int] = field(default_factory=dict)   # peak bytes: "runtime:<allocator>", "static:<module>"
    # module, program_id, steps_run (steps it ran in), outside (ran outside every step): the programs that
    # executed in the capture (regress.gating); None where the input records no executions (HLO)
    programs: pd.DataFrame | None = None
    projected: bool = False     # judged against a target the trace did not run on (bounds, efficiency, MFU)

    @property
    def n_steps(self) -> int:
        """How many steps the op totals are spread over (1 when the capture has no steps)."""
        return max(len(self.step_times_ps), 1)


# ------------------------------------------------------------------ fingerprints

def _with_fingerprints(ops: pd.DataFrame, modules: list[HloModule]) -> pd.DataFrame:
    prints = op_fingerprints(modules) if modules else {}
    ops["fingerprint"] = [prints.get((m, o), "") for m, o in zip(ops["module"], ops["op"])]
    return ops


# ------------------------------------------------------------------ from a PipelineResult

def _collapse(ops: pd.DataFrame) -> pd.DataFrame:
    """One row per (module, op): sums of the additive columns, the rest from the longest row.

    Rows split by program id (a module compiled twice) or device fold together.
    """
    if ops.empty:
        return pd.DataFrame(columns=OP_COLUMNS)
    ops = ops.sort_values("time_ps", ascending=False, kind="stable")
    if not ops.duplicated(["module", "op"]).any():
        return ops.reset_index(drop=True)
    sums = ["occurrences", "time_ps", "judged_time_ps", "roofline_time_ps", "flops", "bytes", "collective_bytes"]
    grouped = ops.groupby(["module", "op"], sort=False)
    first = grouped.first()
    totals = grouped[sums].sum(min_count=1)
    return first.drop(columns=sums).join(totals).reset_index()[OP_COLUMNS]


def _column(frame: pd.DataFrame, name: str, default=np.nan) -> pd.Series:
    return frame[name] if name in frame.columns else pd.Series(default, index=frame.index)


def snapshot_from_analysis(pipeline: PipelineResult, label: str | None = None) -> Snapshot:
    """The comparable part of a live `traceview.analysis.build.PipelineResult`."""
    a = pipeline.ops
    ops = pd.DataFrame({
        "module": a["module"].astype(str), "op": a["op"].astype(str),
        "opcode": _column(a, "opcode", ""), "category": _column(a, "category", ""),
        "shape": _column(a, "shape", ""), "dtype": _column(a, "dtype", ""),
        "occurrences": _column(a, "occurrences", 0).astype("float64"),
        "time_ps": a["self_time_ps"].astype("float64"),
        "judged_time_ps": _column(a, "judged_time_ps").astype("float64"),
        "roofline_time_ps": _column(a, "roofline_time_ps").astype("float64"),
        "flops": _column(a, "flops").astype("float64"), "bytes": _column(a, "bytes_accessed").astype("float64"),
        "collective_bytes": _column(a, "payload_bytes").astype("float64"),
        "bound": _column(a, "bound", None).astype(object),
        "source_file": _column(a, "source_file", ""), "source_line": _column(a, "source_line"),
        "fingerprint": _column(a, "fingerprint", "").fillna("").astype(str),  # analysis.modules.op_fingerprints
        "op_name": _column(a, "op_name", "").fillna("").astype(str),          # named scopes: regress.scopes
    })
    ops = _collapse(ops)
    kept = pipeline.profile.kept     # per-step op times and the programs that ran: from the executions kept
    raw = kept.ops if kept is not None else empty_frame(EXECUTION_COLUMNS)
    op_steps = None
    if not raw.empty and (raw["step"] >= 0).any():
        inside = raw[raw["step"] >= 0]
        op_steps = (inside.groupby(["module", "op", "step"], observed=True)["self_ps"].sum()
                    .rename("time_ps").reset_index().astype({"module": str, "op": str}))
    judged = pipeline.judged
    summary = judged.summary if judged is not None else {}
    from traceview.memory.peaks import profile_peaks
    from traceview.regress.gating import programs_that_ran

    memory, memory_warnings = profile_peaks(pipeline.profile)
    return Snapshot(
        kind="trace", label=label or pipeline.profile.source.path, ops=ops,
        step_times_ps=pipeline.steps["time_ps"].to_numpy(dtype="float64") if not pipeline.steps.empty
        else np.zeros(0),
        op_steps=op_steps,
        time_by_bound_ps=_per_device_bounds(pipeline),
        mfu=summary.get("mfu"), target=judged.chip.name if judged is not None else None,
        device_time_ps=float(pipeline.device_time_ps),
        warnings=list(dict.fromkeys(list(pipeline.warnings) + memory_warnings)), memory=memory,
        programs=programs_that_ran(raw), projected=judged is not None and judged.projected)


def _per_device_bounds(pipeline: PipelineResult) -> dict[str, float] | None:
    """Time by bound and idle per device, summed over the steps (the figures of the step table and
    chart), so diff's per-step means never exceed a step; without steps, the whole capture's split
    divided by the active devices."""
    steps = pipeline.steps
    names = [*BOUNDS_AND_IDLE]
    if not steps.empty and all(f"{b}_ps" in steps.columns for b in names):
        return {b: float(steps[f"{b}_ps"].sum()) for b in names}
    by_bound = pipeline.judged.summary.get("time_by_bound_ps") if pipeline.judged is not None else None
    if not by_bound:
        return None
    active = max(len(pipeline.device_times), 1)
    return {k: float(v) / active for k, v in by_bound.items()}


def _per_device_bounds_json(summary: dict) -> dict[str, float] | None:
    """:func:`_per_device_bounds` from an `analyze --format json` summary (older files: as stored)."""
    steps = summary.get("steps") or []
    splits: list[dict] = [s["time_by_bound_us"] for s in steps
                          if isinstance(s, dict) and isinstance(s.get("time_by_bound_us"), dict)]
    if splits and len(splits) == len(steps) and all("idle" in x for x in splits):
        return {b: sum(float(x.get(b) or 0.0) for x in splits) * PS_PER_US for b in BOUNDS_AND_IDLE}
    by_bound = summary.get("time_by_bound_us")
    if not isinstance(by_bound, dict):
        return None
    active = summary.get("active_devices") or 1
    return {k: float(v or 0.0) * PS_PER_US / active for k, v in by_bound.items()}


# ------------------------------------------------------------------ from HLO modules

def snapshot_from_hlo(modules: list[HloModule], label: str, warnings: list[str] | None = None) -> Snapshot:
    """Cost-model totals per module and per instruction; no times."""
    from traceview.cost.hlo_costs import hlo_report

    report, cost_warnings = hlo_report(modules)
    module_rows, frames = [], []
    names = [m.name for m in modules]
    for module, costs, totals in report:
        name = module.name if names.count(module.name) == 1 else f"{module.name}#{module.module_id}"
        collective = float(costs["payload_bytes"].sum()) if len(costs) else 0.0
        module_rows.append((name, totals["flops"], totals["transcendentals"], totals["bytes_accessed"], collective))
        if len(costs):
            frames.append(costs.assign(module=name))
    costs = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["module", "name", "opcode"])
    costs = costs[~costs["opcode"].isin(NOT_EXECUTED)]
    ops = pd.DataFrame({
        "module": costs["module"].astype(str), "op": costs["name"].astype(str), "opcode": costs["opcode"],
        "category": _column(costs, "category", ""), "shape": _column(costs, "shape", ""),
        "dtype": _column(costs, "dtype", ""), "occurrences": 1.0, "time_ps": np.nan, "judged_time_ps": np.nan,
        "roofline_time_ps": np.nan, "flops": _column(costs, "flops").astype("float64"),
        "bytes": _column(costs, "bytes_accessed").astype("float64"),
        "collective_bytes": _column(costs, "payload_bytes").astype("float64"), "bound": None,
        "source_file": _column(costs, "source_file", ""), "source_line": _column(costs, "source_line"),
        "op_name": _column(costs, "op_name", "").fillna("").astype(str),
    })
    ops = _with_fingerprints(ops.reset_index(drop=True), modules)
    ops = ops.drop_duplicates(["module", "op"]).reset_index(drop=True)
    return Snapshot(kind="hlo", label=label, ops=ops[OP_COLUMNS],
                    modules=pd.DataFrame(module_rows, columns=MODULE_COLUMNS),
                    warnings=list(dict.fromkeys((warnings or []) + cost_warnings)))


# ------------------------------------------------------------------ from stored JSON

def _records_frame(records: list[dict], columns: dict[str, str], path: Path) -> pd.DataFrame:
    """JSON records -> frame with renamed columns; `_us` fields become `_ps`."""
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise UserError(f"{path}: 'ops' must be a list of objects")
    frame = pd.DataFrame.from_records(records)
    out = pd.DataFrame(index=frame.index)
    for src, dst in columns.items():
        if src in frame.columns:
            values = frame[src]
            if src.endswith("_us"):  # back to integer picoseconds, as the trace held them
                values = (pd.to_numeric(values, errors="coerce") * PS_PER_US).round()
            out[dst] = values
        else:
            out[dst] = np.nan if dst.endswith(("_ps", "flops", "bytes", "occurrences", "line")) else ""
    return out


_ANALYSIS_OP_FIELDS = {"module": "module", "name": "op", "opcode": "opcode", "category": "category",
                       "shape": "shape", "dtype": "dtype", "occurrences": "occurrences",
                       "self_time_us": "time_ps", "judged_time_us": "judged_time_ps",
                       "roofline_time_us": "roofline_time_ps", "flops": "flops", "bytes_accessed": "bytes",
                       "collective_bytes": "collective_bytes", "bound": "bound", "source_file": "source_file",
                       "source_line": "source_line", "fingerprint": "fingerprint", "op_name": "op_name"}


def _op_steps_from_json(records: list[dict]) -> pd.DataFrame | None:
    """Per-step op times, when the ops carry `step_times_us` (self time per step, in step order)."""
    rows = [(r.get("module") or "", str(r["name"]), i, float(t) * PS_PER_US)
            for r in records if isinstance(r.get("step_times_us"), list) and "name" in r
            for i, t in enumerate(r["step_times_us"]) if isinstance(t, (int, float))]
    if not rows:
        return None
    frame = pd.DataFrame(rows, columns=["module", "op", "step", "time_ps"])
    return frame.groupby(["module", "op", "step"], as_index=False)["time_ps"].sum()


def _snapshot_from_analysis_json(data: dict, path: Path) -> Snapshot:
    summary = data.get("summary")
    if not isinstance(summary, dict):
        raise UserError(f"{path}: no 'summary' object: not a `traceview analyze --format json` file")
    ops = _records_frame(data.get("ops") or [], _ANALYSIS_OP_FIELDS, path)
    if not ops.empty and ops["op"].isna().any():
        raise UserError(f"{path}: an entry of 'ops' has no 'name'")
    ops["module"] = ops["module"].fillna("").astype(str)
    ops["op"] = ops["op"].astype(str)
    ops["fingerprint"] = ops["fingerprint"].fillna("").astype(str)
    ops["op_name"] = ops["op_name"].fillna("").astype(str)
    for column in ("occurrences", "time_ps", "judged_time_ps", "roofline_time_ps", "flops", "bytes",
                   "collective_bytes", "source_line"):
        ops[column] = pd.to_numeric(ops[column], errors="coerce")
    ops["bound"] = ops["bound"].replace("", None).astype(object)
    op_steps = _op_steps_from_json(data.get("ops") or [])
    from traceview.regress.gating import programs_from_records
    try:
        steps = np.array([round(float(s["time_us"]) * PS_PER_US) for s in summary.get("steps") or []],
                         dtype="float64")
    except (TypeError, KeyError, ValueError):
        raise UserError(f"{path}: summary.steps must be a list of {{'step', 'time_us'}} objects") from None
    by_bound = _per_device_bounds_json(summary)
    target = data.get("target") or {}
    warnings = [w for w in data.get("warnings") or [] if isinstance(w, str)]
    device_time = summary.get("device_time_us")
    return Snapshot(
        kind="trace", label=str(path), ops=_collapse(ops[OP_COLUMNS]), step_times_ps=steps, op_steps=op_steps,
        time_by_bound_ps={k: (v or 0.0) * PS_PER_US for k, v in by_bound.items()} if isinstance(by_bound, dict)
        else None,
        mfu=summary.get("mfu"), target=target.get("name") if isinstance(target, dict) else None,
        device_time_ps=None if device_time is None else float(device_time) * PS_PER_US, warnings=warnings,
        programs=programs_from_records(data.get("ops") or [], len(steps)),
        projected=bool(target.get("projected")) if isinstance(target, dict) else False)


def _snapshot_from_hlo_json(data: dict, path: Path) -> Snapshot:
    modules = data.get("modules")
    if not isinstance(modules, list) or not all(isinstance(m, dict) and "name" in m for m in modules):
        raise UserError(f"{path}: 'modules' must be a list of objects with a 'name'")
    rows, instructions = [], []
    names = [m["name"] for m in modules]
    for i, m in enumerate(modules):
        name = m["name"] if names.count(m["name"]) == 1 else f"{m['name']}#{i}"
        rows.append((name, m.get("flops"), m.get("transcendentals"), m.get("bytes_accessed"),
                     m.get("collective_bytes")))
        for inst in m.get("instructions") or []:
            if inst.get("opcode") in NOT_EXECUTED:
                continue
            coll = inst.get("collective") or {}
            instructions.append({
                "module": name, "op": inst.get("name"), "opcode": inst.get("opcode") or "",
                "category": inst.get("category") or "", "shape": inst.get("shape") or "",
                "dtype": inst.get("dtype") or "", "occurrences": 1.0, "time_ps": np.nan, "judged_time_ps": np.nan,
                "roofline_time_ps": np.nan, "flops": inst.get("flops"),
                "bytes": (inst.get("bytes_read") or 0) + (inst.get("bytes_written") or 0),
                "collective_bytes": coll.get("payload_bytes") or 0.0, "bound": None,
                "source_file": inst.get("source_file") or "", "source_line": inst.get("source_line"),
                "fingerprint": ""})
    ops = pd.DataFrame.from_records(instructions, columns=OP_COLUMNS)
    ops = ops.drop_duplicates(["module", "op"]).reset_index(drop=True)
    module_frame = pd.DataFrame(rows, columns=MODULE_COLUMNS)
    for column in MODULE_COLUMNS[1:]:
        module_frame[column] = pd.to_numeric(module_frame[column], errors="coerce")
    return Snapshot(kind="hlo", label=str(path), ops=ops, modules=module_frame,
                    warnings=[w for w in data.get("warnings") or [] if isinstance(w, str)])


def load_baseline(path: str | Path) -> Snapshot:
    """A stored baseline: the JSON of `traceview analyze --format json` or `traceview hlo --format json`."""
    p = Path(path)
    data = read_json(p, "baseline file")
    if not isinstance(data, dict):
        raise UserError(f"{p}: expected a JSON object from `traceview analyze --format json`")
    if "verdict" in data and "checks" in data:
        raise UserError(f"{p}: this is a diff/check report, not a baseline; store the output of "
                        "`traceview analyze --format json` instead")
    if "ops" in data:
        validate(data, "analyze", p)
        return _snapshot_from_analysis_json(data, p)
    if "modules" in data:
        validate(data, "hlo", p)
        return _snapshot_from_hlo_json(data, p)
    raise UserError(f"{p}: neither `traceview analyze --format json` (no 'ops') nor "
                    "`traceview hlo --format json` (no 'modules') output")


# ------------------------------------------------------------------ any PATH

def load_snapshot(path: str | Path, run: str | None = None, target: str | None = None,
                  hardware_file: str | Path | None = None, stage: str = "after") -> Snapshot:
    """Whatever PATH is: a stored JSON baseline, a trace (log dir, run dir, file), or HLO (dump dir, file)."""
    from traceview.analysis.build import build_analysis
    from traceview.parsers.hlo.dump import load_hlo_modules
    from traceview.trace.read import is_trace_path, load_profile

    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such file or directory")
    if p.is_file() and p.name.endswith(".json"):
        return load_baseline(p)
    if is_trace_path(p):
        result = build_analysis(load_profile(p, run=run), target=target, hardware_file=hardware_file, stage=stage)
        return snapshot_from_analysis(result, label=str(p))
    modules, warnings = load_hlo_modules(p, stage=stage)
    snapshot = snapshot_from_hlo(modules, label=str(p), warnings=warnings)
    if stage == "after":  # buffer assignments exist only after optimizations
        from traceview.memory.peaks import dump_peaks

        snapshot.memory, memory_warnings = dump_peaks(p)
        snapshot.warnings = list(dict.fromkeys(snapshot.warnings + memory_warnings))
    return snapshot
