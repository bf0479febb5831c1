"""A run's step times, combined as its hosts arrive: each host's reduced step table folded into one running
reduction (``timeline.step_parts.StepFold``) when it comes in, so a pod's parts need not hold theirs until
the last host is read."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from traceview.hostreduce.part import HostPart
from traceview.timeline.aggregate import run_step_times
from traceview.timeline.step_parts import StepFold


def folded(parts: Sequence[HostPart]) -> StepFold:
    """The parts' reduced step tables folded (those they hold)."""
    fold = StepFold()
    for part in parts:
        fold_in(fold, part)
    return fold


def fold_in(fold: StepFold, part: HostPart) -> None:
    """One host's reduced step table folded in (none where its step table could not be reduced)."""
    if part.ops.activity.step_times is not None:
        fold.add(part.ops.activity.step_times)


def step_times_of(parts: Sequence[HostPart], table: pd.DataFrame, fold: StepFold) -> pd.DataFrame:
    """The run's step times: ``fold``, the hosts' reduced step tables folded as they arrived, where every
    host's was reduced and no device is in two hosts' tables; else from the parts' reduced tables together
    (their (step, device) pairs) or the step rows no part reduced (``table``)."""
    reduced = [p.ops.activity.step_times for p in parts]
    if parts and fold.disjoint and all(r is not None for r in reduced):
        return fold.table()
    return run_step_times(table, reduced)
