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
    if not parts or not any(p.step.size for p in parts):
        return pd.DataFrame(columns=STEP_TIME_COLUMNS)
    steps = sorted_unique(np.concatenate([p.step for p in parts]))
    n = steps.size
    at = np.searchsorted(steps, np.concatenate([p.step for p in parts]))     # every part's steps at once
    count = np.zeros(n, dtype=np.int64)
    first = np.full(n, np.iinfo(np.int64).max)
    last = np.full(n, np.iinfo(np.int64).min)
    np.add.at(count, at, np.concatenate([p.count for p in parts]))
    np.minimum.at(first, at, np.concatenate([p.first for p in parts]))
    np.maximum.at(last, at, np.concatenate([p.last for p in parts]))
    totals = np.concatenate([p.total for p in parts])
    total = np.zeros(n, dtype=np.int64)
    if max(p.max_duration for p in parts) * int(count.max()) >= 2 ** 62:
        total, totals = total.astype(object), totals.astype(object)     # sums past int64: Python's integers
    np.add.at(total, at, totals)
    names = np.array(sorted(set().union(*(p.devices for p in parts))), dtype=object)
    devices = np.zeros(n, dtype=np.int64)
    if len(names) == sum(len(p.devices) for p in parts):      # no device in two tables: their counts add
        np.add.at(devices, at, np.concatenate([p.distinct for p in parts]))
    else:
        width = len(names) + 1
        offsets = np.cumsum([0] + [p.step.size for p in parts])
        pairs = np.concatenate([at[offsets[k]:offsets[k + 1]][p.pair_step] * width
                                + (np.searchsorted(names, np.asarray(p.devices, dtype=object)) if p.devices
                                   else np.zeros(0, dtype=np.int64))[p.pair_device]
                                for k, p in enumerate(parts)])
        devices += np.bincount(sorted_unique(pairs) // width, minlength=n)
    return pd.DataFrame({"step": steps, "start_ps": first, "time_ps": last - first,
                         "device_mean_ps": exact_means(total, count), "devices": devices})


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
