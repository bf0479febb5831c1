"""Repeated runs of a group of ops, found from their occurrences: a program's calls, a loop's iterations.

A trace records ops, not always the calls or iterations around them. When every op of a group runs once per
run, the number of runs is the occurrence count most of its ops share, and run ``k`` starts at the earliest
``k``-th occurrence of those ops (ops run on several threads at once, so no one op is always first). Every op
row belongs to the last run started before it; a run ends with the last end of its rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def run_bounds(names: np.ndarray, start: np.ndarray, end: np.ndarray,
               counted: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(run starts, run ends), both int64 and sorted by start, of ops ``names`` with ``start``/``end`` (ps),
    the rows sorted by start. ``counted``: the rows whose ops may set the count (default: all)."""
    pick = np.ones(len(names), dtype=bool) if counted is None else counted
    counts = pd.Series(names[pick]).value_counts()
    runs = int(counts.mode().max())           # the occurrence count most ops share (ties: the larger)
    once = np.isin(names, list(counts.index[counts == runs])) & pick     # ops that run once per run
    rank = pd.Series(names[once]).groupby(names[once]).cumcount().to_numpy()   # which occurrence
    bounds = np.full(runs, np.iinfo(np.int64).max)
    np.minimum.at(bounds, rank, start[once])
    bounds = np.sort(bounds)
    which = np.searchsorted(bounds, start, side="right") - 1     # the run each op row falls in
    keep = which >= 0                                            # ops before the first marker: no run
    ends = np.full(len(bounds), np.iinfo(np.int64).min)
    np.maximum.at(ends, which[keep], end[keep])
    return bounds, ends
