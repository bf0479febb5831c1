"""A run's per-host op partials (traceview.hostreduce.host_ops) merged into what the analysis reads.

Every figure equals the one computed over all rows at once (timeline.aggregate, timing, devices):
integer sums are exact whatever the order, groups are numbered by their first row in the run (host
order, then row order), and whatever needs the rows themselves (devices whose ops overlap, async
pairs) is computed by the same functions over the rows the parts kept, in the run's row order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traceview.hostreduce.host_ops import KeepRows, OpsPart, looks_async
from traceview.hostreduce.spill import release
from traceview.hostreduce.workers import PartWorkers
from traceview.runtime.forked import batches, fork_map, fork_map_items
from traceview.timeline.async_ops import pair_times_in_chunks
from traceview.timeline.devices import (
    DEVICE_COLUMNS,
    device_busy_by_label,
    device_time,
    step_busy_part,
    step_busy_table,
)
from traceview.timeline.grouping import exact_sums
from traceview.timeline.timing import judged_and_exposed_in_chunks, per_step_self_time_in_chunks


@dataclass
class RunOps:
    """The merged parts: the aggregated op table and, per part, each group's row in it."""

    parts: list[OpsPart]
    per_device: bool
    stats: pd.DataFrame                  # as timeline.aggregate.aggregate_ops gives it
    group_rows: list[np.ndarray]         # per part: each group's row in ``stats`` (-1: none)
    devices: list[str]                   # devices with rows, sorted
    part_devices: list[np.ndarray]       # per part: its device codes -> codes into ``devices``
    jobs: int = 1                        # processes the per-chunk measures may use (runtime.forked)
    workers: PartWorkers | None = None   # where the parts are held too: the per-chunk measures run there
    _chunks: list[list[int]] | None = field(default=None, repr=False)   # parts that share devices, together

    @property
    def n_rows(self) -> int:
        return sum(p.n_rows for p in self.parts)

    @property
    def op_time_ps(self) -> int:
        return sum(p.op_time_ps for p in self.parts)

    def device_programs(self) -> pd.DataFrame | None:
        """The distinct (device, module, program_id) of all rows, from the parts' groups; None when some row
        has no group (a key missing) and the groups cannot tell."""
        if any(int(p.kernels.sum()) != p.n_rows or (p.device < 0).any() for p in self.parts):
            return None
        columns = ["device", "module", "program_id"]
        seen: dict[tuple, None] = {}       # in order of first appearance
        for p in self.parts:       # each part's distinct triples first (in order): a host has few, and many groups
            triples = np.stack([p.device.astype(np.int64), p.module.astype(np.int64), p.program_id])
            first = np.sort(np.unique(triples, axis=1, return_index=True)[1]) if triples.shape[1] else \
                np.zeros(0, dtype=np.int64)
            for d, m, program in zip(p.device[first].tolist(), p.module[first].tolist(), p.program_id[first].tolist()):
                seen.setdefault((p.devices[d], p.modules[m], program), None)
        table = pd.DataFrame(list(seen), columns=columns)
        return table.astype({"program_id": np.int64}) if table.empty else table

    # ------------------------------------------------------------------ rows kept by the parts

    def for_each(self, task: Callable[[pd.DataFrame, np.ndarray], Any], full_only: bool,
                 op_index: np.ndarray | None = None, fold: Callable[[Any, Any], Any] | None = None) -> list[Any]:
        """``task(raw, op_rows)`` on every chunk of the rows the parts kept, the results in chunk order: a raw
        op table (device, start_ps, duration_ps, self_ps, step) and its rows' op rows (through ``op_index``:
        op id -> current row). A chunk is one part, or the parts that share a device (or rows with no device),
        in run order: every device's rows are in one chunk, so whatever is measured per device adds up over
        the chunks, and no table of every host's rows is ever built. The chunks are measured in ``jobs``
        forked processes (runtime.forked), or where the parts are held (``workers``: the Dask workers that
        read them). ``full_only``: only the rows of devices kept whole (not the async-looking rows of simple
        devices). ``fold``: results that add up (``fold(sum, result)``: the same sum whatever the order and
        grouping, as whole numbers and disjoint devices' entries are) are added as they come, each forked
        process adding its run of chunks before its sum travels, each Dask worker the chunks it holds, and the
        caller the few sums as they arrive: not every chunk's result at once (a pod's thousands)."""
        chunks = self._chunk_parts()
        if self.workers is not None:
            return self.workers.map(_measured_chunk, chunks, task, full_only, op_index, self.devices,
                                    self.group_rows, self.part_devices, fold=fold)

        def measure(k: int) -> Any:
            return _measured_chunk(chunks[k], [self.parts[i] for i in chunks[k]], task, full_only, op_index,
                                   self.devices, self.group_rows, self.part_devices)

        if fold is None:
            return fork_map(measure, len(chunks), self.jobs)
        return fork_map_items(lambda run: functools.reduce(fold, (measure(k) for k in run)),
                              batches(len(chunks), self.jobs), self.jobs)

    def _chunk_parts(self) -> list[list[int]]:
        """The parts in chunks: parts that hold rows of one device (or both rows with no device) together."""
        if self._chunks is None:
            root = list(range(len(self.parts)))

            def find(i: int) -> int:
                while root[i] != i:
                    root[i] = root[root[i]]
                    i = root[i]
                return i

            owners = self._device_owners()
            owners[None] = [i for i, p in enumerate(self.parts) if p.kept_without_device]   # pair up too
            for parts in owners.values():
                for i in parts[1:]:
                    root[find(i)] = find(parts[0])
            groups: dict[int, list[int]] = {}
            for i in range(len(self.parts)):
                groups.setdefault(find(i), []).append(i)
            self._chunks = sorted(groups.values())
        return self._chunks

    def _device_owners(self) -> dict[str | None, list[int]]:
        """Per device with rows, the parts that hold them (in order)."""
        owners: dict[str | None, list[int]] = {}
        for i, p in enumerate(self.parts):
            for d in np.flatnonzero(p.has_rows):
                owners.setdefault(p.devices[d], []).append(i)
        return owners

    def missing_rows(self, pairs: pd.DataFrame) -> dict[int, KeepRows]:
        """What each part must keep beyond what it holds for the merge to be complete (empty: nothing):
        first every device whose rows are in several parts, kept whole in each; then the members of the
        async ``pairs`` that ran on simple devices but whose rows were not kept (their names do not look
        async). The parts asked for are reduced again keeping them, and merged again."""
        return self.shared_devices() or self.pair_members(pairs)

    def pair_members(self, pairs: pd.DataFrame) -> dict[int, KeepRows]:
        """Parts to read again: an op of an async pair ran on a simple device but its rows were not kept
        (its name does not look async)."""
        if pairs.empty:
            return {}
        members = set(zip(pairs["module"], pairs["start"])) | set(zip(pairs["module"], pairs["done"]))
        members = {m for m in members if not looks_async(m[1])}
        if not members:
            return {}
        need: dict[int, KeepRows] = {}
        for i, p in enumerate(self.parts):
            missing = {(p.modules[m], p.op_names[o]) for m, o in zip(p.module, p.op)
                       if m >= 0 and o >= 0 and (p.modules[m], p.op_names[o]) in members} - set(p.kept_names)
            if missing:
                need[i] = KeepRows(devices=p.kept_devices, names=frozenset(set(p.kept_names) | missing))
        return need

    def judged_and_exposed(self, ops: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
        """timeline.timing.judged_and_exposed over all rows (``ops``: the stats rows, same order)."""
        timed = None
        if pairs.empty:                 # nothing to pair: pair_times' all-NaN answer without the rows
            timed = pd.DataFrame({"in_flight_ps": np.nan, "pair_exposed_ps": np.nan}, index=ops.index)
        else:
            timed = pair_times_in_chunks(functools.partial(self.for_each, full_only=False), ops, pairs)
        return judged_and_exposed_in_chunks(functools.partial(self.for_each, full_only=True), ops, pairs,
                                            timed=timed,
                                            exposed_alone=self._exposed_alone(len(ops)) if self.n_rows else None)

    def _exposed_alone(self, n_ops: int) -> np.ndarray:
        """Per op row, the summed min(duration, self) of its rows on simple devices."""
        out = np.zeros(n_ops, dtype=np.int64)
        for p, gr in zip(self.parts, self.group_rows):
            take = gr >= 0
            out += exact_sums(gr[take], p.exposed_alone_ps[take], n_ops)
        return out

    # ------------------------------------------------------------------ per device

    def device_time(self) -> pd.DataFrame:
        """timeline.devices.device_time over all rows."""
        rows: dict[str, tuple] = {}
        shared = {d for d, o in self._device_owners().items() if len(o) > 1}
        for p in self.parts:
            for d in np.flatnonzero(p.has_rows):
                name = p.devices[d]
                if name not in shared:  # noqa: SIM102
                    busy, first, last = int(p.busy_ps[d]), int(p.first_ps[d]), int(p.last_ps[d])
                    rows[name] = (name, busy, last - first - busy, last - first, first, last, int(p.dev_op_time_ps[d]))
        tables = self.for_each(lambda raw, _: None if raw.empty else device_time(raw), True) if shared else []
        for table in tables:
            for r in table.itertuples(index=False) if table is not None else ():
                if r.device in shared:
                    rows[r.device] = tuple(r)
        if not rows:
            return pd.DataFrame(columns=DEVICE_COLUMNS)
        return pd.DataFrame([rows[d] for d in sorted(rows)], columns=DEVICE_COLUMNS)

    def shared_devices(self) -> dict[int, KeepRows]:
        """Parts to read again: a device whose rows are in several parts must be kept whole in each."""
        need: dict[int, KeepRows] = {}
        for name, parts in self._device_owners().items():
            if len(parts) < 2 or name is None:
                continue
            for i in parts:
                p = self.parts[i]
                if name not in p.kept_devices:
                    old = need.get(i, KeepRows(devices=p.kept_devices, names=p.kept_names))
                    need[i] = KeepRows(devices=old.devices | {name}, names=old.names)
        return need

    def busy_by_label(self, op_labels: np.ndarray, n_labels: int, op_index: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """timeline.devices.device_busy_by_label over all rows, devices in name order; ``op_labels``:
        each op row's label (-1: none)."""
        return self.busy_split(op_labels, n_labels, None, op_index)[0]

    def step_busy_by_label(self, op_labels: np.ndarray, n_labels: int, steps: pd.DataFrame,
                           op_index: np.ndarray | None = None) -> pd.DataFrame:
        """timeline.devices.step_busy_by_label over all rows (only devices kept whole have rows in steps)."""
        table = self.busy_split(op_labels, n_labels, steps, op_index)[1]
        assert table is not None
        return table

    def busy_split(self, op_labels: np.ndarray, n_labels: int, steps: pd.DataFrame | None,
                   op_index: np.ndarray | None = None) -> tuple[dict[str, np.ndarray], pd.DataFrame | None]:
        """:meth:`busy_by_label` and, with ``steps``, :meth:`step_busy_by_label`, in one pass over the rows."""
        labels_of = np.append(op_labels, -1)

        def measure(raw: pd.DataFrame, op_rows: np.ndarray) -> tuple[dict, Any]:
            labels = labels_of[op_rows]
            busy = device_busy_by_label(raw, labels, n_labels) if len(raw) else {}
            by_step = step_busy_part(raw, labels, n_labels, steps) if steps is not None and not steps.empty \
                else None
            return busy, by_step

        found = self.for_each(measure, True, op_index, fold=_busy_added)
        out: dict[str, np.ndarray] = {}
        for busy, _ in found:
            out.update(busy)
        for p, gr in zip(self.parts, self.group_rows):
            solo = np.flatnonzero((p.device >= 0) & (p.length_ps > 0))
            if not solo.size:
                continue
            rows = gr[solo] if op_index is None else np.append(op_index, -1)[gr[solo]]
            labels = labels_of[rows].astype(np.int64)
            labels[labels < 0] = n_labels
            dev = p.device[solo].astype(np.int64)
            sums = exact_sums(dev * (n_labels + 1) + labels, p.length_ps[solo], len(p.devices) * (n_labels + 1))
            sums = sums.reshape(len(p.devices), n_labels + 1).astype(np.float64)
            sums[:, n_labels - 1] += sums[:, n_labels]
            for d in np.unique(dev):
                name = p.devices[d]
                out[name] = out[name] + sums[d, :n_labels] if name in out else sums[d, :n_labels]
        busy = {name: out[name] for name in sorted(out)}
        if steps is None:
            return busy, None
        return busy, step_busy_table([by_step for _, by_step in found], n_labels, steps)


def _busy_added(a: tuple[dict, Any], b: tuple[dict, Any]) -> tuple[dict, Any]:
    """Two runs of chunks' busy time by label (each device in one chunk) and per-step parts
    (``timeline.devices.step_busy_part``: whole numbers of ps, whatever order they are added in) as one."""
    steps = b[1] if a[1] is None else a[1] if b[1] is None else (a[1][0] + b[1][0], a[1][1] + b[1][1])
    return {**a[0], **b[0]}, steps


def _measured_chunk(members: list[int], parts: list[OpsPart], task: Callable[[pd.DataFrame, np.ndarray], Any],
                    full_only: bool, op_index: np.ndarray | None, devices: list[str], group_rows: list[np.ndarray],
                    part_devices: list[np.ndarray]) -> Any:
    """``task`` of one chunk's kept rows (``members``: its parts' indices in the run, ``parts``: those parts,
    here or where they are held); a spilled part's pages leave the process after (hostreduce.spill)."""
    try:
        return task(*_kept_rows(members, parts, full_only, op_index, devices, group_rows, part_devices))
    finally:
        for p in parts:
            release(p.kept_start)


def _kept_rows(members: list[int], parts: list[OpsPart], full_only: bool, op_index: np.ndarray | None,
               devices: list[str], group_rows: list[np.ndarray],
               part_devices: list[np.ndarray]) -> tuple[pd.DataFrame, np.ndarray]:
    """One chunk's kept rows as a raw op table (devices as codes into the run's ``devices``) and each row's
    op row (through ``op_index`` where given)."""
    frames, rows = [], []
    for i, p in zip(members, parts):
        gr, dmap = group_rows[i], part_devices[i]
        take = ~p.kept_alone if full_only and p.kept_alone.any() else slice(None)
        dev = p.kept_device[take]
        frames.append((np.where(dev >= 0, np.append(dmap, -1)[dev], -1), p.kept_start[take],
                       p.kept_duration[take], p.kept_self[take], p.kept_step[take]))
        rows.append(np.append(gr, -1)[p.kept_group[take]])
    cols = [_joined([f[i] for f in frames]) for i in range(5)]
    raw = pd.DataFrame({
        "device": pd.Categorical.from_codes(cols[0], categories=pd.Index(devices)),
        "start_ps": cols[1].astype(np.int64, copy=False), "duration_ps": cols[2].astype(np.int64, copy=False),
        "self_ps": cols[3].astype(np.int64, copy=False), "step": cols[4].astype(np.int32, copy=False)},
        copy=False)
    op_rows = _joined(rows)
    if op_index is not None:
        op_rows = np.append(op_index, -1)[op_rows]
    return raw, op_rows


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays one after another (the array itself when there is one: no copy)."""
    if not arrays:
        return np.zeros(0, dtype=np.int64)
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def merge_parts(parts: list[OpsPart], per_device: bool = False, jobs: int = 1,
                workers: PartWorkers | None = None) -> RunOps:
    """Merge host parts (in the run's host order) into the aggregated op table of all their rows; ``jobs``:
    the processes its per-chunk measures may use; ``workers``: where the parts are held too (they run
    there then)."""
    devices, part_devices = _run_devices(parts)
    groups = _stacked_groups(parts, part_devices)
    ids, by_pos = _op_numbers(groups, per_device)
    stats = _op_stats(groups, ids, by_pos, devices, per_device)
    run = _ranked_by_self_time(parts, stats, ids, per_device, devices, part_devices)
    run.jobs = jobs
    run.workers = workers
    return run


def _run_devices(parts: list[OpsPart]) -> tuple[list[str], list[np.ndarray]]:
    """The run's devices (sorted names: those with rows or groups in any part), and per part its
    device codes -> codes into them (-1: none)."""
    devices = sorted({d for p in parts for d, has in zip(p.devices, p.has_rows) if has}
                     | {p.devices[d] for p in parts for d in p.device if d >= 0})
    dev_index = {d: i for i, d in enumerate(devices)}
    return devices, [np.array([dev_index.get(d, -1) for d in p.devices], dtype=np.int64) for p in parts]


@dataclass
class _StackedGroups:
    """Every part's groups one after another, their codes made the run's: ``columns`` holds pos (first
    row in the run), dev, pid, mod, op, occ (executions), kern (kernels), total, self, tf/tfn (trace flops, rows reporting them),
    tb/tbn (trace bytes), cat_pos (row of the first category; -1: none), part."""

    columns: dict[str, np.ndarray]
    categories: list                      # per group, its first category (None: none)
    modules: list[str]                    # the run's module names (codes in ``mod``)
    op_names: list[str]                   # the run's op names (codes in ``op``)


def _stacked_groups(parts: list[OpsPart], part_devices: list[np.ndarray]) -> _StackedGroups:
    offsets = np.concatenate(([0], np.cumsum([p.n_rows for p in parts]))).astype(np.int64)
    modules: dict[str, int] = {}
    names: dict[str, int] = {}
    cols: dict[str, list] = {k: [] for k in ("pos", "dev", "pid", "mod", "op", "occ", "kern", "total", "self", "tf", "tfn",
                                             "tb", "tbn", "cat_pos", "part")}
    categories: list = []
    for i, (p, dmap) in enumerate(zip(parts, part_devices)):
        mmap = np.array([modules.setdefault(m, len(modules)) for m in p.modules] + [-1], dtype=np.int64)
        omap = np.array([names.setdefault(o, len(names)) for o in p.op_names] + [-1], dtype=np.int64)
        cols["pos"].append(offsets[i] + p.first_row)
        cols["dev"].append(np.where(p.device >= 0, np.append(dmap, -1)[p.device], -1))
        cols["pid"].append(p.program_id)
        cols["mod"].append(mmap[p.module])
        cols["op"].append(omap[p.op])
        cols["occ"].append(p.occurrences)
        cols["kern"].append(p.kernels)
        cols["total"].append(p.total_ps)
        cols["self"].append(p.self_ps)
        cols["tf"].append(p.trace_flops)
        cols["tfn"].append(p.trace_flops_n)
        cols["tb"].append(p.trace_bytes)
        cols["tbn"].append(p.trace_bytes_n)
        cols["cat_pos"].append(np.where(p.category_row >= 0, offsets[i] + p.category_row, -1))
        cols["part"].append(np.full(len(p.first_row), i, dtype=np.int64))
        categories += p.category
    columns = {k: np.concatenate(v) if v else np.zeros(0) for k, v in cols.items()}
    return _StackedGroups(columns, categories, list(modules), list(names))


def _op_numbers(groups: _StackedGroups, per_device: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per stacked group, its op's number (ops numbered in order of first row in the run; -1: a group
    with no device when ``per_device``), and the groups' order by first row."""
    a = groups.columns
    n_entries = len(a["pos"])
    key_parts = ([a["dev"]] if per_device else []) + [a["pid"], a["mod"], a["op"]]
    # An entry with no device has no per-device key (as group_ids leaves out a row with a missing key).
    valid = (a["dev"] >= 0) if per_device else np.ones(n_entries, dtype=bool)
    by_pos = np.argsort(a["pos"], kind="stable")
    ids = np.full(n_entries, -1, dtype=np.int64)
    if valid.any():
        frame = pd.DataFrame({str(k): v[by_pos] for k, v in enumerate(key_parts)})
        codes = frame.groupby(list(frame.columns), sort=False).ngroup().to_numpy()
        ids[by_pos] = codes                              # numbered in order of first row
        ids[~valid] = -1
        if not valid.all():                              # renumber densely over the valid entries, by first row
            kept = by_pos[valid[by_pos]]
            dense, _ = pd.factorize(ids[kept])
            ids[kept] = dense
    return ids, by_pos


def _op_stats(groups: _StackedGroups, ids: np.ndarray, by_pos: np.ndarray, devices: list[str],
              per_device: bool) -> pd.DataFrame:
    """The aggregated op table (as timeline.aggregate.aggregate_ops gives it, in op-number order)."""
    a = groups.columns
    n_ops = int(ids.max()) + 1 if ids.size and (ids >= 0).any() else 0
    has = ids >= 0
    idx = ids[has]
    order = by_pos[has[by_pos]]                          # the numbered groups in the run's row order
    first_entry = np.full(n_ops, -1, dtype=np.int64)
    _, where = np.unique(ids[order], return_index=True)
    first_entry[ids[order][where]] = order[where]
    key_frame: dict[str, pd.Series] = {}
    if per_device:
        key_frame["device"] = pd.Series([devices[d] for d in a["dev"][first_entry]], dtype=object)
    key_frame["program_id"] = pd.Series(a["pid"][first_entry].astype(np.int64))
    key_frame["module"] = pd.Series([groups.modules[m] for m in a["mod"][first_entry]], dtype=object)
    key_frame["op"] = pd.Series([groups.op_names[o] for o in a["op"][first_entry]], dtype=object)
    stats = pd.DataFrame(key_frame)
    stats["category"] = _first_category(ids, a["cat_pos"], groups.categories, n_ops)
    stats["occurrences"] = exact_sums(idx, a["occ"][has], n_ops)
    stats["kernels"] = exact_sums(idx, a["kern"][has], n_ops)
    stats["total_time_ps"] = exact_sums(idx, a["total"][has], n_ops)
    stats["self_time_ps"] = exact_sums(idx, a["self"][has], n_ops)
    stats["devices"] = _distinct_devices(idx, a["dev"][has], n_ops, len(devices))
    for column, n_col, name in (("tf", "tfn", "trace_flops"), ("tb", "tbn", "trace_bytes")):
        stats[name] = _reported_sums(ids, order, a[column], a[n_col], n_ops)
    for column in ("module", "op", "category") + (("device",) if per_device else ()):
        stats[column] = stats[column].astype(str)
    return stats


def _reported_sums(ids: np.ndarray, order: np.ndarray, sums_in: np.ndarray, counts_in: np.ndarray,
                   n_ops: int) -> np.ndarray:
    """Per op, the sum of a figure the trace may not report, added in the run's row order; NaN where
    no row reported it."""
    sums = np.zeros(n_ops)
    counts = np.zeros(n_ops, dtype=np.int64)
    take = order[counts_in[order] > 0]                   # groups that reported, in the run's row order
    np.add.at(sums, ids[take], sums_in[take])
    np.add.at(counts, ids[take], counts_in[take])
    return np.where(counts > 0, sums, np.nan)


def _ranked_by_self_time(parts: list[OpsPart], stats: pd.DataFrame, ids: np.ndarray, per_device: bool,
                         devices: list[str], part_devices: list[np.ndarray]) -> RunOps:
    """The op table sorted by self time (descending, stable), and each part's groups' rows in it."""
    n_ops = len(stats)
    rank_order = stats["self_time_ps"].sort_values(ascending=False, kind="stable").index.to_numpy()
    rank = np.empty(n_ops + 1, dtype=np.int64)
    rank[rank_order] = np.arange(n_ops)
    rank[n_ops] = -1
    entry_rows = rank[ids]                               # -1 stays -1 (the last entry)
    bounds = np.concatenate(([0], np.cumsum([len(p.first_row) for p in parts]))).astype(np.int64)
    group_rows = [entry_rows[bounds[i]:bounds[i + 1]] for i in range(len(parts))]
    stats = stats.iloc[rank_order].reset_index(drop=True)
    return RunOps(parts=parts, per_device=per_device, stats=stats, group_rows=group_rows, devices=devices,
                  part_devices=part_devices)


def _first_category(ids: np.ndarray, cat_pos: np.ndarray, categories: list, n_ops: int) -> pd.Series:
    """Per op, the category of its first row (in the run) that has one, as aggregate._first_present."""
    best = np.full(n_ops, -1, dtype=np.int64)
    entry = np.full(n_ops, -1, dtype=np.int64)
    present = np.flatnonzero((ids >= 0) & (cat_pos >= 0))
    if present.size:
        order = present[np.argsort(cat_pos[present], kind="stable")]
        _, where = np.unique(ids[order], return_index=True)
        entry[ids[order][where]] = order[where]
        best[ids[order][where]] = cat_pos[order][where]
    values = [categories[e] if e >= 0 else None for e in entry]
    if all(v is not None for v in values):
        return pd.Series(pd.Categorical(values)) if values else pd.Series(pd.Categorical([]))
    return pd.Series(pd.Categorical(values))


def _distinct_devices(ids: np.ndarray, dev: np.ndarray, n_ops: int, n_devices: int) -> np.ndarray:
    valid = dev >= 0
    if not valid.any():
        return np.zeros(n_ops, dtype=np.int64)
    pairs = np.unique(ids[valid] * (n_devices + 1) + dev[valid])
    return np.bincount(pairs // (n_devices + 1), minlength=n_ops).astype(np.int64)


def per_step_self_time(run: RunOps, n_ops: int, index: pd.Index) -> pd.Series:
    """timeline.timing.per_step_self_time over all rows: every row in a step is a kept row. The run's
    distinct steps are each host's (found as it was read) added one host at a time: a pod's hosts share their
    steps, so one array of every host's (hosts x steps) and its hash table were most of the analysis' peak."""
    found = np.zeros(0, dtype=np.int32)
    for p in run.parts:          # a spilled part's pages leave once read
        found = np.union1d(found, p.kept_steps)
        release(p.kept_steps)
    return per_step_self_time_in_chunks(functools.partial(run.for_each, full_only=True), index, found)
