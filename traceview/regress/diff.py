"""Compare two snapshots (traces, HLO dumps or stored baselines): steps, bounds, ops, modules.

Ops are matched by (module, op name); ops left over are matched, one to one,
by their HLO fingerprint (a fusion XLA renumbered), then by their cost
signature (opcode, shape and FLOPs/bytes per execution: what a stored JSON
baseline still has), then by source location, each only where the key is
unique on both sides. Times, FLOPs and bytes are compared per step, so two
captures of different lengths compare fairly.

One statistic per row: where both sides have per-step times (the step time,
an op, a scope), a row shows the median per step of each side and the change
between those two medians (median new / median base - 1), so the change is
the one between the columns beside it; beside it goes the distribution-free
Mann-Whitney interval of the per-step log ratios, so a verdict can ask "is
this slowdown real?". Without per-step times a row shows the mean per step
(the capture's total over its steps) and their ratio. The whole capture's
totals stay in their own columns (`*_total_time_ps`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traceview.regress.baseline import Snapshot, snapshot_from_analysis
from traceview.regress.match import match_ops
from traceview.regress.stats import Shift, median_change
from traceview.vocabulary import BOUNDS_AND_IDLE

STATUSES = ("same", "changed", "new", "vanished")


@dataclass(frozen=True)
class Side:
    """What one side of a diff is: its label (path), kind ("trace" or "hlo"), target chip and step count."""

    label: str
    kind: str
    target: str | None
    steps: int


@dataclass(frozen=True)
class Pair:
    """One quantity on both sides (None where a side does not know it)."""

    base: float | None
    new: float | None


@dataclass(frozen=True)
class StepTime:
    """The typical step: median step time (``name`` "step_time"), or the whole capture's device time
    ("device_time") when a side has no steps; ``change`` new/base - 1 with its interval (``low``, ``high``)."""

    name: str
    base_ps: float | None
    new_ps: float | None
    change: float | None
    low: float | None
    high: float | None
    method: str


@dataclass(frozen=True)
class OpCounts:
    """Ops by status, plus those whose bound changed and those matched under another name."""

    same: int
    changed: int
    new: int
    vanished: int
    label_changed: int
    renamed: int


@dataclass(frozen=True)
class DiffSummary:
    """Headline numbers of a diff. Per step: ``time_by_bound_ps`` (bound -> Pair; None unless both sides
    are traces judged by bound) and ``per_step`` ("flops", "bytes", "collective_bytes" -> Pair);
    ``step_time`` None for HLO inputs."""

    base: Side
    new: Side
    step_time: StepTime | None
    time_by_bound_ps: dict[str, Pair] | None
    mfu: Pair
    per_step: dict[str, Pair]
    ops: OpCounts

    def to_dict(self) -> dict[str, Any]:
        """Plain dicts, as the JSON report writes them (no ``step_time``/``time_by_bound_ps`` key when None)."""
        out = dataclasses.asdict(self)
        return {k: v for k, v in out.items() if not (k in ("step_time", "time_by_bound_ps") and v is None)}


@dataclass
class Diff:
    """The comparison of two snapshots.

    `ops`: one row per op of either side (see `diff_analyses`); `steps`: the
    per-step times side by side (by position); `modules`: cost-model totals
    per module (HLO inputs); `summary`: headline numbers; `step_shift`: the
    noise-aware change of the step time (None when neither side has a time);
    `op_shifts`: the same per (module, op) of the new side, for matched ops with
    per-step times on both sides.
    """

    base: Snapshot
    new: Snapshot
    ops: pd.DataFrame
    steps: pd.DataFrame
    modules: pd.DataFrame
    summary: DiffSummary
    step_shift: Shift | None = None
    op_shifts: dict[tuple[str, str], Shift] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    scopes: pd.DataFrame = field(default_factory=pd.DataFrame)   # regress.scopes.scope_changes


def _as_snapshot(obj) -> Snapshot:
    if isinstance(obj, Snapshot):
        return obj
    if hasattr(obj, "profile") and hasattr(obj, "ops"):
        return snapshot_from_analysis(obj)
    raise TypeError(f"cannot compare a {type(obj).__name__}: expected a PipelineResult or a Snapshot")


def _rel(base: np.ndarray, new: np.ndarray) -> np.ndarray:
    """new/base - 1, +inf when something appears from zero, NaN when either is unknown."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = new / base - 1.0
    out = np.where((base == 0) & (new == 0), 0.0, out)
    return np.where((base == 0) & (new > 0), np.inf, out)


def _side(snap: Snapshot, rows: pd.Series) -> pd.DataFrame:
    """The snapshot's op rows for `rows` (NaN labels give empty rows), per step."""
    ops = snap.ops.reindex(rows.to_numpy())
    steps = snap.n_steps
    efficiency = ops["roofline_time_ps"] / ops["judged_time_ps"].where(ops["judged_time_ps"] > 0)
    return pd.DataFrame({
        "op": ops["op"].to_numpy(), "module": ops["module"].to_numpy(),
        "time_ps": (ops["time_ps"] / steps).to_numpy(), "total_time_ps": ops["time_ps"].to_numpy(),
        "flops": (ops["flops"] / steps).to_numpy(),
        "bytes": (ops["bytes"] / steps).to_numpy(),
        "collective_bytes": (ops["collective_bytes"] / steps).to_numpy(),
        "occurrences": (ops["occurrences"] / steps).to_numpy(), "efficiency": efficiency.to_numpy(),
        "bound": ops["bound"].to_numpy(), "opcode": ops["opcode"].to_numpy(),
        "category": ops["category"].to_numpy(), "source_file": ops["source_file"].to_numpy(),
        "source_line": ops["source_line"].to_numpy()})


def _samples_by_op(op_steps: pd.DataFrame) -> dict[str, np.ndarray]:
    """"module\0op" -> its per-step times, in one sort rather than a group per op."""
    keys = (op_steps["module"].astype(str) + "\0" + op_steps["op"].astype(str)).to_numpy()
    codes, uniques = pd.factorize(keys)
    order = np.argsort(codes, kind="stable")
    values = op_steps["time_ps"].to_numpy(dtype="float64")[order]
    return dict(zip(uniques, np.split(values, np.cumsum(np.bincount(codes))[:-1])))


def _keys(snap: Snapshot, labels: pd.Series) -> np.ndarray:
    """"module\0op" of the snapshot rows `labels` (NaN labels give "")."""
    names = (snap.ops["module"].astype(str) + "\0" + snap.ops["op"].astype(str)).to_numpy()
    positions = snap.ops.index.get_indexer(labels.to_numpy())
    return np.where(positions >= 0, names[positions], "")


def _op_shifts(base: Snapshot, new: Snapshot, pairs: pd.DataFrame,
               confidence: float) -> dict[tuple[str, str], Shift]:
    """Per-op per-step shifts, for matched ops whose per-step times both sides know."""
    if base.op_steps is None or new.op_steps is None or base.op_steps.empty or new.op_steps.empty:
        return {}
    samples_b, samples_n = _samples_by_op(base.op_steps), _samples_by_op(new.op_steps)
    out: dict[tuple[str, str], Shift] = {}
    for kb, kn in zip(_keys(base, pairs["base"]), _keys(new, pairs["new"])):
        if kb in samples_b and kn in samples_n:
            module, op = kn.split("\0", 1)
            out[(module, op)] = median_change(samples_b[kb], samples_n[kn], confidence)
    return out


def _op_frame(base: Snapshot, new: Snapshot, pairs: pd.DataFrame, shifts: dict[tuple[str, str], Shift],
              time_tolerance: float, min_time_ps: float) -> pd.DataFrame:
    b, n = _side(base, pairs["base"]), _side(new, pairs["new"])
    in_base, in_new = pairs["base"].notna().to_numpy(), pairs["new"].notna().to_numpy()
    out = pd.DataFrame({
        "module": np.where(in_new, n["module"], b["module"]),
        "op": np.where(in_new, n["op"], b["op"]),
        "base_op": b["op"].to_numpy(),
        "matched_by": pairs["matched_by"].to_numpy(),
    })
    for column in ("time_ps", "total_time_ps", "flops", "bytes", "collective_bytes", "occurrences", "efficiency",
                   "bound"):
        out[f"base_{column}"] = b[column].to_numpy()
        out[f"new_{column}"] = n[column].to_numpy()
    for column in ("opcode", "category", "source_file", "source_line"):
        out[column] = np.where(in_new, n[column], b[column])
    # One op, one statistic: where per-step times exist on both sides every table (checks, changed ops,
    # JSON) shows the per-step medians; otherwise the mean per step (total / steps). The change is always
    # the one between the two shown values.
    out["time_statistic"] = "mean/step"
    out["base_steps"] = float(base.n_steps)
    out["new_steps"] = float(new.n_steps)
    for i, (module, op) in enumerate(zip(out["module"], out["op"])):
        s = shifts.get((module, op))
        if s is not None and s.estimate is not None and s.base_median is not None and s.new_median is not None:
            out.loc[i, ["base_time_ps", "new_time_ps"]] = s.base_median, s.new_median
            out.loc[i, ["time_statistic", "base_steps", "new_steps"]] = "median/step", s.n_base, s.n_new
    bt, nt = out["base_time_ps"].to_numpy(dtype="float64"), out["new_time_ps"].to_numpy(dtype="float64")
    out["time_change_ps"] = nt - bt
    out["change"] = _rel(bt, nt)
    out["flops_change"] = _rel(out["base_flops"].to_numpy(dtype="float64"), out["new_flops"].to_numpy(dtype="float64"))
    out["bytes_change"] = _rel(out["base_bytes"].to_numpy(dtype="float64"), out["new_bytes"].to_numpy(dtype="float64"))
    lows, highs = [], []
    for module, op in zip(out["module"], out["op"]):
        s = shifts.get((module, op))
        lows.append(np.nan if s is None or s.low is None else s.low)
        highs.append(np.nan if s is None or s.high is None else s.high)
    out["change_low"], out["change_high"] = lows, highs
    bb, nb = out["base_bound"].astype(object), out["new_bound"].astype(object)
    out["label_changed"] = in_base & in_new & bb.notna().to_numpy() & nb.notna().to_numpy() \
        & (bb.astype(str) != nb.astype(str)).to_numpy()
    out["status"] = _statuses(out, in_base, in_new, time_tolerance, min_time_ps)
    order = np.argsort(-np.nan_to_num(np.abs(out["time_change_ps"].to_numpy(dtype="float64")), nan=-1.0),
                       kind="stable")
    return out.iloc[order].reset_index(drop=True)


def _statuses(out: pd.DataFrame, in_base: np.ndarray, in_new: np.ndarray, time_tolerance: float,
              min_time_ps: float) -> np.ndarray:
    cost_changed = (np.abs(np.nan_to_num(out["flops_change"].to_numpy(dtype="float64"))) > 1e-6) \
        | (np.abs(np.nan_to_num(out["bytes_change"].to_numpy(dtype="float64"))) > 1e-6)
    big = np.fmax(out["base_time_ps"].to_numpy(dtype="float64"), out["new_time_ps"].to_numpy(dtype="float64")) \
        >= min_time_ps
    change = np.abs(np.nan_to_num(out["change"].to_numpy(dtype="float64")))
    low, high = out["change_low"].to_numpy(dtype="float64"), out["change_high"].to_numpy(dtype="float64")
    # Where an interval exists the change must also be real: the interval excludes zero.
    real = np.where(np.isnan(low), True, (low > 0) | (high < 0))
    timed = big & (change > time_tolerance) & real
    status = np.where(cost_changed | timed | out["label_changed"].to_numpy(dtype=bool), "changed", "same")
    status = np.where(in_base & ~in_new, "vanished", status)
    return np.where(in_new & ~in_base, "new", status)


def _step_frame(base: Snapshot, new: Snapshot) -> pd.DataFrame:
    n = max(len(base.step_times_ps), len(new.step_times_ps))
    pad = lambda a: np.concatenate([a, np.full(n - len(a), np.nan)])  # noqa: E731
    return pd.DataFrame({"index": np.arange(n), "base_time_ps": pad(base.step_times_ps),
                         "new_time_ps": pad(new.step_times_ps)})


def _module_frame(base: Snapshot, new: Snapshot) -> pd.DataFrame:
    quantities = ["flops", "transcendentals", "bytes_accessed", "collective_bytes"]
    merged = base.modules.merge(new.modules, on="module", how="outer", suffixes=("_b", "_n"), indicator=True)
    out = pd.DataFrame({"module": merged["module"]})
    for q in quantities:
        out[f"base_{q}"] = pd.to_numeric(merged[f"{q}_b"], errors="coerce").to_numpy()
        out[f"new_{q}"] = pd.to_numeric(merged[f"{q}_n"], errors="coerce").to_numpy()
        out[f"{q}_change"] = _rel(out[f"base_{q}"].to_numpy(dtype="float64"),
                                  out[f"new_{q}"].to_numpy(dtype="float64"))
    side = merged["_merge"].astype(str).map({"left_only": "vanished", "right_only": "new", "both": "both"})
    changed = np.zeros(len(out), dtype=bool)
    for q in quantities:
        changed |= np.abs(np.nan_to_num(out[f"{q}_change"].to_numpy(dtype="float64"))) > 1e-9
    out["status"] = np.where(side == "both", np.where(changed, "changed", "same"), side)
    return out


def _step_shift(base: Snapshot, new: Snapshot, confidence: float) -> Shift | None:
    if base.kind != "trace" or new.kind != "trace":
        return None
    if len(base.step_times_ps) and len(new.step_times_ps):
        return median_change(base.step_times_ps, new.step_times_ps, confidence)
    if base.device_time_ps and new.device_time_ps:  # no steps: the whole capture, one number each
        ratio = new.device_time_ps / base.device_time_ps - 1.0
        return Shift(ratio, None, None, "total device time (no steps in the trace)", 1, 1)
    return Shift(None, None, None, "no steps and no device time", 0, 0)


def _per_step(snap: Snapshot, column: str) -> float | None:
    values = snap.ops[column] if column in snap.ops.columns else pd.Series(dtype="float64")
    return None if values.isna().all() else float(values.sum()) / snap.n_steps


def _summary(base: Snapshot, new: Snapshot, ops: pd.DataFrame, step_shift: Shift | None) -> DiffSummary:
    step_time = None
    if step_shift is not None:
        stepped = len(base.step_times_ps) and len(new.step_times_ps)
        typical = lambda s: float(np.median(s.step_times_ps)) if stepped else s.device_time_ps  # noqa: E731
        step_time = StepTime("step_time" if stepped else "device_time", typical(base), typical(new),
                             step_shift.estimate, step_shift.low, step_shift.high, step_shift.method)
    by_bound = None
    if base.time_by_bound_ps and new.time_by_bound_ps:
        by_bound = {bound: Pair(base.time_by_bound_ps.get(bound, 0.0) / base.n_steps,
                                new.time_by_bound_ps.get(bound, 0.0) / new.n_steps) for bound in BOUNDS_AND_IDLE}
    counts = {s: int((ops["status"] == s).sum()) for s in STATUSES}
    return DiffSummary(
        base=Side(base.label, base.kind, base.target, len(base.step_times_ps)),
        new=Side(new.label, new.kind, new.target, len(new.step_times_ps)),
        step_time=step_time, time_by_bound_ps=by_bound, mfu=Pair(base.mfu, new.mfu),
        per_step={q: Pair(_per_step(base, q), _per_step(new, q)) for q in ("flops", "bytes", "collective_bytes")},
        ops=OpCounts(**counts, label_changed=int(ops["label_changed"].sum()),
                     renamed=int(((ops["matched_by"] != "name") & (ops["matched_by"] != "")).sum())))


def _warnings(base: Snapshot, new: Snapshot) -> list[str]:
    out = []
    if base.kind != new.kind:
        out.append(f"comparing {base.kind} {base.label} with {new.kind} {new.label}: only FLOPs and bytes "
                   "per op compare; give two traces or two HLO inputs for a full comparison")
    if base.target and new.target and base.target != new.target:
        out.append(f"bound labels were judged on different chips ({base.target} vs {new.target}): "
                   "give --target to judge both on one")
    for name, snap in (("base", base), ("new", new)):
        if snap.kind == "trace" and len(snap.step_times_ps) < 2:
            out.append(f"{name} {snap.label} holds {len(snap.step_times_ps)} step(s): step time is compared as "
                       "one number, with no noise estimate (trace several steps with StepTraceAnnotation)")
    both = set(base.warnings) & set(new.warnings)
    out += [w for w in base.warnings if w in both]
    out += [f"base: {w}" for w in base.warnings if w not in both]
    out += [f"new: {w}" for w in new.warnings if w not in both]
    return list(dict.fromkeys(out))


def diff_analyses(base, new, confidence: float = 0.95, time_tolerance: float = 0.10,
                  min_time_ps: float = 1e9) -> Diff:
    """Compare two analyses (PipelineResult) or Snapshots (see traceview.regress.baseline).

    `Diff.ops` columns: module, op (the new name), base_op, matched_by
    ("name", "fingerprint", "signature", "source", "" when unmatched), status
    ("same", "changed", "new", "vanished"), base_/new_ time_ps (the median per
    step where both sides have per-step op times, else the mean per step: see
    time_statistic, "median/step" or "mean/step", over base_/new_steps steps),
    base_/new_ total_time_ps (the whole capture), flops, bytes,
    collective_bytes, occurrences (all per step), efficiency, bound;
    time_change_ps, change (new_time_ps / base_time_ps - 1), change_low/change_high
    (its confidence interval when per-step op times exist), flops_change,
    bytes_change, label_changed, opcode, category, source_file, source_line. `Diff.scopes`: each named
    scope's time per step on both sides (traceview.regress.scopes).
    An op is "changed" when its FLOPs, bytes or bound changed, or its time moved
    by more than `time_tolerance` (and, with an interval, significantly) while
    taking at least `min_time_ps` per step on either side.
    """
    base, new = _as_snapshot(base), _as_snapshot(new)
    pairs = match_ops(base.ops, new.ops)
    shifts = _op_shifts(base, new, pairs, confidence)
    step_shift = _step_shift(base, new, confidence)
    ops = _op_frame(base, new, pairs, shifts, time_tolerance, min_time_ps)
    from traceview.regress.scopes import scope_changes

    return Diff(base=base, new=new, ops=ops, steps=_step_frame(base, new), modules=_module_frame(base, new),
                summary=_summary(base, new, ops, step_shift), step_shift=step_shift, op_shifts=shifts,
                warnings=_warnings(base, new), scopes=scope_changes(base, new, confidence))
