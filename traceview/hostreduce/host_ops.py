"""One host's op table reduced to what the analysis needs: small per-op and per-device partials.

A pod's run is analyzed map-reduce fashion: each host's op table (hundreds of
thousands of executions) is reduced where it was read (a pool worker, a Dask
worker, or this process) to an :class:`OpsPart`, and the parent merges the
parts (:mod:`traceview.hostreduce.run_ops`). The parts hold, per (device,
program_id, module, op) group: counts and exact time sums, the first
non-missing category, the trace's own flops/bytes, per-step self time; per
device: busy, span and op time. All of it adds up across hosts exactly, in
integers, so the merged tables equal those of one pass over all rows.

What depends on the HLO and the target chip (roofline labels, exposed time of
collectives, async start/done pairs) is known only after the merge. Two cases:

* a *simple* device (its op intervals never overlap, no row in a step, every
  key present, no negative duration) needs nothing but per-group sums: its busy
  time by label is the sum of each group's interval lengths under that group's
  label, and a collective on it is exposed for min(duration, self time) (no
  other op covers it);
* every other row is kept (start, end, self time, step, group): rows that
  overlap another, rows in a step (each is clipped to its step's window, known
  only once all hosts' steps are merged), and the rows of ops that may be
  async starts or dones (their names say
  ``start``/``done``; the merge checks that against the HLO's pairs and asks
  for the rows again when a pair member was not kept).

So the parts' size grows with the distinct ops, not the executions, wherever
devices run one op at a time; only overlapping devices ship their rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceview.hostreduce.activity import Activity, reduce_activity
from traceview.timeline.aggregate import OP_KEY
from traceview.timeline.grouping import column_codes, exact_sums, execution_counts, first_rows
from traceview.timeline.intervals import STEP_ROWS


@dataclass(frozen=True)
class KeepRows:
    """Which rows a part keeps beyond the async-looking ones: every row of these devices, and every
    row of these (module, op) names (asked for again when the HLO pairs ops the names do not show)."""

    devices: frozenset[str] = frozenset()
    names: frozenset[tuple[str, str]] = frozenset()


@dataclass
class OpsPart:
    """One host's op table, reduced (numpy arrays and short lists only: cheap to send between processes).

    Groups are (device, program_id, module, op) in order of first appearance; ``-1`` codes: missing.
    """

    n_rows: int
    op_time_ps: int                       # sum of self_ps over all rows
    # ---- per group
    first_row: np.ndarray                 # int64, the group's first row in the host's table
    device: np.ndarray                    # int32 code into ``devices`` (-1: no device)
    program_id: np.ndarray                # int64
    module: np.ndarray                    # int32 code into ``modules``
    op: np.ndarray                        # int32 code into ``op_names``
    category: list                        # first non-missing category (str), None when none is
    category_row: np.ndarray              # int64, the row it was found in (-1: none)
    occurrences: np.ndarray               # int64, executions (parsers.profile: ``executions``)
    kernels: np.ndarray                   # int64, rows
    total_ps: np.ndarray                  # int64
    self_ps: np.ndarray                   # int64
    trace_flops: np.ndarray               # float64 sums of the reported values (row order)
    trace_flops_n: np.ndarray             # int64, how many rows reported one
    trace_bytes: np.ndarray
    trace_bytes_n: np.ndarray
    length_ps: np.ndarray                 # int64, over its alone rows: sum of max(end - start, 0)
    exposed_alone_ps: np.ndarray          # int64, over its alone rows: sum of min(duration, self)
    # ---- names
    devices: list[str]                    # devices of the table, sorted
    modules: list[str]
    op_names: list[str]
    # ---- per device (of ``devices``) with rows
    busy_ps: np.ndarray                   # int64 union length
    first_ps: np.ndarray                  # int64 first start
    last_ps: np.ndarray                   # int64 last end
    dev_op_time_ps: np.ndarray            # int64 sum of self_ps
    has_rows: np.ndarray                  # bool
    # ---- kept rows: every row of a non-simple device, async-looking rows of simple ones
    kept_group: np.ndarray                # int64 (-1: a key is missing)
    kept_device: np.ndarray               # int32 code into ``devices`` (-1: none)
    kept_start: np.ndarray
    kept_duration: np.ndarray
    kept_self: np.ndarray
    kept_step: np.ndarray
    kept_alone: np.ndarray                # bool: an alone row (kept only as a possible async pair member)
    kept_steps: np.ndarray                # int32, the distinct steps of the kept rows that are not alone
    kept_without_device: bool             # whether some kept row has no device
    kept_names: frozenset = field(default_factory=frozenset)   # (module, op) kept in full besides the async-looking
    kept_devices: frozenset = field(default_factory=frozenset)  # devices kept in full (KeepRows.devices)
    activity: Activity = field(default_factory=Activity)       # for the idle causes and stragglers


def looks_async(name: str) -> bool:
    """Whether an op name may be one half of an async pair (``all-gather-start.1``, ``copy-done``)."""
    return "start" in name or "done" in name


def reduce_ops(ops: pd.DataFrame, keep: KeepRows | None = None) -> OpsPart:
    """Reduce one op table (profile.OP_COLUMNS; any row order, any number of devices) to its part."""
    keep = keep or KeepRows()
    # First, while nothing below is allocated yet: the two reductions' working columns never coexist
    # (a 2 M-row table's peak).
    activity = reduce_activity(ops)
    n = len(ops)
    dev, devices = _device_codes(ops["device"])
    gid = _group_numbers(ops, dev, len(devices))
    has_key = gid >= 0
    n_groups = int(gid.max()) + 1 if n else 0
    first = first_rows(gid, n_groups)
    counted = slice(None) if has_key.all() else np.flatnonzero(has_key)   # all rows: no copies
    g = gid[counted]

    start = ops["start_ps"].to_numpy(dtype=np.int64)
    duration = ops["duration_ps"].to_numpy(dtype=np.int64)
    self_ps = ops["self_ps"].to_numpy(dtype=np.int64)
    step = _step_numbers(ops)
    module_codes, module_values = column_codes(ops["module"])
    op_codes, op_values = column_codes(ops["op"])
    category, category_row = _first_present(ops["category"], gid, first, has_key)
    flops, flops_n = _reported(ops["trace_flops"], g, counted, n_groups)
    nbytes, nbytes_n = _reported(ops["trace_bytes"], g, counted, n_groups)

    per_device, alone = _device_totals(dev, devices, start, duration, self_ps, keep.devices)
    alone &= has_key & (step < 0)
    module_names = [str(v) for v in module_values]
    op_names = [str(v) for v in op_values]
    group_module = _codes_at(module_codes, first)
    group_op = _codes_at(op_codes, first)
    wanted = _wanted_groups(group_module, group_op, module_names, op_names, keep.names)
    kept = ~alone | (np.append(wanted, False)[gid] if wanted.any() else False)
    length, exposed_alone = _alone_sums(gid, alone, duration, self_ps, n_groups)
    rows = np.flatnonzero(kept)
    kept_device = dev[rows].astype(np.int32)
    return OpsPart(
        n_rows=n, op_time_ps=int(self_ps.sum()) if n else 0,
        first_row=first.astype(np.int64), device=dev[first].astype(np.int32) if n_groups else np.zeros(0, np.int32),
        program_id=ops["program_id"].to_numpy(dtype=np.int64)[first],
        module=group_module.astype(np.int32), op=group_op.astype(np.int32), category=category,
        category_row=category_row,
        occurrences=execution_counts(g, ops["executions"].to_numpy()[counted], n_groups),
        kernels=np.bincount(g, minlength=n_groups).astype(np.int64),
        total_ps=exact_sums(g, duration[counted], n_groups), self_ps=exact_sums(g, self_ps[counted], n_groups),
        trace_flops=flops, trace_flops_n=flops_n, trace_bytes=nbytes, trace_bytes_n=nbytes_n,
        length_ps=length, exposed_alone_ps=exposed_alone,
        devices=devices, modules=module_names, op_names=op_names,
        busy_ps=per_device.busy_ps, first_ps=per_device.first_ps, last_ps=per_device.last_ps,
        dev_op_time_ps=per_device.op_time_ps, has_rows=per_device.has_rows,
        kept_group=gid[rows], kept_device=kept_device, kept_start=start[rows],
        kept_duration=duration[rows], kept_self=self_ps[rows], kept_step=step[rows].astype(np.int32),
        kept_alone=alone[rows], kept_steps=pd.unique(step[rows][~alone[rows]]).astype(np.int32),
        kept_without_device=bool((kept_device < 0).any()), kept_names=keep.names, kept_devices=keep.devices, activity=activity,
    )


def _device_codes(column: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Per row, its device's code (signed integers, -1: no device) into the device names sorted; the names."""
    codes, values = column_codes(column)
    names = [str(v) for v in values]
    order = sorted(range(len(names)), key=names.__getitem__)
    devices = [names[i] for i in order]
    if order == list(range(len(order))):
        return codes, devices                                         # names in order already: the column's codes
    remap = np.full(len(names) + 1, -1, dtype=np.int64)
    remap[order] = np.arange(len(order))
    return remap[codes], devices                                      # codes in sorted name order, -1 kept


def _step_numbers(ops: pd.DataFrame) -> np.ndarray:
    """Per row, its step number (integers, the column's own where it holds them; -1: in no step, or the table
    has no step column)."""
    step = ops["step"].to_numpy() if "step" in ops else np.full(len(ops), -1)
    if step.dtype.kind == "i":
        return step
    if step.dtype.kind == "u":
        return step.astype(np.int64)
    return np.asarray(pd.to_numeric(pd.Series(step), errors="coerce").fillna(-1), dtype=np.int64)


@dataclass
class _DeviceTotals:
    """Per device (sorted names): union length, first start, last end, sum of self time, whether it has rows."""

    busy_ps: np.ndarray
    first_ps: np.ndarray
    last_ps: np.ndarray
    op_time_ps: np.ndarray
    has_rows: np.ndarray


def _device_totals(dev: np.ndarray, devices: list[str], start: np.ndarray, duration: np.ndarray,
                   self_ps: np.ndarray, kept_devices: frozenset[str]) -> tuple[_DeviceTotals, np.ndarray]:
    """Each device's totals, and per row whether it is alone on its device (no other row overlaps it;
    False on devices kept in full and on devices with a negative duration)."""
    n, n_dev = dev.size, len(devices)
    busy, first_ps, last_ps, dev_time = (np.zeros(n_dev, dtype=np.int64) for _ in range(4))
    has_rows = np.zeros(n_dev, dtype=bool)
    alone = np.zeros(n, dtype=bool)
    by_device = np.argsort(dev, kind="stable") if n and not (dev[1:] >= dev[:-1]).all() else None
    d_sorted = dev if by_device is None else dev[by_device]
    bounds = np.searchsorted(d_sorted, np.arange(n_dev + 1), side="left")
    for i in range(n_dev):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        if hi == lo:
            continue
        rows: slice | np.ndarray = slice(lo, hi) if by_device is None else by_device[lo:hi]
        s, d = start[rows], duration[rows]
        has_rows[i] = True
        first_ps[i] = int(s.min())
        dev_time[i] = int(self_ps[rows].sum())
        if not (s[1:] >= s[:-1]).all():
            o = np.argsort(s, kind="stable")
            rows = (np.arange(lo, hi) if by_device is None else by_device[lo:hi])[o]
            s, d = s[o], d[o]
        check = devices[i] not in kept_devices and not (d < 0).any()   # an end before its start
        busy[i], last_ps[i], alone_sorted = _union_and_alone(s, d, check)
        if alone_sorted is not None:
            alone[rows] = alone_sorted
    return _DeviceTotals(busy, first_ps, last_ps, dev_time, has_rows), alone


def _wanted_groups(group_module: np.ndarray, group_op: np.ndarray, module_names: list[str], op_names: list[str],
                   names: frozenset[tuple[str, str]]) -> np.ndarray:
    """Per group, whether its rows are kept even where alone: async-looking ops and the names asked for."""
    wanted = np.array([looks_async(op_names[o]) if o >= 0 else False for o in group_op], dtype=bool)
    if names and group_op.size:
        wanted |= np.array([(module_names[m] if m >= 0 else None, op_names[o] if o >= 0 else None) in names
                            for m, o in zip(group_module, group_op)], dtype=bool)
    return wanted


def _alone_sums(gid: np.ndarray, alone: np.ndarray, duration: np.ndarray, self_ps: np.ndarray,
                n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group, over its alone rows: the sum of max(duration, 0) and of min(duration, self time)."""
    if int(alone.sum()) < alone.size // 4:            # few alone rows: take them
        solo = np.flatnonzero(alone)
        return (exact_sums(gid[solo], np.maximum(duration[solo], 0), n_groups),
                exact_sums(gid[solo], np.minimum(duration[solo], self_ps[solo]), n_groups))
    length = np.zeros(n_groups + 1, dtype=np.int64)  # most: the others go to an extra group, dropped
    exposed = np.zeros(n_groups + 1, dtype=np.int64)
    for a in range(0, gid.size, STEP_ROWS):              # in steps: no working column as long as the table
        rows = slice(a, a + STEP_ROWS)
        solo_gid = np.where(alone[rows], gid[rows], n_groups)
        length += exact_sums(solo_gid, np.maximum(duration[rows], 0), n_groups + 1)
        exposed += exact_sums(solo_gid, np.minimum(duration[rows], self_ps[rows]), n_groups + 1)
    return length[:n_groups], exposed[:n_groups]


def _group_numbers(ops: pd.DataFrame, dev: np.ndarray, n_devices: int) -> np.ndarray:
    """Per row, its (device, program_id, module, op) group, numbered in order of first appearance;
    -1 where program_id, module or op is missing (a missing device is a value of its own)."""
    n = len(ops)
    gid = np.full(n, -1, dtype=np.int64)
    if not n:
        return gid
    keys: list[tuple[np.ndarray, int]] = []             # each key column's codes (-1: missing) and their count
    for name in OP_KEY:
        column = ops[name]
        if not isinstance(column.dtype, pd.CategoricalDtype):
            values = column.to_numpy()
            if values.dtype.kind in "iu" and values.size and values.min() == values.max():
                continue                                  # one program throughout: adds nothing
        codes, values = column_codes(column)
        keys.append((codes, max(len(values), 1)))
    if (n_devices + 1) * int(np.prod([size for _, size in keys])) <= _SMALL_KEYS:
        return _small_key_numbers(gid, dev, n_devices, keys)
    combined = dev.astype(np.int64)                     # a column of its own: the steps below work in place
    combined += 1
    width = n_devices + 1
    missing = np.zeros(n, dtype=bool)
    for codes, size in keys:
        if codes.size and codes.min() < 0:
            missing |= codes < 0
            codes = np.maximum(codes, 0)
        if width * size >= 2 ** 62:                      # renumber before the combined key could overflow
            combined, uniques = pd.factorize(combined, size_hint=min(width, n))
            combined = combined.astype(np.int64, copy=False)
            width = len(uniques)
        combined *= size
        combined += codes
        width *= size
    keyed = ~missing
    # the hash table sized for the distinct keys there can be, not one slot per row (a 2 M-row table: 34 MB)
    if keyed.all():
        return pd.factorize(combined, size_hint=min(width, n))[0].astype(np.int64, copy=False)
    gid[keyed] = pd.factorize(combined[keyed], size_hint=min(width, n))[0]
    return gid


_SMALL_KEYS = 1 << 16  # up to this many possible (device, key codes) values, groups are numbered by a lookup table


def _small_key_numbers(gid: np.ndarray, dev: np.ndarray, n_devices: int,
                       keys: list[tuple[np.ndarray, int]]) -> np.ndarray:
    """_group_numbers where the combined key has few possible values: in steps of STEP_ROWS rows, each
    step's keys looked up in a table of the numbers given so far, the new ones numbered in order of first
    appearance (pd.unique); no working column as long as the table."""
    lookup = np.full((n_devices + 1) * int(np.prod([size for _, size in keys])), -1, dtype=np.int64)
    numbered = 0
    for a in range(0, gid.size, STEP_ROWS):
        combined = dev[a:a + STEP_ROWS].astype(np.int64)
        combined += 1
        missing = None
        for codes, size in keys:
            step = codes[a:a + STEP_ROWS]
            absent = step < 0
            if absent.any():
                missing = absent if missing is None else missing | absent
                step = np.maximum(step, 0)
            combined *= size
            combined += step
        ids = lookup[combined]
        new = ids < 0 if missing is None else (ids < 0) & ~missing
        if new.any():
            first_seen = pd.unique(combined[new])          # in order of first appearance
            lookup[first_seen] = np.arange(numbered, numbered + first_seen.size)
            numbered += first_seen.size
            ids = lookup[combined]
        if missing is not None:
            ids[missing] = -1
        gid[a:a + STEP_ROWS] = ids
    return gid


def _codes_at(codes: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return codes[rows].astype(np.int64) if rows.size else np.zeros(0, dtype=np.int64)


def _union_and_alone(s: np.ndarray, d: np.ndarray, with_alone: bool) -> tuple[int, int, np.ndarray | None]:
    """Of intervals [s, s + d) sorted by start: the length of their union (intervals of no length add nothing,
    as in intervals.union), the last end, and with `with_alone`, per interval whether no other one overlaps it
    by any length.

    One pass in steps of STEP_ROWS intervals, carrying the running maximum of the ends and the open block:
    no working column as long as the device's rows (ends, their running maximum, the blocks' bounds).
    A block starts where an interval begins after everything before it ended; its length is the reach
    (running maximum of the ends) at its last interval minus its start, counted when positive.
    """
    n = s.size
    alone = np.empty(n, dtype=bool) if with_alone else None
    busy = 0
    reach_before: int | None = None   # the reach at the interval before the step
    open_start: int | None = None     # the start of the block still open at the step's first interval
    for a in range(0, n, STEP_ROWS):
        b = min(a + STEP_ROWS, n)
        sc = s[a:b]
        ec = sc + d[a:b]
        reach = np.maximum.accumulate(ec)
        if reach_before is not None:
            np.maximum(reach, reach_before, out=reach)
        new = np.empty(b - a, dtype=bool)
        new[0] = reach_before is None or bool(sc[0] > reach_before)
        np.greater(sc[1:], reach[:-1], out=new[1:])
        firsts = np.flatnonzero(new)
        if open_start is not None:
            if new[0] and reach_before is not None:   # the open block ended with the step before
                busy += max(reach_before - open_start, 0)
                open_start = None
            elif firsts.size:     # it ends before this step's first new block
                busy += max(int(reach[firsts[0] - 1]) - open_start, 0)
                open_start = None
        if firsts.size:
            busy += int(np.maximum(reach[firsts[1:] - 1] - sc[firsts[:-1]], 0).sum())
            open_start = int(sc[firsts[-1]])
        if alone is not None:     # nothing before it reaches into it, nothing after it starts inside it
            out = alone[a:b]
            out[0] = reach_before is None or bool(sc[0] >= reach_before)
            np.greater_equal(sc[1:], reach[:-1], out=out[1:])
            out[:-1] &= sc[1:] >= ec[:-1]
            if b < n:
                out[-1] &= bool(s[b] >= ec[-1])
        reach_before = int(reach[-1])
    if open_start is not None and reach_before is not None:
        busy += max(reach_before - open_start, 0)
    return busy, reach_before if reach_before is not None else 0, alone


def _first_present(column: pd.Series, ids: np.ndarray, first: np.ndarray, kept: np.ndarray) -> tuple[list, np.ndarray]:
    """Per group, the first non-missing value of ``column`` as str (None: none), and its row (-1: none)."""
    codes, values = column_codes(column)
    names = [str(v) for v in values]
    if not first.size:
        return [], np.zeros(0, dtype=np.int64)
    at_first = codes[first]
    if (at_first >= 0).all():
        return [names[c] for c in at_first], first.astype(np.int64)
    present = kept & (codes >= 0)
    firsts = np.full(len(first), -1, dtype=np.int64)
    rows = np.flatnonzero(present)
    if rows.size:
        g = ids[rows]
        _, where = np.unique(g, return_index=True)            # first present row of each group with one
        firsts[g[where]] = rows[where]
    return [names[codes[r]] if r >= 0 else None for r in firsts], firsts


def _reported(column: pd.Series, groups: np.ndarray, rows: np.ndarray | slice,
              n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the sum of a figure the trace may not report (NaN), and how many rows reported it."""
    values = column.to_numpy(dtype="float64", na_value=np.nan)[rows]
    reported = ~np.isnan(values)
    if not reported.any():
        return np.zeros(n_groups), np.zeros(n_groups, dtype=np.int64)
    return (np.bincount(groups[reported], weights=values[reported], minlength=n_groups),
            np.bincount(groups[reported], minlength=n_groups).astype(np.int64))
