"""The history report: per metric, its value in each run and its change points (the JSON contract).

``{"runs": [{"label", "time", "meta", ...}], "series": [{"metric", "unit", "points": [{"label",
"value", "low", "high"}], "changes": [{"label", "before", "after", "change", "significant", ...}]}],
"warnings": []}``. Without ``--metric`` the headline metrics are shown (HEADLINE); patterns are globs
on the metric names (``op:*``, ``peak_memory:static:*``); ``op:<module>/<op>`` series are the op's
self time per step, from the stored ops.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traceview.history.changes import Change, find_changes
from traceview.history.store import HistoryStore
from traceview.units import PS_PER_US, finite

HEADLINE = ("step_time", "mfu", "gain", "time_by_bound:*", "peak_memory:runtime", "peak_memory:static")
HIGHER_IS_BETTER = ("mfu",)
MAX_SERIES = 200          # series in one report; a wider pattern is cut, with a warning
DEFAULT_LAST = 1000       # runs in a report (and the check window) unless --last says otherwise


@dataclass
class Series:
    """One metric over the runs: points (label, value, low, high) and its change points."""

    metric: str
    unit: str
    points: list[dict[str, Any]]
    changes: list[Change] = field(default_factory=list)

    @property
    def higher_is_better(self) -> bool:
        return self.metric in HIGHER_IS_BETTER

    def worse(self, change: Change) -> bool:
        """Whether a change made this metric worse (slower, bigger, or a lower MFU)."""
        return change.after < change.before if self.higher_is_better else change.after > change.before

    @property
    def last_change(self) -> Change | None:
        """The latest significant change point."""
        significant = [c for c in self.changes if c.significant]
        return significant[-1] if significant else None


@dataclass
class HistoryReport:
    """What ``traceview history report`` shows (see the module docstring)."""

    runs: list[dict[str, Any]]
    series: list[Series]
    warnings: list[str] = field(default_factory=list)

    def series_named(self, metric: str) -> Series | None:
        return next((s for s in self.series if s.metric == metric), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "series": [{"metric": s.metric, "unit": s.unit, "points": s.points,
                        "changes": [{"label": c.label, "before": c.before, "after": c.after, "change": c.change,
                                     "significant": c.significant, "low": c.low, "high": c.high,
                                     "method": c.method, "worse": s.worse(c)} for c in s.changes]}
                       for s in self.series],
            "warnings": self.warnings,
        }


def _wanted(names: list[str], patterns: list[str]) -> list[str]:
    """The names matching the patterns, in the patterns' order, each once."""
    return list(dict.fromkeys(n for pattern in patterns for n in names if fnmatch.fnmatchcase(n, pattern)))


def _op_metrics(store: HistoryStore, runs: pd.DataFrame) -> pd.DataFrame:
    """The stored ops as metric rows: ``op:<module>/<op>``, self time per step (us), per-step samples."""
    ops = store.ops([int(i) for i in runs["id"]])
    if ops.empty:
        return pd.DataFrame(columns=["run_id", "metric", "value", "low", "high", "unit", "samples"])
    steps = dict(zip(runs["id"], runs["steps"]))
    rows = []
    for run_id, module, op, time_ps, per_step in zip(ops["run_id"], ops["module"], ops["op"], ops["time_ps"],
                                                     ops["step_times_ps"]):
        samples = None if per_step is None else [None if t is None else t / PS_PER_US for t in per_step]
        low = high = value = None
        known = [s for s in samples or [] if s is not None]
        if samples and len(known) == len(samples):
            low, high = (float(q) for q in np.percentile(known, [25, 75]))
            value = float(np.median(known))
        else:
            value = None if time_ps is None or pd.isna(time_ps) else float(time_ps) / PS_PER_US / max(steps[run_id], 1)
        rows.append((run_id, f"op:{module}/{op}", value, low, high, "us", samples))
    return pd.DataFrame(rows, columns=["run_id", "metric", "value", "low", "high", "unit", "samples"])


def _run_record(row) -> dict[str, Any]:
    return {"label": row.label, "time": row.time, "meta": row.meta, "trace_path": row.trace_path,
            "target": row.target, "steps": int(row.steps)}


def build_report(store: HistoryStore, metrics: list[str] | None = None, last: int | None = None,
                 confidence: float = 0.95) -> HistoryReport:
    """The series of the metrics asked for (globs; default HEADLINE) over the runs (the `last` N; default
    the last DEFAULT_LAST), with their change points. Only the runs and metrics shown are read."""
    runs = store.runs(last=last if last is not None else DEFAULT_LAST)
    warnings: list[str] = []
    if runs.empty:
        return HistoryReport([], [], ["no runs recorded yet"])
    if last is None and len(runs) == DEFAULT_LAST:
        total = store.run_count()
        if total > len(runs):
            warnings.append(f"the last {len(runs)} of {total} runs are shown (--last N for another window)")
    patterns = list(metrics or HEADLINE)
    ids = [int(i) for i in runs["id"]]
    op_rows = _op_metrics(store, runs) if any(p.startswith("op:") or p == "*" for p in patterns) else None
    available = set(store.metric_names(ids)) | (set(op_rows["metric"]) if op_rows is not None else set())
    names = _wanted(sorted(available), patterns)
    if metrics and not names:
        warnings.append(f"no metric matches {', '.join(patterns)}; stored: {', '.join(sorted(available)[:12])}")
    if len(names) > MAX_SERIES:
        warnings.append(f"{len(names)} metrics match; the first {MAX_SERIES} are shown")
        names = names[:MAX_SERIES]
    stored = store.metrics(ids, [n for n in names if not n.startswith("op:")])
    if op_rows is not None:
        stored = pd.concat([stored, op_rows[op_rows["metric"].isin(names)]], ignore_index=True)
    order = {run_id: i for i, run_id in enumerate(runs["id"])}
    labels = list(runs["label"])
    series = []
    for name in names:
        rows = stored[stored["metric"] == name]
        values: list[float | None] = [None] * len(runs)
        lows: list[float | None] = [None] * len(runs)
        highs: list[float | None] = [None] * len(runs)
        samples: list[list | None] = [None] * len(runs)
        for row in rows.itertuples(index=False):
            i = order.get(row.run_id)
            if i is None:       # a row of no run shown (an older run, or a damaged store)
                continue
            values[i], lows[i], highs[i], samples[i] = (finite(row.value), finite(row.low), finite(row.high),
                                                        row.samples)
        if all(v is None for v in values):
            warnings.append(f"{name}: unknown in every run shown (e.g. no target chip, or no allocator events)")
            continue
        points = [{"label": labels[i], "value": values[i], "low": lows[i], "high": highs[i]}
                  for i in range(len(runs)) if values[i] is not None]
        series.append(Series(name, str(rows["unit"].iloc[0]), points,
                             find_changes(values, labels, samples, confidence)))
    if len(runs) < 4:
        warnings.append(f"{len(runs)} run(s): change points need at least 4 (two on each side)")
    return HistoryReport([_run_record(r) for r in runs.itertuples(index=False)], series, warnings)
