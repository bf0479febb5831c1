"""Per-op and per-step aggregates of a profile's op table.

Ops aggregate over devices by (program_id, module, op), as XProf's HLO op
stats do; ``per_device=True`` keeps the device as part of the key.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from traceview.timeline.grouping import column_codes, exact_sums, execution_counts, first_rows, group_ids
from traceview.timeline.step_parts import StepPart, merged_step_times, reduce_steps

OP_KEY = ["program_id", "module", "op"]


def op_stats(ops: pd.DataFrame, per_device: bool = False) -> pd.DataFrame:
    """One row per distinct op: occurrences, total and self time, devices.

    Columns: [device,] program_id, module, op, category, occurrences (executions),
    kernels (rows: what XProf counts as occurrences on a GPU), total_time_ps, self_time_ps, devices,
    trace_flops, trace_bytes.
    Sorted by self time, largest first.
    """
    return aggregate_ops(ops, per_device)[0]


def aggregate_ops(ops: pd.DataFrame, per_device: bool = False) -> tuple[pd.DataFrame, np.ndarray]:
    """:func:`op_stats`, and per raw row the row of that table it was counted in (-1: a key is missing).

    The row index lets every later per-execution step (labels, exposed time, per-step times) reach
    its op by integer indexing instead of joining millions of rows on string keys.
    """
    key = (["device"] if per_device else []) + OP_KEY
    if ops.empty:
        return pd.DataFrame(columns=key + ["category", "occurrences", "kernels", "total_time_ps", "self_time_ps",
                                           "devices", "trace_flops", "trace_bytes"]), np.zeros(0, dtype=np.int64)
    ids, n_groups = group_ids(ops, key)
    kept = ids >= 0
    counted = slice(None) if kept.all() else kept           # rows with a key (all of them: no copy)
    first = first_rows(ids, n_groups)
    stats = pd.DataFrame({name: _values_at(ops[name], first) for name in key})
    stats["category"] = _first_present(ops["category"], ids, first, kept)
    stats["occurrences"] = execution_counts(ids[counted], ops["executions"].to_numpy()[counted], n_groups)
    stats["kernels"] = np.bincount(ids[counted], minlength=n_groups).astype(np.int64)
    stats["total_time_ps"] = exact_sums(ids[counted], ops["duration_ps"].to_numpy()[counted], n_groups)
    stats["self_time_ps"] = exact_sums(ids[counted], ops["self_ps"].to_numpy()[counted], n_groups)
    stats["devices"] = _distinct_per_group(ids, column_codes(ops["device"])[0], n_groups)
    for column in ("trace_flops", "trace_bytes"):
        stats[column] = _reported_sums(ops[column], ids, kept, n_groups)
    for column in ("module", "op", "category") + (("device",) if per_device else ()):
        stats[column] = stats[column].astype(str)
    order = stats["self_time_ps"].sort_values(ascending=False, kind="stable").index.to_numpy()
    rank = np.empty(n_groups + 1, dtype=np.int64)
    rank[order] = np.arange(n_groups)
    rank[n_groups] = -1                     # id -1 (a missing key) stays -1
    return stats.iloc[order].reset_index(drop=True), rank[ids]


def _values_at(column: pd.Series, rows: np.ndarray) -> pd.Series:
    """``column``'s values at ``rows``, read through a categorical's codes (no conversion of the column)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return pd.Series(pd.Categorical.from_codes(column.cat.codes.to_numpy()[rows], dtype=column.dtype))
    return column.iloc[rows].reset_index(drop=True)


def _first_present(column: pd.Series, ids: np.ndarray, first: np.ndarray, kept: np.ndarray) -> pd.Series:
    """Per group, the first non-missing value of ``column`` (as ``groupby(...).first()``); ``first``:
    each group's first row."""
    if not column.hasnans:
        return _values_at(column, first)
    present = column[kept].groupby(ids[kept], sort=True).first()
    return present.reindex(range(len(first))).reset_index(drop=True)


def _reported_sums(column: pd.Series, ids: np.ndarray, kept: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, the sum of a figure the trace may not report (NaN): NaN where no row of the group
    reports it (a sum over all-NaN would be 0), so "the trace does not say" stays unknown."""
    values = column.to_numpy(dtype="float64", na_value=np.nan)
    reported = kept & ~np.isnan(values)
    if not reported.any():
        return np.full(n_groups, np.nan)
    sums = np.bincount(ids[reported], weights=values[reported], minlength=n_groups)
    return np.where(np.bincount(ids[reported], minlength=n_groups) > 0, sums, np.nan)


def _distinct_per_group(ids: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, how many distinct non-missing ``codes`` its rows carry."""
    width = max(int(codes.max()) + 1, 1) if codes.size else 1
    if width == 1 and codes.size and codes.min() >= 0:       # one value throughout (one device)
        return (np.bincount(ids[ids >= 0], minlength=n_groups) > 0).astype(np.int64)
    valid = (ids >= 0) & (codes >= 0)
    pairs = ids[valid] * width + codes[valid]
    if n_groups * width <= max(len(ids), 1 << 20):      # a table of (group, code) seen fits: count it
        return (np.bincount(pairs, minlength=n_groups * width).reshape(n_groups, width) > 0).sum(axis=1)
    return np.bincount(pd.unique(pairs) // width, minlength=n_groups).astype(np.int64)


def run_step_times(table: pd.DataFrame, parts: Sequence[StepPart | None]) -> pd.DataFrame:
    """A run's step times: from its hosts' reduced step tables (``timeline.step_parts``, made where each host
    was read) where every host has one, else from the step ``table`` (which a reader that reduced every host
    may have left empty)."""
    if parts and all(p is not None for p in parts):
        return merged_step_times([p for p in parts if p is not None])
    return step_times(table)


def step_times(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step: wall time across devices (first start to last end) and per-device mean.

    Columns: step, start_ps, time_ps, device_mean_ps, devices.
    """
    if steps.empty:
        return pd.DataFrame(columns=["step", "start_ps", "time_ps", "device_mean_ps", "devices"])
    part = reduce_steps(steps)          # integer steps and times: exact sums
    if part is not None:
        return merged_step_times([part])
    ends = steps["start_ps"] + steps["duration_ps"]
    frame = steps.assign(end_ps=ends)
    grouped = frame.groupby("step", sort=True)
    out = pd.DataFrame({
        "start_ps": grouped["start_ps"].min(),
        "time_ps": grouped["end_ps"].max() - grouped["start_ps"].min(),
        "device_mean_ps": grouped["duration_ps"].mean(),
        "devices": grouped["device"].nunique(),
    }).reset_index()
    return out


