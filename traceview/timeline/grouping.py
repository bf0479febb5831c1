"""Integer keys over the raw op table (millions of rows): codes, group numbers, device slices, exact sums.

The raw table's string columns are categoricals; everything here works on their
integer codes, never on the strings (under pandas 3 a string conversion of a
2 M-row column builds a 2 M-element Arrow array: seconds). Group numbers come in
the order a ``groupby(sort=False)`` gives (first appearance), so a raw row can
point at its aggregated op row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceview.timeline.intervals import STEP_ROWS

# A float64 sum is exact while every partial sum stays below this (integers of 53 bits).
_EXACT_FLOAT = 2.0 ** 53
_LOW_BITS = 26


def column_codes(column: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """Integer codes of a column (-1 for missing) and the values they stand for.

    A categorical's own codes (in their own small integer type) and categories;
    any other column is factorized (order of first appearance).
    """
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(), column.cat.categories
    codes, uniques = pd.factorize(column.to_numpy(), use_na_sentinel=True)
    return codes, pd.Index(uniques)


def group_ids(raw: pd.DataFrame, key: list[str]) -> tuple[np.ndarray, int]:
    """Per row, the number of its distinct ``key`` (0..n-1 in order of first appearance, as
    ``groupby(key, sort=False, observed=True)`` numbers its groups); -1 where a key column is missing."""
    ids = np.zeros(len(raw), dtype=np.int64)
    missing = np.zeros(len(raw), dtype=bool)
    n = 1
    for name in key:
        codes, values = column_codes(raw[name])
        if len(values) == 1 and codes.size and codes.min() >= 0:
            continue                        # one value throughout (one program, one module): adds nothing
        if codes.size and codes.min() < 0:
            missing |= codes < 0
            codes = np.maximum(codes, 0)
        width = max(len(values), 1)
        if n * width >= 2 ** 62:            # renumber densely before the combined key could overflow
            ids, uniques = pd.factorize(ids)
            n = len(uniques)
        ids *= width
        ids += codes
        n *= width
    if not missing.any():
        dense, uniques = pd.factorize(ids)
        return dense.astype(np.int64), len(uniques)
    dense = np.full(len(raw), -1, dtype=np.int64)
    codes, uniques = pd.factorize(ids[~missing])
    dense[~missing] = codes
    return dense, len(uniques)


def first_rows(ids: np.ndarray, n_groups: int) -> np.ndarray:
    """For each group 0..n_groups-1, the first row carrying it (ids from :func:`group_ids`).

    Groups are numbered as they first appear: a new one tops every id before it. Walked in steps of
    STEP_ROWS rows carrying the highest id so far (no working column as long as the table).
    """
    found = []
    top = -1                               # the highest id before the step
    for a in range(0, ids.size, STEP_ROWS):
        step = ids[a:a + STEP_ROWS]
        seen = np.empty(step.size, dtype=np.int64)
        seen[0] = top
        np.maximum.accumulate(step[:-1], out=seen[1:])
        np.maximum(seen, top, out=seen)
        found.append(np.flatnonzero(step > seen) + a)
        top = max(top, int(seen[-1]), int(step[-1]))
    first = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
    return first[:n_groups]


def exact_sums(index: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """``values`` summed per ``index`` (0..size-1): integers into int64, exactly (a float64 ``bincount``
    where no sum can leave float64's exact integers, else ``np.add.at``); floats as ``bincount`` sums."""
    values = np.asarray(values)
    if values.dtype.kind == "f":
        return np.bincount(index, weights=values, minlength=size)
    values = values.astype(np.int64, copy=False)
    if values.size == 0 or max(abs(int(values.min())), abs(int(values.max()))) * values.size < _EXACT_FLOAT or \
            float(np.abs(values).sum(dtype=np.float64)) < _EXACT_FLOAT:
        return np.bincount(index, weights=values, minlength=size).astype(np.int64)
    if values.size < 2 ** (53 - _LOW_BITS):
        # value = high * 2^k + low with 0 <= low < 2^k: each part's sums stay exact in float64
        high = values >> _LOW_BITS
        if float(np.abs(high).sum(dtype=np.float64)) < _EXACT_FLOAT:
            low = np.bincount(index, weights=values & (2 ** _LOW_BITS - 1), minlength=size).astype(np.int64)
            return (np.bincount(index, weights=high, minlength=size).astype(np.int64) << _LOW_BITS) + low
    out = np.zeros(size, dtype=np.int64)
    np.add.at(out, index, values)
    return out


def execution_counts(index: np.ndarray, executions: np.ndarray, size: int) -> np.ndarray:
    """Per group, its executions: the rows that start one (``executions`` 1; a further kernel of the same
    execution is 0), counted without a float pass where every row starts one (TPU and CPU tables)."""
    if executions.size and bool(executions.min() == 1):
        return np.bincount(index, minlength=size).astype(np.int64)
    return np.bincount(index, weights=executions, minlength=size).astype(np.int64)


def device_codes(raw: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Per row, its device's position in the sorted list of device names with ops (-1 if missing)."""
    codes, values = column_codes(raw["device"])
    counts = np.bincount(codes if codes.size and codes.min() >= 0 else codes[codes >= 0], minlength=len(values))
    present = np.flatnonzero(counts)
    names = [str(values[i]) for i in present]
    order = sorted(range(len(names)), key=names.__getitem__)
    if len(present) == len(values) and order == list(range(len(order))):
        return codes, names                  # every device has ops, names in order: codes as they are
    remap = np.full(len(values) + 1, -1, dtype=np.int64)     # the last entry serves code -1
    remap[present[order]] = np.arange(len(order))
    return remap[codes], [names[i] for i in order]


@dataclass(frozen=True)
class DeviceRows:
    """A table's rows grouped by device, devices in name order: taken in device order (:meth:`take`),
    device i's rows are positions ``bounds[i]:bounds[i + 1]`` (rows with no device come first)."""

    order: np.ndarray | None         # row numbers in device order; None: the table's order already is
    bounds: np.ndarray
    names: list[str]

    def take(self, values: np.ndarray) -> np.ndarray:
        """A per-row array in device order (the array itself when the table is grouped already)."""
        return values if self.order is None else values[self.order]

    def spans(self) -> list[tuple[int, int]]:
        """(first, end) positions of each device's rows in device order."""
        return list(zip(self.bounds[:-1].tolist(), self.bounds[1:].tolist()))


def device_rows(raw: pd.DataFrame) -> DeviceRows:
    """The rows of ``raw`` grouped by device (the reader's tables are already: then nothing is moved)."""
    codes, names = device_codes(raw)
    grouped = not codes.size or bool((codes[1:] >= codes[:-1]).all())
    missing = int((codes < 0).sum())
    counts = np.bincount(codes[codes >= 0] if missing else codes, minlength=len(names))
    bounds = missing + np.concatenate(([0], np.cumsum(counts)))
    return DeviceRows(None if grouped else np.argsort(codes, kind="stable"), bounds, names)


def matches(column: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """Per row, whether its name matches ``pattern``; a categorical column is matched once per name."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        hit = np.asarray(pd.Series(column.cat.categories.astype(str)).str.contains(pattern), dtype=bool)
        codes = column.cat.codes.to_numpy()
        return np.where(codes >= 0, np.append(hit, False)[codes], False)
    return column.astype(str).str.contains(pattern).to_numpy()
