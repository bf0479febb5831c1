"""Read trace-event JSON (Chrome trace format, plain or gzipped) into the tables the xplane reader builds.

Two producers matter: XProf's trace viewer export (``trace_viewer`` tool, what
repositories commit as ``*.trace.json.gz`` when the xplane is too large) and
the Perfetto JSON ``jax.profiler.trace(dir, create_perfetto_trace=True)`` writes
beside the xplane (``perfetto_trace.json.gz``). Both are the XSpace converted to
trace events: a process per plane (``/device:TPU:0``, ``/host:CPU``) named by a
``process_name`` metadata event, a thread per line (``thread_name``), complete
events (``ph: "X"``, ``ts``/``dur`` in microseconds) whose ``args`` are the
event's stats as strings. So the mapping follows :mod:`traceview.parsers.xspace.reader`
(the names both share: :mod:`traceview.parsers.tables.conventions`):

* TPU device processes: each ``XLA Ops`` event is an op row (device-clock
  ``device_duration_ps``/``device_offset_ps`` args preferred), its module and
  program id from the enclosing ``XLA Modules`` event ``name(program id)``,
  its category, FLOPs and bytes from the ``hlo_category``, ``model_flops`` (or
  ``flops``) and ``bytes_accessed`` args; a ``Steps`` thread gives the steps;
* GPU device processes: each event on a ``Stream #`` thread is an op row named
  by its ``hlo_op`` arg (else its ``level 0`` framework op, else its name);
* host processes: events with an ``hlo_op`` arg are CPU op rows when no device
  has ops (one device per ``device_ordinal``), everything else goes to the host
  table, and ``step_num`` args are step annotations.

The JSON drops the XSpace's flow ids, so an asynchronous XLA:CPU op is joined
to its ``end: <op>`` completion marker by name: in time order, each op takes
the first marker of its name at or after its start that no earlier op took.

Events are pulled into columns by one list comprehension per field after
``json.loads`` (the decoder's dicts are the only Python object per event);
everything after is numpy/pandas, and every table chunk holds many lines (a
file of 100,000 threads costs what one thread of as many events costs).
Decoding and its bounds (size, values, events, hostile strings) are
:mod:`traceview.parsers.trace_json.text`; ``ts`` and ``dur`` must be JSON
numbers, and events with missing, non-numeric, negative or overflowing times
are dropped with a warning.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from traceview.errors import TraceError
from traceview.parsers.profile import Device
from traceview.parsers.tables.builder import OpChunk, TableBuilder
from traceview.parsers.tables.conventions import (
    DEVICE_PLANE,
    END_MARKER_PREFIX,
    GPU_STREAM_PREFIX,
    INT32_MAX,
    MAX_TIME_PS,
    MODULE_EVENT,
    STEPS_LINE,
    TPU_MODULES_LINE,
    TPU_OPS_LINE,
    device_order,
    program_id_of,
    to_int,
)
from traceview.parsers.tables.gpu_kernels import CUDA_GRAPH_STAT, GRAPH_LAUNCH_STAT
from traceview.parsers.tables.nesting import self_times
from traceview.parsers.tables.steps import step_block
from traceview.parsers.tables.trace_data import TraceData
from traceview.parsers.trace_json.text import event_times, load_events

_PS_PER_US = 1_000_000
# Complete events, and instant events (XProf exports a zero-length event as one).
_TIMED_PHASES = frozenset(("X", "i", "I"))
# Devices one file may name (device processes, or CPU device ordinals): each is a table chunk of its own.
MAX_DEVICES = 4096


def read_trace_json(path: str | Path, host: str | None = None) -> TraceData:
    """Read one trace-event JSON file into a TraceData (tables for one host)."""
    from traceview.parsers.layout import host_of

    events = load_events(path)
    return JsonReader(host or host_of(Path(path)), str(path)).read(events)


def _key(value) -> int | str:
    """A pid/tid as a dictionary key: ints stay, anything else becomes its text."""
    return value if type(value) is int else str(value)


def _numbers(values: list) -> np.ndarray:
    """Numbers (or numeric strings: the args are stats as text) as float64; NaN for anything else."""
    try:
        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
    except OverflowError:  # an integer beyond any float: rare, so only then one value at a time
        return np.array([_number(v) for v in values], dtype=np.float64)


def _number(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return np.nan
    try:
        return float(value)
    except (ValueError, OverflowError):
        return np.nan


def _times_ps(values: list) -> np.ndarray:
    """Microsecond JSON numbers -> int64 picoseconds; -1 for anything missing, not a number or out of range."""
    us = event_times(values)
    with np.errstate(invalid="ignore", over="ignore"):
        ps = np.rint(us * _PS_PER_US)
        good = np.isfinite(ps) & (ps >= 0) & (ps <= MAX_TIME_PS)
    return np.where(good, ps, -1).astype(np.int64)


class _Columns:
    """Complete events as columns; ``group`` numbers each row's (pid, tid) line, a line's rows side by side,
    and ``line`` names it (a Categorical, once the rows are taken for a table)."""

    def __init__(self, start: np.ndarray, duration: np.ndarray, names: list, args: list[dict],
                 group: np.ndarray, line: pd.Categorical | None = None) -> None:
        self.start, self.duration, self.names, self.args = start, duration, names, args
        self.group, self.line = group, line

    def __len__(self) -> int:
        return self.start.size

    def text(self, key: str) -> list:
        """An arg's values as text (None where absent)."""
        return [_text(a.get(key)) for a in self.args]

    def ints(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """An integer arg's values and where it is present and whole."""
        values = [to_int(a.get(key)) for a in self.args]
        has = np.array([v is not None and -(1 << 63) <= v < (1 << 63) for v in values], dtype=bool)
        return np.array([v if h else 0 for v, h in zip(values, has)], dtype=np.int64), has

    def floats(self, *keys: str) -> np.ndarray:
        """The first present of `keys` as a float per event (NaN where none)."""
        out = np.full(len(self), np.nan)
        for key in reversed(keys):
            vals = _numbers([a.get(key) for a in self.args])
            out = np.where(np.isfinite(vals) & (vals >= 0), vals, out)
        return out

    def take(self, rows: np.ndarray) -> _Columns:
        line = None if self.line is None else self.line[rows]
        return _Columns(self.start[rows], self.duration[rows], [self.names[i] for i in rows],
                        [self.args[i] for i in rows], self.group[rows], line)

    def self_ps(self) -> np.ndarray:
        """Each event's self time within its own line (lines are never nested in one another)."""
        if not len(self):
            return self.duration.astype(np.int64, copy=True)
        cuts = np.flatnonzero(np.diff(self.group)) + 1
        if not cuts.size:
            return self_times(self.start, self.duration)
        out = self.duration.astype(np.int64, copy=True)
        lo, hi = np.concatenate([[0], cuts]), np.concatenate([cuts, [len(self)]])
        several = hi - lo > 1   # a line of one event is all self time: only the others are computed
        for a, b in zip(lo[several], hi[several]):
            out[a:b] = self_times(self.start[a:b], self.duration[a:b])
        return out


def _text(value) -> str | None:
    if value is None or isinstance(value, (dict, list)):
        return None
    return value if isinstance(value, str) else str(value)


class _Lines:
    """The complete events of a file grouped by line: any set of lines is taken as one block of rows, so the
    work per line is a few array slices, never a table chunk of its own (a file may hold 100,000 threads)."""

    def __init__(self, cols: _Columns, keys: list[tuple], names: list[str]) -> None:
        self.cols, self.keys, self.names = cols, keys, names
        self.bounds = np.searchsorted(cols.group, np.arange(len(keys) + 1))
        codes, categories = pd.factorize(pd.Series(names, dtype=object))
        self.name_codes, self.categories = codes, pd.Index(categories)

    def size(self, group: int) -> int:
        return int(self.bounds[group + 1] - self.bounds[group])

    def named(self, groups: list[int]) -> dict[str, int]:
        """Line name -> its group (the last of a name wins, as in a dict of names)."""
        return {self.names[g]: g for g in groups}

    def take(self, groups: list[int]) -> _Columns:
        """The rows of these lines, line by line in the order given, each row naming its line."""
        if not groups:
            rows = np.zeros(0, dtype=np.int64)
        else:
            rows = np.concatenate([np.arange(self.bounds[g], self.bounds[g + 1]) for g in groups])
        cols = self.cols.take(rows)
        line = pd.Categorical.from_codes(self.name_codes[cols.group], categories=self.categories)
        cols.line = line.remove_unused_categories()
        return cols


class JsonReader(TableBuilder):
    """The tables of one trace-event file, built as the XSpace reader builds them from its planes."""

    def read(self, events: list[dict]) -> TraceData:
        processes, threads = _names(events)
        lines = self._complete_events(events, threads)
        if not len(lines.cols):
            if self.dropped["events"]:
                raise TraceError(f"{self.path}: no event has a usable time ({self.dropped['events']} dropped: "
                                 "ts/dur missing, not a JSON number, negative or overflowing)")
            raise TraceError(f"{self.path}: the trace holds no events (empty profile)")
        by_process: dict[int | str, list[int]] = {}
        for group, (pid, _tid) in enumerate(lines.keys):
            if lines.size(group):
                by_process.setdefault(pid, []).append(group)
        device_procs = []
        host_groups: list[int] = []
        for pid, groups in by_process.items():
            m = DEVICE_PLANE.match(processes.get(pid, ""))
            if m:
                device_procs.append((m[1], int(m[2]), groups))
            else:
                host_groups += groups
        if len(device_procs) > MAX_DEVICES:
            raise TraceError(f"{self.path}: {len(device_procs):,} device processes, more than the "
                             f"{MAX_DEVICES:,} a trace file is read with")
        for kind, ordinal, groups in sorted(device_procs, key=lambda d: (d[0], d[1])):
            self._device_process(kind, str(ordinal), lines, groups)
        device_has_ops = bool(self.chunks)
        annotations = self._host_processes(lines, host_groups, cpu_ops=not device_has_ops)
        ops = self.ops_frame()
        ops, steps = self.assign_steps(ops, annotations)
        if self.dropped["events"]:
            self.warnings.append(f"{self.path}: dropped {self.dropped['events']} event(s) with missing, negative, "
                                 "overflowing or non-numeric times (corrupt trace?)")
        if ops.empty:
            self.warnings.append(f"{self.path}: no device op events in this trace")
        return TraceData(host=self.host, ops=ops, host_events=self.host_frame(), steps=steps,
                         devices=self.devices, warnings=self.warnings)

    def _complete_events(self, events: list[dict], threads: dict) -> _Lines:
        """Complete ("X") and instant ("i", "I": zero duration) events with good times, by line in order of
        first appearance, each line's in file order; events with bad times are counted."""
        phases = [ph if type(ph := e.get("ph")) is str else "" for e in events]
        complete = [e for e, ph in zip(events, phases) if ph in _TIMED_PHASES]
        other = sum(1 for ph in phases if ph in ("B", "E"))
        if other:
            self.warnings.append(f"{self.path}: ignored {other} begin/end (ph B/E) event(s): only complete "
                                 "(ph X) events are read")
        start = _times_ps([e.get("ts") for e in complete])
        duration = _times_ps([e.get("dur", 0) if e.get("ph") == "X" else 0 for e in complete])
        good = (start >= 0) & (duration >= 0)
        good &= start + np.where(good, duration, 0) <= MAX_TIME_PS
        self.dropped["events"] += int(good.size - np.count_nonzero(good))
        codes, uniques = pd.factorize(pd.Series([(_key(e.get("pid")), _key(e.get("tid"))) for e in complete],
                                                dtype=object))
        rows = np.flatnonzero(good)
        rows = rows[np.argsort(codes[rows], kind="stable")]
        cols = _Columns(start[rows], duration[rows], [_text(complete[i].get("name")) or "" for i in rows],
                        [a if type(a := complete[i].get("args")) is dict else {} for i in rows],
                        codes[rows].astype(np.int64))
        keys = list(uniques)
        return _Lines(cols, keys, [threads.get(k, str(k[1])) for k in keys])

    # --- device processes

    def _device_process(self, kind: str, ordinal: str, lines: _Lines, groups: list[int]) -> None:
        dev = Device(id=f"{self.host}/{kind}:{ordinal}", host=self.host, kind=kind,
                     vendor="Google" if kind == "TPU" else None)
        self.devices.append(dev)
        named = lines.named(groups)
        if kind == "TPU":
            modules = named.get(TPU_MODULES_LINE)
            mod_exec = _module_executions(lines.take([modules])) if modules is not None else None
            if mod_exec is not None:
                self.module_execs[dev.id] = mod_exec
            if TPU_OPS_LINE in named:
                self.chunks.append(self._tpu_ops(dev.id, lines.take([named[TPU_OPS_LINE]]), mod_exec))
        else:
            streams = [g for g in groups if lines.names[g].startswith(GPU_STREAM_PREFIX)]
            if streams:
                cols = lines.take(streams)
                chunk = _stat_rows(dev.id, cols)
                self._kernels(chunk, cols)
                self.chunks.append(chunk)
        if STEPS_LINE in named:
            cols = lines.take([named[STEPS_LINE]])
            numbers = [to_int(n) for n in cols.names]
            step = np.array([n if n is not None and 0 <= n < INT32_MAX else -1 for n in numbers], dtype=np.int64)
            unnamed = step < 0
            step[unnamed] = np.flatnonzero(unnamed)  # no number: the event's position on the line
            self.step_rows.append(step_block(dev.id, step, cols.start, cols.duration, "steps_line"))

    def _kernels(self, chunk: OpChunk, cols: _Columns) -> None:
        """GPU kernels as op executions, command buffers read through (parsers.tables.gpu_kernels): a kernel is
        known by its event name, a CUDA graph launch by its correlation id."""
        kernel, names = pd.factorize(pd.Series(cols.names, dtype=object))
        chunk.extra["kernel"] = kernel.astype(np.int64)
        in_graph = cols.ints(CUDA_GRAPH_STAT)[1]
        if in_graph.any():
            launch, has_launch = cols.ints(GRAPH_LAUNCH_STAT)
            chunk.extra["graph_launch"] = np.where(in_graph, np.where(has_launch, launch, 0), -1)
        stream = np.asarray(chunk.line.codes) if isinstance(chunk.line, pd.Categorical) else None
        self.kernels.add(chunk, [str(n) for n in names], lambda codes: codes, stream)

    def _tpu_ops(self, device: str, cols: _Columns, mod_exec: tuple | None) -> OpChunk:
        dev_dur, has_dur = cols.ints("device_duration_ps")
        dev_off, has_off = cols.ints("device_offset_ps")
        bad_dur = has_dur & ((dev_dur < 0) | (dev_dur > MAX_TIME_PS))
        bad_off = has_off & ((dev_off < 0) | (dev_off > MAX_TIME_PS))
        self.dropped["device_times"] += int(bad_dur.sum() + bad_off.sum())
        duration = np.where(has_dur & ~bad_dur, dev_dur, cols.duration)
        has_off &= ~bad_off
        nest_start = dev_off if has_off.all() else cols.start
        pid = np.array([program_id_of(p) for p in cols.text("program_id")], dtype=np.int64)
        module = np.full(len(cols), "", dtype=object)
        if mod_exec is not None:
            m_start, m_end, m_names, m_pids = mod_exec
            k = np.searchsorted(m_start, cols.start, side="right") - 1
            inside = (k >= 0) & (cols.start < m_end[np.maximum(k, 0)])
            module[inside] = m_names[k[inside]]
            missing = (pid == -1) & inside
            pid[missing] = m_pids[k[missing]]
        return OpChunk(
            device=device, line=TPU_OPS_LINE, start=cols.start, duration=duration,
            self_ps=self_times(nest_start, duration),
            op=pd.Categorical(cols.names), module=pd.Categorical(module),
            category=pd.Categorical([c or "" for c in cols.text("hlo_category")]),
            program_id=pid, flops=cols.floats("model_flops", "flops"), bytes_=cols.floats("bytes_accessed"),
        )

    # --- host processes

    def _host_processes(self, lines: _Lines, groups: list[int], cpu_ops: bool):
        """Host events; CPU op rows when no device has ops; the step annotations as (start, end, step)."""
        if not groups:
            return None
        cols = lines.take(groups)
        keep_host = np.ones(len(cols), dtype=bool)
        if cpu_ops:
            hlo_op = cols.text("hlo_op")
            is_op = np.array([h is not None for h in hlo_op], dtype=bool)
            if is_op.any():
                keep_host = ~is_op
                self._cpu_ops(cols, hlo_op, is_op)
        step_num, has_step = cols.ints("step_num")
        has_step &= (step_num >= 0) & (step_num < INT32_MAX)
        rows = np.flatnonzero(keep_host)
        assert cols.line is not None   # taken from the lines: each row names its own
        self.host_chunks.append(dict(thread=cols.line[rows], start=cols.start[rows], duration=cols.duration[rows],
                                     name=pd.Categorical([cols.names[i] for i in rows])))
        if not has_step.any():
            return None
        a_start, a_end = cols.start[has_step], cols.start[has_step] + cols.duration[has_step]
        order = np.argsort(a_start, kind="stable")
        return a_start[order], a_end[order], step_num[has_step][order]

    def _cpu_ops(self, cols: _Columns, hlo_op: list, is_op: np.ndarray) -> None:
        """Op rows of the host events with an ``hlo_op`` arg: one device per ``device_ordinal``."""
        cpu_device = f"{self.host}/CPU"
        ordinal, has_ordinal = cols.ints("device_ordinal")
        extension = _extension_to_marker(cols, hlo_op, is_op, _end_markers(cols))
        ordinals = np.unique(ordinal[is_op & has_ordinal])
        if ordinals.size > MAX_DEVICES:
            raise TraceError(f"{self.path}: {ordinals.size:,} CPU device ordinals, more than the "
                             f"{MAX_DEVICES:,} a trace file is read with")
        groups = [(f"{cpu_device}:{k}", is_op & has_ordinal & (ordinal == k)) for k in ordinals]
        if (is_op & ~has_ordinal).any():
            groups.append((cpu_device, is_op & ~has_ordinal))
        for device, rows in groups:
            chunk = _stat_rows(device, cols.take(np.flatnonzero(rows)))
            chunk.duration = chunk.duration + extension[rows]
            chunk.self_ps = chunk.self_ps + extension[rows]
            self.chunks.append(chunk)
        for device in sorted((d for d, _ in groups), key=device_order):
            self.devices.append(Device(id=device, host=self.host, kind="CPU"))


def _names(events: list[dict]) -> tuple[dict, dict]:
    """pid -> process name and (pid, tid) -> thread name, from the metadata ("M") events."""
    processes: dict = {}
    threads: dict = {}
    for e in events:
        if e.get("ph") != "M":
            continue
        args = e.get("args")
        name = _text(args.get("name")) if isinstance(args, dict) else None
        if name is None:
            continue
        if e.get("name") == "process_name":
            processes[_key(e.get("pid"))] = name
        elif e.get("name") == "thread_name":
            threads[(_key(e.get("pid")), _key(e.get("tid")))] = name
    return processes, threads


def _module_executions(cols: _Columns) -> tuple:
    """The module executions (start, end, names, program ids) sorted by start, from ``name(program id)``."""
    names, pids = [], []
    for n in cols.names:
        match = MODULE_EVENT.match(n)
        names.append(match["name"] if match else n)
        pids.append(program_id_of(match["pid"]) if match else -1)
    order = np.argsort(cols.start, kind="stable")
    start = cols.start[order]
    return (start, start + cols.duration[order], np.array(names, dtype=object)[order],
            np.array(pids, dtype=np.int64)[order])


def _stat_rows(device: str, cols: _Columns) -> OpChunk:
    """Op rows named by hlo_op args (else the framework op of ``level 0``, else the event name), each on its
    own line (``cols.line``)."""
    hlo_op = cols.text("hlo_op")
    framework = cols.text("level 0")
    op = [h if h is not None else (f.split("#", 1)[0] if f is not None else n)
          for h, f, n in zip(hlo_op, framework, cols.names)]
    pid, has_pid = cols.ints("program_id")
    run_id, _ = cols.ints("run_id")
    n = len(cols)
    assert cols.line is not None
    chunk = OpChunk(
        device=device, line=cols.line, start=cols.start, duration=cols.duration, self_ps=cols.self_ps(),
        op=pd.Categorical(op), module=pd.Categorical([m or "" for m in cols.text("hlo_module")]),
        category=pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), [""]),
        program_id=np.where(has_pid, pid, -1), flops=np.full(n, np.nan), bytes_=np.full(n, np.nan),
    )
    chunk.extra["run_id"] = run_id
    return chunk


def _end_markers(cols: _Columns) -> dict[str, np.ndarray]:
    """Op name -> sorted end times of its ``end: <op>`` markers, over every host thread."""
    rows = [i for i, n in enumerate(cols.names) if n.startswith(END_MARKER_PREFIX)]
    if not rows:
        return {}
    idx = np.array(rows)
    ends = cols.start[idx] + cols.duration[idx]
    names = pd.Series([cols.names[i][len(END_MARKER_PREFIX):] for i in rows])
    return {name: np.sort(ends[positions]) for name, positions in names.groupby(names, sort=False).indices.items()}


def _extension_to_marker(cols: _Columns, hlo_op: list, is_op: np.ndarray,
                         op_ends: dict[str, np.ndarray]) -> np.ndarray:
    """Per event, how far its ``end:`` marker lies past its own end (0 when none; see the module doc); the
    markers are taken greedily per thread and op name."""
    extension = np.zeros(len(cols), dtype=np.int64)
    if not op_ends:
        return extension
    rows = np.flatnonzero(is_op)
    keys = pd.Series(list(zip(cols.group[rows].tolist(), [hlo_op[i] for i in rows])), dtype=object)
    own_end = cols.start + cols.duration
    for (_line, name), positions in keys.groupby(keys, sort=False).indices.items():
        ends = op_ends.get(name)
        if ends is None:
            continue
        idx = rows[positions]
        idx = idx[np.argsort(cols.start[idx], kind="stable")]
        # The first marker at or after each start, no marker taken twice (greedy in time order).
        first = np.searchsorted(ends, cols.start[idx], side="left")
        i = np.arange(first.size)
        taken = np.maximum.accumulate(first - i) + i
        ok = taken < ends.size
        idx, taken = idx[ok], taken[ok]
        extension[idx] = np.maximum(ends[taken] - own_end[idx], 0)
    return extension
