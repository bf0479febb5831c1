"""Each call of an HLO module on a device, from the op table: when it started and how long it ran.

A trace records ops, not always the module calls around them (CPU and GPU traces have no "XLA Modules"
line). A call runs every op of its entry computation once, so on each device the number of calls is the
occurrence count most of the module's ops share, and call ``k`` starts at the earliest ``k``-th occurrence
of those ops (ops run on several threads at once, so no one op is always first). Every op row belongs to
the last call started before it. A call's time is its span: its first op's start to its last op's end.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.timeline.occurrences import run_bounds
from traceview.units import PS_PER_US

COLUMNS = ["module", "program_id", "device", "call", "start_us", "time_us"]


def module_calls(ops: pd.DataFrame, entry_ops: dict[str, set[str]] | None = None) -> pd.DataFrame:
    """One row per call of a module on a device (``COLUMNS``), ordered by module, device, start.

    ``ops``: the profile's op table (module, program_id, device, op, start_ps, duration_ps). ``entry_ops``:
    per module, the instructions of its entry computation; the calls are then counted on those alone (the
    ops of a loop body run once per iteration, not once per call).
    """
    if ops.empty:
        return pd.DataFrame(columns=COLUMNS)
    frame = ops.loc[ops["module"].astype(str) != "", ["module", "program_id", "device", "op", "start_ps",
                                                       "duration_ps"]]
    parts = []
    for (module, program, device), rows in frame.groupby(["module", "program_id", "device"], observed=True,
                                                         sort=True):
        entry = (entry_ops or {}).get(str(module))
        parts.append(_calls_on_device(str(module), int(program), str(device), rows, entry))
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(parts, ignore_index=True)


def loop_iterations(ops: pd.DataFrame, module: str, program: int | None, body_ops: set[str]) -> pd.DataFrame:
    """One row per iteration of a loop on a device (``COLUMNS``, ``call`` counting iterations), found as calls
    are: the ops of the loop's body run once per iteration."""
    if ops.empty or not body_ops:
        return pd.DataFrame(columns=COLUMNS)
    mine = ops[(ops["module"].astype(str) == module) & ops["op"].astype(str).isin(body_ops)]
    if program is not None and (mine["program_id"] == program).any():
        mine = mine[mine["program_id"] == program]
    parts = [_calls_on_device(module, int(pid), str(device), rows)
             for (pid, device), rows in mine.groupby(["program_id", "device"], observed=True, sort=True)]
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)


def _calls_on_device(module: str, program: int, device: str, rows: pd.DataFrame,
                     entry: set[str] | None = None) -> pd.DataFrame:
    rows = rows.sort_values("start_ps", kind="stable")
    names = rows["op"].astype(str).to_numpy()
    start = rows["start_ps"].to_numpy(dtype=np.int64)
    end = start + rows["duration_ps"].to_numpy(dtype=np.int64)
    counted = np.isin(names, list(entry)) if entry else None
    if counted is not None and not counted.any():
        counted = None
    call_start, call_end = run_bounds(names, start, end, counted)
    return pd.DataFrame({"module": module, "program_id": program, "device": device,
                         "call": np.arange(len(call_start)), "start_us": call_start / PS_PER_US,
                         "time_us": (call_end - call_start) / PS_PER_US})
