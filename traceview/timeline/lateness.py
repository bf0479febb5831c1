"""Each step's earliest and latest start and end, and who had the latest: the stragglers' per-step sums
(``traceview.advice.stragglers``), host by host, merged.

A pod's hosts each hold their own devices' step spans; their per-step sums merge exactly (counts and sums
add, extremes combine, ties of the latest go to the first name in name order, whatever the order the hosts
come in). Each host's spans are summed up where it is read (:func:`summarize`: the names they hold and their
per-step sums), and a pod's parent folds those sums into one running sum as the hosts arrive
(:class:`SpanFold`), so it holds neither every host's spans nor every host's sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceview.timeline.packed_frame import Table, as_frame

WHOS = ("device", "host")


@dataclass
class PerStep:
    """Per step (ascending): how many take part, the earliest and latest start and end, who has the latest
    (the first in name order among ties: a code into ``names``, which are sorted), and the sum of their
    ends."""

    step: np.ndarray
    count: np.ndarray
    first_start: np.ndarray
    last_start: np.ndarray
    last_starter: np.ndarray
    first_end: np.ndarray
    last_end: np.ndarray
    last_finisher: np.ndarray
    end_sum: np.ndarray
    names: np.ndarray              # the names the codes point at, as str, sorted


@dataclass
class SpanSummary:
    """What one host's step spans hold, found where it is read: per ``who`` (device, host), the names (None:
    a row with no name) and the per-step sums (``sums``: a few hundred kB on a trace of thousands of steps;
    None once a pod's parent folded them into the run's, :class:`SpanFold`, or where not made)."""

    names: dict[str, set]
    sums: dict[str, PerStep] | None = None


def names_in(column: pd.Series) -> set:
    """The names a column holds (None for a row with none); a categorical's from its codes."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()
        used = np.unique(codes)
        names = set(column.cat.categories[used[used >= 0]])
        return names | {None} if used.size and used[0] < 0 else names
    return {None if pd.isna(name) else name for name in column.unique()}


def distinct(names: Sequence[set]) -> int:
    """How many names the sets hold together (rows with none not counted)."""
    return len(set().union(*names) - {None})


def summarize(spans: pd.DataFrame) -> SpanSummary | None:
    """One host's step spans (``hostreduce.activity.SPAN_COLUMNS``) summed up; None when it has none."""
    if spans.empty:
        return None
    return SpanSummary({who: names_in(spans[who]) for who in WHOS}, {who: per_step(spans, who) for who in WHOS})


class SpanFold:
    """Hosts' span summaries folded one at a time, in any order: per ``who``, :func:`merged_per_step` of every
    host's sums, held as one running sum (a pod's parent folds each host as it arrives and lets its own sums
    go). ``hosts``: how many summaries it holds; ``complete``: False once one came without its sums (the
    stragglers then sum up the spans themselves)."""

    def __init__(self) -> None:
        self.sums: dict[str, PerStep] = {}
        self.hosts = 0
        self.complete = True

    def add(self, summary: SpanSummary | None) -> None:
        """Fold one host's summary in (None: a host with no step spans, nothing to fold)."""
        if summary is None:
            return
        self.hosts += 1
        if summary.sums is None:
            self.complete = False
            return
        for who in WHOS:
            own = summary.sums[who]
            self.sums[who] = own if who not in self.sums else merged_per_step([self.sums[who], own])

    def result(self, hosts: int) -> dict[str, PerStep] | None:
        """The run's per-step sums per ``who``, where this fold holds every one of the run's ``hosts`` span
        tables whole; else None."""
        return self.sums if self.complete and self.hosts == hosts and hosts else None


def folded_sums(summaries: Sequence[SpanSummary | None]) -> dict[str, PerStep] | None:
    """:meth:`SpanFold.result` of these hosts' summaries (each keeps its own sums)."""
    fold = SpanFold()
    for summary in summaries:
        fold.add(summary)
    return fold.result(len(summaries))


def per_step(table: Table, who: str) -> PerStep:
    """The per-step sums of one span table (every name of ``who`` in it, whole)."""
    frame = as_frame(table)
    parts = frame.groupby(["step", who], sort=True, observed=True).agg(
        start=("start", "min"), end=("end", "max")).reset_index()
    by_step = parts.groupby("step", sort=True)
    codes, names = _text_codes(parts[who])
    return PerStep(by_step.size().index.to_numpy(dtype=np.int64), by_step.size().to_numpy(dtype=np.int64),
                   by_step["start"].min().to_numpy(dtype=np.int64), by_step["start"].max().to_numpy(dtype=np.int64),
                   codes[by_step["start"].idxmax().to_numpy()], by_step["end"].min().to_numpy(dtype=np.int64),
                   by_step["end"].max().to_numpy(dtype=np.int64), codes[by_step["end"].idxmax().to_numpy()],
                   by_step["end"].sum().to_numpy(dtype=np.int64), names)


def _text_codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the code of its value's text among the distinct texts, sorted (no Python object per row)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        texts = [str(c) for c in column.cat.categories]
        order = sorted(range(len(texts)), key=texts.__getitem__)
        remap = np.empty(len(texts), dtype=np.int64)
        remap[order] = np.arange(len(texts))
        return remap[column.cat.codes.to_numpy()], np.array([texts[i] for i in order], dtype=object)
    codes, uniques = pd.factorize(column.astype(str), sort=True)
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


def merged_per_step(parts: Sequence[PerStep]) -> PerStep:
    """Hosts' per-step sums merged (no name in two hosts): counts and sums add, extremes combine, ties of the
    latest go to the first name (in name order: the same whatever order the parts come in). One pass over
    every part's steps at once, no loop per part or Python object per step."""
    names = np.array(sorted(set().union(*(p.names.tolist() for p in parts))), dtype=object)
    fields = [name for name in PerStep.__dataclass_fields__ if name != "names"]
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return PerStep(empty, empty, empty, empty, empty, empty, empty, empty, empty, names)
    joined = {name: np.concatenate([getattr(p, name) for p in parts]) for name in fields}
    for name in ("last_starter", "last_finisher"):      # each part's codes made codes into ``names``
        joined[name] = np.concatenate([np.searchsorted(names, p.names).astype(np.int64)[getattr(p, name)]
                                       if p.names.size else getattr(p, name) for p in parts])
    steps, at = _dense(joined["step"])
    n = steps.size
    big = np.iinfo(np.int64).max
    out = PerStep(steps, np.zeros(n, np.int64), np.full(n, big), np.zeros(n, np.int64), np.zeros(n, np.int64),
                  np.full(n, big), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64), names)
    np.add.at(out.count, at, joined["count"])
    np.add.at(out.end_sum, at, joined["end_sum"])
    np.minimum.at(out.first_start, at, joined["first_start"])
    np.minimum.at(out.first_end, at, joined["first_end"])
    for value, code, latest, who in (("last_start", "last_starter", out.last_start, out.last_starter),
                                     ("last_end", "last_finisher", out.last_end, out.last_finisher)):
        np.copyto(latest, np.iinfo(np.int64).min)
        np.maximum.at(latest, at, joined[value])                    # per step: the latest, then of those
        tied = np.where(joined[value] == latest[at], joined[code], names.size)   # the first name
        np.copyto(who, names.size)
        np.minimum.at(who, at, tied)
    return out


def _dense(steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct steps (ascending) and each entry's position among them: ``np.unique(steps,
    return_inverse=True)``, by a table of the range where the steps are dense (no sort)."""
    if not steps.size:
        return steps, np.zeros(0, dtype=np.int64)
    lo, hi = int(steps.min()), int(steps.max())
    if hi - lo > 4 * steps.size + 1024:
        found, at = np.unique(steps, return_inverse=True)
        return found, at.astype(np.int64)
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[steps - lo] = True
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present).astype(steps.dtype) + lo, rank[steps - lo]
