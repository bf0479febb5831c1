"""Steps of one host: from a ``Steps`` line, else host step annotations, else executions of the main
module; and the step of each op row."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.parsers.profile import STEP_COLUMNS, as_declared


def step_rows_of(ops: pd.DataFrame, step_rows: list[dict[str, np.ndarray]], annotations,
                 module_execs: dict[str, tuple], run_ids: np.ndarray | None) -> list[dict[str, np.ndarray]]:
    """The step rows (blocks of :func:`step_block`) of a host: its ``Steps`` lines' (``step_rows``), else
    its step annotations ((start, end, step) arrays sorted by start, or None) on every device, else
    :func:`module_steps`; empty blocks left out."""
    rows = list(step_rows)
    if not rows and annotations is not None and not ops.empty:
        a_start, a_end, a_step = annotations
        rows = [step_block(dev, a_step, a_start, a_end - a_start, "host_annotation")
                for dev in ops["device"].cat.categories]
    if not rows and not ops.empty:
        rows = module_steps(ops, module_execs, run_ids)
    return [r for r in rows if r["step"].size]


def steps_table(rows: list[dict[str, np.ndarray]]) -> pd.DataFrame:
    """The steps table of step rows (at least one block), by device and start."""
    steps = pd.DataFrame({name: np.concatenate([r[name] for r in rows]) for name in rows[0]})
    steps = steps.sort_values(["device", "start_ps"], kind="stable").reset_index(drop=True)
    return as_declared(steps, STEP_COLUMNS)


def module_steps(ops: pd.DataFrame, module_execs: dict[str, tuple],
                 run_ids: np.ndarray | None) -> list[dict[str, np.ndarray]]:
    """Each execution of the module with the most device time is a step: its module executions (per device:
    start, end, names, program ids), else its run ids (one per op row, 0: none)."""
    if not module_execs and run_ids is None:
        return []  # no module executions and no run ids: nothing to cut steps from (no pass over the rows)
    timed = ops[ops["module"] != ""]
    if timed.empty:
        return []
    main = timed.groupby("module", observed=True)["duration_ps"].sum().idxmax()
    rows: list[dict[str, np.ndarray]] = []
    for dev, (m_start, m_end, m_names, _pids) in module_execs.items():
        sel = np.flatnonzero(np.asarray(m_names, dtype=object) == main)
        if sel.size:
            rows.append(step_block(dev, np.arange(sel.size), m_start[sel], m_end[sel] - m_start[sel], "module"))
    if rows:
        return rows
    # No module execution events (GPU, CPU): an execution is a run_id, else nothing.
    if run_ids is None:
        return []
    mask = (ops["module"] == main).to_numpy() & (run_ids != 0)
    if not mask.any():
        return []
    sub = pd.DataFrame({"device": ops["device"].to_numpy()[mask], "run": run_ids[mask],
                        "start": ops["start_ps"].to_numpy()[mask],
                        "end": (ops["start_ps"] + ops["duration_ps"]).to_numpy()[mask]})
    runs = sub.groupby(["device", "run"], observed=True).agg(start=("start", "min"), end=("end", "max"))
    runs = runs.reset_index().sort_values(["device", "start"])
    runs["step"] = runs.groupby("device", observed=True).cumcount()
    start = runs["start"].to_numpy(dtype=np.int64)
    return [{"device": np.asarray(runs["device"], dtype=object), "step": runs["step"].to_numpy(dtype=np.int64),
             "start_ps": start, "duration_ps": runs["end"].to_numpy(dtype=np.int64) - start,
             "source": np.full(len(runs), "module", dtype=object)}]


def step_block(device: str, step: np.ndarray, start: np.ndarray, duration: np.ndarray,
                source: str) -> dict[str, np.ndarray]:
    """Step rows of one device, as the columns of the steps table (before its dtypes)."""
    n = len(step)
    return {"device": np.full(n, device, dtype=object), "step": np.asarray(step, dtype=np.int64),
            "start_ps": np.asarray(start, dtype=np.int64), "duration_ps": np.asarray(duration, dtype=np.int64),
            "source": np.full(n, source, dtype=object)}


def step_of(ops: pd.DataFrame, steps: pd.DataFrame, windows_to_next: bool) -> np.ndarray:
    """Step number of each op by its start time, per device.

    With host annotations a device op may run after its step's annotation
    ended (asynchronous dispatch), so a step's window then reaches to the
    next step's start.
    """
    out = np.full(len(ops), -1, dtype=np.int32)
    codes = ops["device"].cat.codes.to_numpy()
    categories = list(ops["device"].cat.categories)
    start = ops["start_ps"].to_numpy()
    for dev, s in steps.groupby("device", observed=True):
        if dev not in categories:
            continue
        sel = np.flatnonzero(codes == categories.index(dev))
        s_start = s["start_ps"].to_numpy()
        s_end = s_start + s["duration_ps"].to_numpy()
        if windows_to_next:
            s_end = np.append(s_start[1:], np.iinfo(np.int64).max)
        k = np.searchsorted(s_start, start[sel], side="right") - 1
        inside = (k >= 0) & (start[sel] < s_end[np.maximum(k, 0)])
        out[sel[inside]] = s["step"].to_numpy()[k[inside]]
    return out
