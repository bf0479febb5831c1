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
