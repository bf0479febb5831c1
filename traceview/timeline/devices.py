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

from traceview.timeline.intervals import union

DEVICE_COLUMNS = ["device", "busy_ps", "idle_ps", "span_ps", "start_ps", "end_ps", "op_time_ps"]


def device_time(raw: pd.DataFrame) -> pd.DataFrame:
    """One row per device with events: busy, idle and span (ps), its first start and last end,
    and ``op_time_ps`` (the sum of its ops' self times, which overlaps can push above busy)."""
    if raw.empty:
        return pd.DataFrame(columns=DEVICE_COLUMNS)
    starts = raw["start_ps"].to_numpy(dtype=np.int64)
    ends = starts + raw["duration_ps"].to_numpy(dtype=np.int64)
    self_ps = raw["self_ps"].to_numpy(dtype=np.int64)
    codes, names = pd.factorize(raw["device"].astype(str), sort=True)
    rows = []
    for code, name in enumerate(names):
        on = codes == code
        u_starts, u_ends = union(starts[on], ends[on])
        busy = int((u_ends - u_starts).sum())
        first, last = int(starts[on].min()), int(ends[on].max())
        rows.append((str(name), busy, last - first - busy, last - first, first, last, int(self_ps[on].sum())))
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
    out = np.zeros(n_labels + 1, dtype=np.float64)
    ranked = np.where(labels < 0, n_labels, labels)
    cov_s = np.empty(0, dtype=np.int64)
    cov_e = np.empty(0, dtype=np.int64)
    covered = 0
    for k in range(n_labels + 1):
        sel = ranked == k
        if not sel.any():
            continue
        cov_s, cov_e = union(np.concatenate((cov_s, starts[sel])), np.concatenate((cov_e, ends[sel])))
        length = int((cov_e - cov_s).sum())
        out[k] = length - covered
        covered = length
    out[n_labels - 1] += out[n_labels]      # unlabelled time joins the last label ("unknown")
    return out[:n_labels]


def device_busy_by_label(raw: pd.DataFrame, labels: np.ndarray, n_labels: int) -> dict[str, np.ndarray]:
    """Per device with events: :func:`busy_by_label` over all its ops (the parts sum to its busy time)."""
    if raw.empty:
        return {}
    starts = raw["start_ps"].to_numpy(dtype=np.int64)
    ends = starts + raw["duration_ps"].to_numpy(dtype=np.int64)
    codes, names = pd.factorize(raw["device"].astype(str), sort=True)
    return {str(name): busy_by_label(starts[codes == c], ends[codes == c], labels[codes == c], n_labels)
            for c, name in enumerate(names)}


def step_busy_by_label(raw: pd.DataFrame, labels: np.ndarray, n_labels: int,
                       steps: pd.DataFrame) -> pd.DataFrame:
    """Per step: busy time by label per device (the mean over the devices with ops in the step), each
    device's ops clipped to the step's wall window, so the parts never exceed the step's time.

    Columns: step, active_devices, and one column per label index (0..n_labels-1), in ps.
    """
    columns = ["step", "active_devices", *range(n_labels)]
    if raw.empty or steps.empty or "step" not in raw.columns:
        return pd.DataFrame(columns=columns)
    starts = raw["start_ps"].to_numpy(dtype=np.int64)
    ends = starts + raw["duration_ps"].to_numpy(dtype=np.int64)
    step_of = raw["step"].to_numpy()
    devices = pd.factorize(raw["device"].astype(str))[0]
    windows = {int(s): (int(a), int(a + t)) for s, a, t in zip(steps["step"], steps["start_ps"], steps["time_ps"])}
    order = np.lexsort((devices, step_of))
    keys = np.stack((step_of[order], devices[order]), axis=1)
    cuts = np.flatnonzero(np.any(keys[1:] != keys[:-1], axis=1)) + 1
    sums: dict[int, np.ndarray] = {}
    counts: dict[int, int] = {}
    for group in np.split(order, cuts):
        if group.size == 0:
            continue
        step = int(step_of[group[0]])
        if step not in windows:
            continue
        lo, hi = windows[step]
        parts = busy_by_label(np.clip(starts[group], lo, hi), np.clip(ends[group], lo, hi), labels[group], n_labels)
        sums[step] = sums.get(step, 0) + parts
        counts[step] = counts.get(step, 0) + 1
    rows = [[step, counts[step], *(sums[step] / counts[step])] for step in sorted(sums)]
    return pd.DataFrame(rows, columns=columns)
