"""One CI run as the history stores it: its identity, its metrics and its ops, from an analysis.

Built from the same Snapshot `diff` and `check` compare (regress/baseline.py), so a stored run is a
baseline too. Metrics (docs/history.md defines each; times in microseconds per step):

* ``step_time``: the median step time; ``low``/``high`` its quartiles over the run's steps, the steps
  kept as samples. Without steps: the device time of the capture, no spread.
* ``mfu``: model FLOPs utilization (null without a target chip or FLOPs).
* ``time_by_bound:<bound>``: device time per step by bound (compute, memory, communication, unknown,
  idle), the per-step values as samples.
* ``gain``: device time per step saved if every op ran at its roofline (sum of the ops' gain).
* ``device_time``: device time of the whole capture, over the devices.
* ``peak_memory:runtime`` / ``peak_memory:static``: the largest runtime peak of a device allocator and
  the largest static peak of an HLO module (bytes); each one also as ``peak_memory:<runtime|static>:<name>``.
* ``scope:<path>``: per-scope time per step, from :func:`scope_metrics` (the scopes view's hook).

Ops (``traceview_ops``) keep the MAX_OPS with the most time, with their per-step self times; the
report's ``op:<module>/<op>`` series come from them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np
import pandas as pd

from traceview.errors import UserError
from traceview.regress.baseline import OP_COLUMNS, Snapshot, snapshot_from_analysis
from traceview.units import PS_PER_US, finite
from traceview.vocabulary import BOUNDS_AND_IDLE

MAX_OPS = 500            # ops kept per run, by time
MAX_META = 50            # key=value pairs per run
MAX_META_TEXT = 500      # characters of a key or value
_LABEL = re.compile(r"[^\x00-\x1f\x7f]{1,200}")


@dataclass
class Metric:
    """One metric of one run: value (None: unknown), unit ("us", "fraction", "bytes"), its spread over the
    run's steps (``low``, ``high``: quartiles) and the per-step values (``samples``), when it has them."""

    value: float | None
    unit: str
    low: float | None = None
    high: float | None = None
    samples: list[float] | None = None


@dataclass
class RunRecord:
    """A run to store: identity, metrics by name, and its ops (OP_COLUMNS + ``step_times_ps``)."""

    label: str
    time: datetime
    meta: dict[str, str]
    trace_path: str | None
    target: str | None
    steps: int
    metrics: dict[str, Metric]
    ops: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=[*OP_COLUMNS, "step_times_ps"]))


# ------------------------------------------------------------------ identity

def check_label(label: str, what: str = "--label") -> str:
    """A run label: 1 to 200 characters, no control characters; ``what`` names it (``check --record``)."""
    if not isinstance(label, str) or not _LABEL.fullmatch(label) or not label.strip() or not _storable(label):
        raise UserError(f"{what} {label!r}: give 1 to 200 printable characters (e.g. a commit hash)")
    return label


def _storable(value: str) -> bool:
    """Whether text can be stored (UTF-8): a command line's undecodable bytes arrive as lone surrogates."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_time(text: str | None) -> datetime:
    """ISO 8601 (a date, or a date and time; without a zone: UTC) -> an aware UTC datetime; None: now."""
    if text is None:
        return datetime.now(timezone.utc)
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"--time {text!r}: not an ISO 8601 time (e.g. 2026-11-26T08:00:00Z)") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def iso(value: datetime) -> str:
    """The stored form of a time: ISO 8601 in UTC with microseconds, so text order is time order."""
    return value.astimezone(timezone.utc).isoformat(timespec="microseconds")


def parse_meta(pairs: list[str] | None) -> dict[str, str]:
    """``["commit=abc", "branch=main"]`` -> a dict; UserError for a pair without ``=`` or too long."""
    meta: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--meta {pair!r}: write key=value (e.g. commit=abc123)")
        if not _storable(pair):
            raise UserError(f"--meta {pair!r}: text that is not UTF-8")
        if len(key) > MAX_META_TEXT or len(value) > MAX_META_TEXT:
            raise UserError(f"--meta {key[:40]!r}...: keys and values are at most {MAX_META_TEXT} characters")
        meta[key.strip()] = value
    if len(meta) > MAX_META:
        raise UserError(f"--meta: at most {MAX_META} key=value pairs")
    return meta


# ------------------------------------------------------------------ metrics

def _us(values) -> list[float]:
    return [float(v) / PS_PER_US for v in values]


def _spread(samples: list[float]) -> tuple[float | None, float | None, float | None]:
    """Median and quartiles of per-step values."""
    if not samples:
        return None, None, None
    q1, median, q3 = np.percentile(np.asarray(samples, dtype="float64"), [25, 50, 75])
    return float(median), float(q1), float(q3)


def _sampled(samples: list[float], unit: str = "us") -> Metric:
    median, low, high = _spread(samples)
    return Metric(median, unit, low, high, samples)


def _memory_metrics(memory: dict[str, int]) -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    for kind in ("runtime", "static"):
        peaks = {key: float(v) for key, v in memory.items() if key.startswith(f"{kind}:")}
        out[f"peak_memory:{kind}"] = Metric(max(peaks.values()) if peaks else None, "bytes")
        out.update({f"peak_memory:{key}": Metric(v, "bytes") for key, v in peaks.items()})
    return out


def _gain_per_step_us(pipeline, steps: int) -> float | None:
    ops = pipeline.ops
    if pipeline.judged is None or "gain_ps" not in ops.columns or not ops["gain_ps"].notna().any():
        return None
    return float(np.nansum(ops["gain_ps"].to_numpy(dtype="float64"))) / PS_PER_US / max(steps, 1)


# Scope series kept per run: nodes down to this depth (program, then scopes), the ones with the most time.
MAX_SCOPE_DEPTH = 4
MAX_SCOPES = 50


def scope_metrics(pipeline, n_steps: int) -> dict[str, Metric]:
    """One ``scope:<path>`` metric per named-scope node (traceview.scopes) down to MAX_SCOPE_DEPTH, the
    MAX_SCOPES with the most time: its ops' self time per step in microseconds, with the per-step values
    (median and quartiles) when the ops carry per-step times."""
    from traceview.scopes.tree import build_scopes

    tree = build_scopes(pipeline, "scope")
    nodes = tree.nodes[tree.nodes["depth"] <= MAX_SCOPE_DEPTH].nlargest(MAX_SCOPES, "total_us")
    per_step = _op_step_matrix(pipeline.ops)
    metrics: dict[str, Metric] = {}
    for path, total_us in zip(nodes["path"], nodes["total_us"]):
        name = "scope:" + "/".join(path)
        if per_step is not None:
            metrics[name] = _sampled(_us(per_step[tree.under(tuple(path))].sum(axis=0)))
        else:
            metrics[name] = Metric(float(total_us) / max(n_steps, 1), "us")
    return metrics


def _op_step_matrix(ops: pd.DataFrame) -> np.ndarray | None:
    """Ops x steps self times (ps) from the op table's ``step_times_ps`` lists; None unless every op has
    one and they are all the same length (ops outside every step have none)."""
    if "step_times_ps" not in ops.columns or ops.empty:
        return None
    lists = list(ops["step_times_ps"])
    widths = {len(v) for v in lists if isinstance(v, list)}
    if len(widths) != 1 or not all(isinstance(v, list) for v in lists):
        return None
    width = widths.pop()
    return np.array(lists, dtype="float64").reshape(len(lists), width) if width else None


def run_metrics(pipeline, snapshot: Snapshot) -> dict[str, Metric]:
    """Every metric of a run (see the module docstring) from its PipelineResult and Snapshot."""
    steps = snapshot.step_times_ps
    n_steps = snapshot.n_steps
    metrics: dict[str, Metric] = {}
    device_us = None if snapshot.device_time_ps is None else snapshot.device_time_ps / PS_PER_US
    metrics["step_time"] = _sampled(_us(steps)) if len(steps) else Metric(device_us, "us")
    metrics["mfu"] = Metric(finite(snapshot.mfu), "fraction")
    per_step = pipeline.steps
    for bound in BOUNDS_AND_IDLE:
        column = f"{bound}_ps"
        if not per_step.empty and column in per_step.columns:
            metrics[f"time_by_bound:{bound}"] = _sampled(_us(per_step[column].fillna(0.0)))
        elif snapshot.time_by_bound_ps is not None:
            metrics[f"time_by_bound:{bound}"] = Metric(
                float(snapshot.time_by_bound_ps.get(bound) or 0.0) / PS_PER_US / n_steps, "us")
    metrics["gain"] = Metric(_gain_per_step_us(pipeline, n_steps), "us")
    metrics["device_time"] = Metric(device_us, "us")
    metrics.update(_memory_metrics(snapshot.memory))
    metrics.update(scope_metrics(pipeline, n_steps))
    return metrics


def run_ops(snapshot: Snapshot, limit: int = MAX_OPS) -> pd.DataFrame:
    """The `limit` ops with the most time, with their per-step self times (JSON-ready lists, ps)."""
    ops = snapshot.ops.sort_values("time_ps", ascending=False, kind="stable").head(limit).reset_index(drop=True)
    steps = max(len(snapshot.step_times_ps), 0)
    per_step: dict[tuple[str, str], list[float]] = {}
    if snapshot.op_steps is not None and steps:
        wanted = set(zip(ops["module"], ops["op"]))
        frame = snapshot.op_steps
        frame = frame[[key in wanted for key in zip(frame["module"], frame["op"])]]
        order = {s: i for i, s in enumerate(sorted(frame["step"].unique()))}
        for (module, op), group in frame.groupby(["module", "op"], sort=False):
            row = [0.0] * len(order)
            for step, t in zip(group["step"], group["time_ps"]):
                row[order[step]] += float(t)
            per_step[(module, op)] = row
    ops["step_times_ps"] = [per_step.get(key) for key in zip(ops["module"], ops["op"])]
    return ops


def run_from_analysis(pipeline, label: str, time: datetime | None = None, meta: dict[str, str] | None = None,
                      trace_path: str | None = None) -> RunRecord:
    """A run to record from a PipelineResult (``Analysis.pipeline``)."""
    snapshot = snapshot_from_analysis(pipeline, label=label)
    return RunRecord(label=check_label(label), time=time or datetime.now(timezone.utc), meta=dict(meta or {}),
                     trace_path=trace_path, target=snapshot.target, steps=len(snapshot.step_times_ps),
                     metrics=run_metrics(pipeline, snapshot), ops=run_ops(snapshot))
