"""A host's step table (one row per step and device) reduced where the host is read, and the run's step
times merged from those reductions.

``timeline.aggregate.step_times`` needs, per step, the first start, the last end, the summed durations and
row count (their mean) and the distinct devices. All of it adds up across hosts exactly (integer sums,
minima, maxima, sets of (step, device) pairs), so a reading worker reduces its host's step table and the
parent merges a few numbers per step and host, instead of joining every host's table (a row per step and
device: 2.4 M rows for 256 hosts of 2 300 steps) after the last host arrived. The run's step times equal
``step_times`` of the joined table (tests/unit/test_timeline_step_parts.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceview.timeline.grouping import column_codes

STEP_TIME_COLUMNS = ["step", "start_ps", "time_ps", "device_mean_ps", "devices"]


@dataclass
class StepPart:
    """One step table reduced: per distinct step (ascending) the first start, last end, summed duration,
    rows and distinct devices; its distinct (step, device) pairs (``pair_step``: a position in ``step``,
    ``pair_device``: a code into ``devices``; counted again only where two tables name one device); the
    largest duration (the exact mean's bound)."""

    step: np.ndarray
    first: np.ndarray
    last: np.ndarray
    total: np.ndarray
    count: np.ndarray
    pair_step: np.ndarray
    pair_device: np.ndarray
    devices: list[str]
    max_duration: int
    distinct: np.ndarray            # per step, its distinct devices


def reduce_steps(steps: pd.DataFrame) -> StepPart | None:
    """A step table (``parsers.profile.STEP_COLUMNS``) reduced; None where its steps or times are not integers
    (``step_times`` then reads the table itself)."""
    step, start, duration = (steps[c].to_numpy() for c in ("step", "start_ps", "duration_ps"))
    if not all(a.dtype.kind in "iu" for a in (step, start, duration)):
        return None
    start, duration = start.astype(np.int64, copy=False), duration.astype(np.int64, copy=False)
    codes, values = pd.factorize(step, sort=True)
    n = len(values)
    device, names = column_codes(steps["device"])
    total = np.zeros(n, dtype=np.int64)
    first = np.full(n, np.iinfo(np.int64).max)
    last = np.full(n, np.iinfo(np.int64).min)
    np.add.at(total, codes, duration)
    np.minimum.at(first, codes, start)
    np.maximum.at(last, codes, start + duration)
    known = device >= 0
    pairs = sorted_unique(codes[known].astype(np.int64) * (len(names) + 1) + device[known])
    return StepPart(np.asarray(values), first, last, total,
                    np.bincount(codes, minlength=n).astype(np.int64), pairs // (len(names) + 1),
                    pairs % (len(names) + 1), [str(v) for v in names],
                    int(np.abs(duration).max(initial=0)), np.bincount(pairs // (len(names) + 1), minlength=n))


def merged_step_times(parts: Sequence[StepPart]) -> pd.DataFrame:
    """The step times of the tables the parts reduce, joined (``timeline.aggregate.step_times``)."""
    fold = StepFold()
    for part in parts:
        fold.add(part)
    if fold.disjoint:
        return fold.table()
    table = fold.table()
    table["devices"] = _distinct_devices(parts, fold.step)
    return table


class StepFold:
    """Step tables' reductions folded one at a time, in any order: :func:`merged_step_times` of them all,
    holding one running reduction (a pod's hosts are folded as they arrive, not held until the last one).

    Per step, counts and durations add, first starts and last ends combine; distinct devices add while no
    device is in two tables (``disjoint``); else only the tables' (step, device) pairs together tell them,
    and :func:`merged_step_times` counts them over the parts themselves.
    """

    def __init__(self) -> None:
        self.step = np.zeros(0, dtype=np.int32)
        self.count = np.zeros(0, dtype=np.int64)
        self.first = np.zeros(0, dtype=np.int64)
        self.last = np.zeros(0, dtype=np.int64)
        self.total = np.zeros(0, dtype=np.int64)       # object (Python integers) once sums may pass int64
        self.devices = np.zeros(0, dtype=np.int64)
        self.max_duration = 0
        self.names: set[str] = set()
        self.disjoint = True
        self.empty = True

    def add(self, part: StepPart) -> None:
        """Fold one table's reduction in."""
        names = set(part.devices)
        self.disjoint = self.disjoint and not (names & self.names) and len(names) == len(part.devices)
        self.names |= names
        if not part.step.size:
            return
        steps = sorted_unique(np.concatenate([self.step, part.step])) if not self.empty else sorted_unique(part.step)
        if steps.size != self.step.size or self.empty:
            self._widen(steps)
        self.empty = False
        at = np.searchsorted(steps, part.step)
        np.add.at(self.count, at, part.count)
        np.minimum.at(self.first, at, part.first)
        np.maximum.at(self.last, at, part.last)
        self.max_duration = max(self.max_duration, part.max_duration)
        totals = part.total
        if self.total.dtype != object and self.max_duration * int(self.count.max()) >= 2 ** 62:
            self.total = self.total.astype(object)      # sums past int64: Python's integers
        if self.total.dtype == object:
            totals = totals.astype(object)
        np.add.at(self.total, at, totals)
        np.add.at(self.devices, at, part.distinct)

    def _widen(self, steps: np.ndarray) -> None:
        """The running arrays over ``steps`` (a superset of the steps folded so far)."""
        old = np.searchsorted(steps, self.step)
        n = steps.size

        def moved(values: np.ndarray, fill) -> np.ndarray:
            out = np.full(n, fill, dtype=values.dtype)
            out[old] = values
            return out

        self.count, self.devices = moved(self.count, 0), moved(self.devices, 0)
        self.first = moved(self.first, np.iinfo(np.int64).max)
        self.last = moved(self.last, np.iinfo(np.int64).min)
        self.total = moved(self.total, 0)
        self.step = steps

    def table(self) -> pd.DataFrame:
        """The step times (STEP_TIME_COLUMNS) of every table folded so far."""
        if self.empty:
            return pd.DataFrame(columns=STEP_TIME_COLUMNS)
        return pd.DataFrame({"step": self.step, "start_ps": self.first, "time_ps": self.last - self.first,
                             "device_mean_ps": exact_means(self.total, self.count), "devices": self.devices})


def _distinct_devices(parts: Sequence[StepPart], steps: np.ndarray) -> np.ndarray:
    """Per step of ``steps``, its distinct devices over every part's (step, device) pairs."""
    names = np.array(sorted(set().union(*(p.devices for p in parts))), dtype=object)
    width = len(names) + 1
    pairs = [np.searchsorted(steps, p.step)[p.pair_step] * width
             + (np.searchsorted(names, np.asarray(p.devices, dtype=object)) if p.devices
                else np.zeros(0, dtype=np.int64))[p.pair_device] for p in parts if p.step.size]
    found = sorted_unique(np.concatenate(pairs)) if pairs else np.zeros(0, dtype=np.int64)
    return np.bincount(found // width, minlength=steps.size).astype(np.int64)


def exact_means(total: np.ndarray, count: np.ndarray) -> np.ndarray:
    """``total / count`` correctly rounded (integer sums that may pass float64's exact integers: Python's
    integer division rounds once, where a float sum would round at every step)."""
    if total.dtype != object and (not total.size or int(np.abs(total).max()) < 2 ** 53):
        return total / count
    return np.array([t / c for t, c in zip(total.tolist(), count.tolist())], dtype=np.float64)



def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` by a sort: numpy 2.4's hashed unique took 1.8 s on the 1.2 M (step, device) keys
    of 128 hosts, where sorting them takes 0.1 s."""
    ordered = np.sort(values)
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]
