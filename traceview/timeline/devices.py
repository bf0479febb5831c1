"""Where each device's time went: busy (some op running), idle, and the span they add up to.

Per device with events: ``span`` is its first op start to its last op end,
``busy`` the length of the union of its op intervals (ops that overlap, on
several streams or threads, or nested in a while loop, count once), and
``idle = span - busy``. So for every device busy + idle = span exactly, and
summed over the active devices busy + idle = span x active devices when
``span`` is their mean. Devices the trace lists without a single op are
reported apart, never as idle time.

XProf's overview reports idle as span minus the sum of op self times; where
ops overlap (async copies, several streams) that sum counts overlapped time
twice and its idle share is lower than this one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.timeline.grouping import device_codes, device_rows, exact_sums
from traceview.timeline.intervals import tagged_union, union

DEVICE_COLUMNS = ["device", "busy_ps", "idle_ps", "span_ps", "start_ps", "end_ps", "op_time_ps"]


def device_time(raw: pd.DataFrame) -> pd.DataFrame:
    """One row per device with events: busy, idle and span (ps), its first start and last end,
    and ``op_time_ps`` (the sum of its ops' self times, which overlaps can push above busy)."""
    if raw.empty:
        return pd.DataFrame(columns=DEVICE_COLUMNS)
    by_device = device_rows(raw)
    starts = by_device.take(raw["start_ps"].to_numpy(dtype=np.int64))
    ends = starts + by_device.take(raw["duration_ps"].to_numpy(dtype=np.int64))
    self_ps = by_device.take(raw["self_ps"].to_numpy(dtype=np.int64))
    rows = []
    for name, (lo, hi) in zip(by_device.names, by_device.spans()):
        u_starts, u_ends = union(starts[lo:hi], ends[lo:hi])
        busy = int((u_ends - u_starts).sum())
        first, last = int(starts[lo:hi].min()), int(ends[lo:hi].max())
        rows.append((name, busy, last - first - busy, last - first, first, last, int(self_ps[lo:hi].sum())))
    return pd.DataFrame(rows, columns=DEVICE_COLUMNS)


def inactive_devices(all_devices: list[str], table: pd.DataFrame) -> list[str]:
    """Devices the trace lists that ran no op (reported apart, not counted as idle)."""
    active = set(table["device"]) if not table.empty else set()
    return [d for d in all_devices if d not in active]


def busy_by_label(starts: np.ndarray, ends: np.ndarray, labels: np.ndarray, n_labels: int) -> np.ndarray:
    """Busy time of one device split by label, so the parts add up to the union of all intervals.

    Labels are ranked by their index: where intervals of several labels overlap, the time goes to the
    lowest index (with labels in BOUNDS order, a collective hidden behind a matmul counts as compute,
    and only its exposed part as communication). Label -1 (none) ranks last.
    """
    return _shifted_busy_by_label(starts, ends, labels, None, np.zeros(1, dtype=np.int64), n_labels)[0]


def device_busy_by_label(raw: pd.DataFrame, labels: np.ndarray, n_labels: int) -> dict[str, np.ndarray]:
    """Per device with events: :func:`busy_by_label` over all its ops (the parts sum to its busy time)."""
    if raw.empty:
        return {}
    by_device = device_rows(raw)
    starts = by_device.take(raw["start_ps"].to_numpy(dtype=np.int64))
    ends = starts + by_device.take(raw["duration_ps"].to_numpy(dtype=np.int64))
    labels = by_device.take(labels)
    return {name: busy_by_label(starts[lo:hi], ends[lo:hi], labels[lo:hi], n_labels)
            for name, (lo, hi) in zip(by_device.names, by_device.spans())}


_OFFSET_LIMIT = 2.0 ** 61   # keeps shifted times inside int64


def _shifted_busy_by_label(starts: np.ndarray, ends: np.ndarray, labels: np.ndarray, groups: np.ndarray | None,
                           width: np.ndarray, n_labels: int) -> np.ndarray:
    """:func:`busy_by_label` for groups 0..len(width)-1 at once: each group is shifted into its own
    stretch of the time axis (offset = the widths of the groups before it), so one vectorized union
    serves them all (no interval reaches into the next stretch); union lengths are summed per group.
    ``groups`` None: all rows are one group, left where they are.

    Label by label, the cover so far is united with that label's intervals (each interval takes part
    in one union); what the cover grows by in a group is that label's time there.
    """
    n_groups = len(width)
    offset = np.concatenate(([0], np.cumsum(width + 1)[:-1])).astype(np.int64)
    if groups is not None:
        shift = offset[groups]
        starts, ends = starts + shift, ends + shift
    ranked = labels.astype(np.int8 if n_labels < 127 else np.int64)
    ranked[ranked < 0] = n_labels
    counts = np.bincount(ranked, minlength=n_labels + 1)
    out = np.zeros((n_groups, n_labels + 1), dtype=np.float64)
    covered = np.zeros(n_groups, dtype=np.int64)
    u_starts = u_ends = np.empty(0, dtype=np.int64)
    u_groups = None if groups is None else np.empty(0, dtype=groups.dtype)
    present = np.flatnonzero(counts)
    for k in present:
        if k == present[-1]:
            # the cover grown by the last label is the union of all rows: taken whole, in table order
            # (mostly time order already), with no cover to sort in
            u_starts, u_ends, u_groups = tagged_union(starts, ends, groups)
        else:
            rows = ranked == k                                  # the label's rows, in table order
            new_starts, new_ends = np.concatenate((u_starts, starts[rows])), np.concatenate((u_ends, ends[rows]))
            new_groups = None if groups is None or u_groups is None else np.concatenate((u_groups, groups[rows]))
            u_starts, u_ends, u_groups = tagged_union(new_starts, new_ends, new_groups)
        if u_groups is not None:
            length = exact_sums(u_groups, u_ends - u_starts, n_groups)     # a device's busy time can pass 2^53 ps
        else:
            length = np.array([int((u_ends - u_starts).sum())], dtype=np.int64)
        out[:, k] = length - covered
        covered = length
    out[:, n_labels - 1] += out[:, n_labels]      # unlabelled time joins the last label ("unknown")
    return out[:, :n_labels]


def _grouped_busy_by_label(starts: np.ndarray, ends: np.ndarray, labels: np.ndarray, groups: np.ndarray,
                           n_groups: int, n_labels: int) -> np.ndarray:
    """:func:`busy_by_label` per group (times >= 0 within each group): an (n_groups, n_labels) array.

    Groups are taken in chunks whose summed widths stay below 2^61, so the shifted times of
    :func:`_shifted_busy_by_label` never overflow, whatever the steps' lengths.
    """
    if not (groups[1:] >= groups[:-1]).all():
        order = np.argsort(groups, kind="stable")
        groups, starts, ends, labels = groups[order], starts[order], ends[order], labels[order]
    width = np.zeros(n_groups, dtype=np.int64)
    if groups.size:
        present = np.flatnonzero(groups[1:] != groups[:-1]) + 1
        present = np.concatenate(([0], present))                 # each group's first row
        width[groups[present]] = np.maximum.reduceat(ends, present)
    cum = np.cumsum(width.astype(np.float64) + 1.0)
    out = np.zeros((n_groups, n_labels), dtype=np.float64)
    first = 0
    while first < n_groups:
        base = cum[first - 1] if first else 0.0
        last = min(n_groups, max(first + 1, int(np.searchsorted(cum, base + _OFFSET_LIMIT, side="right"))))
        lo, hi = np.searchsorted(groups, [first, last], side="left")
        out[first:last] = _shifted_busy_by_label(starts[lo:hi], ends[lo:hi], labels[lo:hi], groups[lo:hi] - first,
                                                 width[first:last], n_labels)
        first = last
    return out


def step_busy_by_label(raw: pd.DataFrame, labels: np.ndarray, n_labels: int,
                       steps: pd.DataFrame) -> pd.DataFrame:
    """Per step: busy time by label per device (the mean over the devices with ops in the step), each
    device's ops clipped to the step's wall window, so the parts never exceed the step's time.

    Columns: step, active_devices, and one column per label index (0..n_labels-1), in ps.
    Vectorized over all (step, device) groups: O(n log n) per label, no Python loop per group.
    """
    parts = [] if steps.empty else [step_busy_part(raw, labels, n_labels, steps)]
    return step_busy_table(parts, n_labels, steps)


def step_busy_table(parts: list, n_labels: int, steps: pd.DataFrame) -> pd.DataFrame:
    """The per-step table from the chunks' parts (:func:`step_busy_part`)."""
    columns = ["step", "active_devices", *range(n_labels)]
    if steps.empty:
        return pd.DataFrame(columns=columns)
    step_ids = steps["step"].to_numpy(dtype=np.int64)
    counts = np.zeros(len(step_ids), dtype=np.int64)
    sums = np.zeros((len(step_ids), n_labels), dtype=np.float64)
    for part in parts:
        if part is not None:
            counts += part[0]
            sums += part[1]
    present = np.flatnonzero(counts)
    if not present.size:
        return pd.DataFrame(columns=columns)
    order = present[np.argsort(step_ids[present], kind="stable")]
    table: dict[str | int, np.ndarray] = {"step": step_ids[order], "active_devices": counts[order]}
    table.update({k: sums[order, k] / counts[order] for k in range(n_labels)})
    return pd.DataFrame(table, columns=columns)


def step_busy_part(raw: pd.DataFrame, labels: np.ndarray, n_labels: int,
                   steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """One table's devices with ops in each step, and its busy time by label per step summed over its devices
    (whole numbers of ps: the order they are added in keeps them); None: no row in a step. A run's chunks,
    each holding whole devices, add up (:func:`step_busy_table`)."""
    if raw.empty or "step" not in raw.columns:
        return None
    step_ids = steps["step"].to_numpy(dtype=np.int64)
    lo_of = steps["start_ps"].to_numpy(dtype=np.int64)
    hi_of = lo_of + steps["time_ps"].to_numpy(dtype=np.int64)
    where = _step_positions(raw["step"], step_ids)
    devices = device_codes(raw)[0]
    inside = (where >= 0) & (devices >= 0)
    if not inside.any():
        return None
    where, devices = where[inside], devices[inside].astype(np.int64)
    starts = raw["start_ps"].to_numpy(dtype=np.int64)[inside]
    ends = raw["duration_ps"].to_numpy(dtype=np.int64)[inside]
    ends += starts
    # each op clipped to its step's window, from the window's start (in place: millions of rows)
    for times in (starts, ends):
        lo = lo_of[where]
        np.clip(times, lo, hi_of[where], out=times)
        times -= lo
    # Groups numbered device-major, (device, step): rows come grouped by device and in time order,
    # so the sort by group is nearly free.
    n_steps = len(step_ids)
    groups, group_keys = _sorted_codes(devices * n_steps + where)
    n_groups = len(group_keys)
    parts = _grouped_busy_by_label(starts, ends, labels[inside], groups.astype(np.int64), n_groups, n_labels)
    step_of_group = group_keys % n_steps
    sums = np.zeros((n_steps, n_labels), dtype=np.float64)
    for k in range(n_labels):
        sums[:, k] = np.bincount(step_of_group, weights=parts[:, k], minlength=n_steps)
    return np.bincount(step_of_group, minlength=n_steps), sums


def _step_positions(step: pd.Series, step_ids: np.ndarray) -> np.ndarray:
    """Per row, the position of its step in ``step_ids`` (-1: outside every step, or not a number)."""
    if step.dtype.kind in "iu" and np.array_equal(step_ids, np.arange(len(step_ids))):
        values = step.to_numpy()                         # steps 0..n-1: the step is its own position
        return np.where((values >= 0) & (values < len(step_ids)), values, -1)
    step_of = pd.to_numeric(step, errors="coerce").to_numpy(dtype=np.float64)
    where = pd.Index(step_ids).get_indexer(np.where(np.isfinite(step_of), step_of, -1).astype(np.int64))
    where[~np.isfinite(step_of)] = -1
    return where


def _sorted_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(keys, sort=True)``, in one pass when the keys already ascend (rows grouped by
    device and in time order give ascending (device, step) keys)."""
    if keys.size and (keys[1:] >= keys[:-1]).all():
        new = np.empty(keys.size, dtype=bool)
        new[0] = True
        np.not_equal(keys[1:], keys[:-1], out=new[1:])
        return np.cumsum(new) - 1, keys[new]
    codes, uniques = pd.factorize(keys, sort=True)
    return codes.astype(np.int64), np.asarray(uniques)
