"""Read trace-event JSON (Chrome trace format, plain or gzipped) into the tables the xplane reader builds.

Two producers matter: XProf's trace viewer export (``trace_viewer`` tool, what
repositories commit as ``*.trace.json.gz`` when the xplane is too large) and
the Perfetto JSON ``jax.profiler.trace(dir, create_perfetto_trace=True)`` writes
beside the xplane (``perfetto_trace.json.gz``). Both are the XSpace converted to
trace events: a process per plane (``/device:TPU:0``, ``/host:CPU``) named by a
``process_name`` metadata event, a thread per line (``thread_name``), complete
events (``ph: "X"``, ``ts``/``dur`` in microseconds) whose ``args`` are the
event's stats as strings. So the mapping follows :mod:`traceview.parsers.xplane`:

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
everything after is numpy/pandas. Bounds: the decompressed text is at most
:data:`JSON_LIMIT` bytes, nesting deeper than the decoder allows is a one-line
error, and events with missing, negative or overflowing times are dropped with
a warning.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from traceview.errors import TraceError
from traceview.parsers.compressed import read_limited
from traceview.parsers.profile import Device
from traceview.parsers.xplane import (
    _GPU_STREAM_PREFIX,
    _MODULE_EVENT,
    _STEPS_LINE,
    _TPU_MODULES_LINE,
    _TPU_OPS_LINE,
    END_MARKER_PREFIX,
    MAX_TIME_PS,
    TraceData,
    _Chunk,
    _device_order,
    _pid,
    _Reader,
    _step_block,
    _to_int,
    self_times,
)

# Decompressed JSON text read at most: the decoded events take several times this in memory.
JSON_LIMIT = 1 << 30
_DEVICE_PROCESS = re.compile(r"^/device:(TPU|GPU):(\d+)$")
_INT32_MAX = (1 << 31) - 1
_PS_PER_US = 1_000_000
# Complete events, and instant events (XProf exports a zero-length event as one).
_TIMED_PHASES = frozenset(("X", "i", "I"))


def read_trace_json(path: str | Path, host: str | None = None) -> TraceData:
    """Read one trace-event JSON file into a TraceData (tables for one host)."""
    from traceview.parsers.discover import host_of

    text = read_limited(path, limit=JSON_LIMIT, error=TraceError, what="trace JSON")
    events = _trace_events(_decode(text, path), path)
    return _JsonReader(host or host_of(Path(path)), str(path)).read(events)


def _decode(text: bytes, path: object):
    if not text.strip():
        raise TraceError(f"{path}: file is empty")
    try:
        return json.loads(text)
    except RecursionError:
        raise TraceError(f"{path}: not readable trace JSON (nested too deeply)") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise TraceError(f"{path}: not readable trace JSON ({exc})") from None


def _trace_events(doc, path: object) -> list[dict]:
    """The event list of the JSON Object format (``{"traceEvents": [...]}``) or the JSON Array format."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TraceError(f"{path}: not a trace-event JSON file (no traceEvents list)")
    return [e for e in events if type(e) is dict]


def _key(value) -> int | str:
    """A pid/tid as a dictionary key: ints stay, anything else becomes its text."""
    return value if type(value) is int else str(value)


def _numbers(values: list) -> np.ndarray:
    """Numbers (or numeric strings) as float64; NaN for anything else."""
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
    """Microsecond numbers -> int64 picoseconds; -1 for anything missing, not a number or out of range."""
    us = _numbers(values)
    with np.errstate(invalid="ignore", over="ignore"):
        ps = np.rint(us * _PS_PER_US)
        good = np.isfinite(ps) & (ps >= 0) & (ps <= MAX_TIME_PS)
    return np.where(good, ps, -1).astype(np.int64)


class _Columns:
    """The complete events of one group (a thread or a process) as columns."""

    def __init__(self, start: np.ndarray, duration: np.ndarray, names: list, args: list[dict]) -> None:
        self.start, self.duration, self.names, self.args = start, duration, names, args

    def __len__(self) -> int:
        return self.start.size

    def text(self, key: str) -> list:
        """An arg's values as text (None where absent)."""
        return [_text(a.get(key)) for a in self.args]

    def ints(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """An integer arg's values and where it is present and whole."""
        values = [_to_int(a.get(key)) for a in self.args]
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
        return _Columns(self.start[rows], self.duration[rows], [self.names[i] for i in rows],
                        [self.args[i] for i in rows])


def _text(value) -> str | None:
    if value is None or isinstance(value, (dict, list)):
        return None
    return value if isinstance(value, str) else str(value)


class _JsonReader(_Reader):
    """The xplane reader's table building, fed from trace events instead of XPlanes."""

    def __init__(self, host: str, path: str) -> None:
        super().__init__(SimpleNamespace(errors=[], warnings=[]), host, path)

    def read(self, events: list[dict]) -> TraceData:
        processes, threads = _names(events)
        groups = self._complete_events(events)
        if not groups:
            raise TraceError(f"{self.path}: the trace holds no events (empty profile)")
        by_process: dict[int | str, dict[int | str, _Columns]] = {}
        for (pid, tid), cols in groups.items():
            by_process.setdefault(pid, {})[tid] = cols
        device_procs = []
        host_procs = []
        for pid, lines in by_process.items():
            m = _DEVICE_PROCESS.match(processes.get(pid, ""))
            if m:
                device_procs.append((m[1], int(m[2]), lines, pid))
            else:
                host_procs.append((pid, lines))
        for kind, ordinal, lines, pid in sorted(device_procs, key=lambda d: (d[0], d[1])):
            named = {threads.get((pid, tid), str(tid)): cols for tid, cols in lines.items()}
            self._device_process(kind, str(ordinal), named)
        device_has_ops = bool(self.chunks)
        annotations = self._host_processes(host_procs, threads, cpu_ops=not device_has_ops)
        ops = self._ops_frame()
        ops, steps = self._assign_steps(ops, annotations)
        if self.dropped["events"]:
            self.warnings.append(f"{self.path}: dropped {self.dropped['events']} event(s) with missing, negative "
                                 "or overflowing times (corrupt trace?)")
        if ops.empty:
            self.warnings.append(f"{self.path}: no device op events in this trace")
        return TraceData(host=self.host, ops=ops, host_events=self._host_frame(), steps=steps,
                         devices=self.devices, warnings=self.warnings)

    def _complete_events(self, events: list[dict]) -> dict[tuple, _Columns]:
        """Complete ("X") and instant ("i", "I": zero duration) events grouped by (pid, tid), in file order;
        events with bad times are counted."""
        phases = [ph if type(ph := e.get("ph")) is str else "" for e in events]
        complete = [e for e, ph in zip(events, phases) if ph in _TIMED_PHASES]
        other = sum(1 for ph in phases if ph in ("B", "E"))
        if other:
            self.warnings.append(f"{self.path}: ignored {other} begin/end (ph B/E) event(s): only complete "
                                 "(ph X) events are read")
        if not complete:
            return {}
        start = _times_ps([e.get("ts") for e in complete])
        duration = _times_ps([e.get("dur", 0) if e.get("ph") == "X" else 0 for e in complete])
        good = (start >= 0) & (duration >= 0)
        good &= start + np.where(good, duration, 0) <= MAX_TIME_PS
        self.dropped["events"] += int(good.size - np.count_nonzero(good))
        keys = pd.factorize(pd.Series([(_key(e.get("pid")), _key(e.get("tid"))) for e in complete],
                                      dtype=object))
        codes, uniques = keys
        names = [_text(e.get("name")) or "" for e in complete]
        args = [a if type(a := e.get("args")) is dict else {} for e in complete]
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(uniques) + 1))
        out = {}
        for k, key in enumerate(uniques):
            rows = order[bounds[k]:bounds[k + 1]]
            rows = rows[good[rows]]
            if rows.size:
                out[key] = _Columns(start[rows], duration[rows], [names[i] for i in rows], [args[i] for i in rows])
        return out

    # --- device processes

    def _device_process(self, kind: str, ordinal: str, lines: dict[str, _Columns]) -> None:
        dev = Device(id=f"{self.host}/{kind}:{ordinal}", host=self.host, kind=kind,
                     vendor="Google" if kind == "TPU" else None)
        self.devices.append(dev)
        if kind == "TPU":
            modules = lines.get(_TPU_MODULES_LINE)
            mod_exec = _module_executions(modules) if modules is not None else None
            if mod_exec is not None:
                self.module_execs[dev.id] = mod_exec
            if _TPU_OPS_LINE in lines:
                self.chunks.append(self._tpu_ops(dev.id, lines[_TPU_OPS_LINE], mod_exec))
        else:
            for name, cols in lines.items():
                if name.startswith(_GPU_STREAM_PREFIX):
                    self.chunks.append(_stat_rows(dev.id, name, cols))
        if _STEPS_LINE in lines:
            cols = lines[_STEPS_LINE]
            numbers = [_to_int(n) for n in cols.names]
            step = np.array([n if n is not None and 0 <= n < _INT32_MAX else -1 for n in numbers], dtype=np.int64)
            unnamed = step < 0
            step[unnamed] = np.flatnonzero(unnamed)  # no number: the event's position on the line
            self.step_rows.append(_step_block(dev.id, step, cols.start, cols.duration, "steps_line"))

    def _tpu_ops(self, device: str, cols: _Columns, mod_exec: tuple | None) -> _Chunk:
        dev_dur, has_dur = cols.ints("device_duration_ps")
        dev_off, has_off = cols.ints("device_offset_ps")
        bad_dur = has_dur & ((dev_dur < 0) | (dev_dur > MAX_TIME_PS))
        bad_off = has_off & ((dev_off < 0) | (dev_off > MAX_TIME_PS))
        self.dropped["device_times"] += int(bad_dur.sum() + bad_off.sum())
        duration = np.where(has_dur & ~bad_dur, dev_dur, cols.duration)
        has_off &= ~bad_off
        nest_start = dev_off if has_off.all() else cols.start
        pid = np.array([_pid(p) for p in cols.text("program_id")], dtype=np.int64)
        module = np.full(len(cols), "", dtype=object)
        if mod_exec is not None:
            m_start, m_end, m_names, m_pids = mod_exec
            k = np.searchsorted(m_start, cols.start, side="right") - 1
            inside = (k >= 0) & (cols.start < m_end[np.maximum(k, 0)])
            module[inside] = m_names[k[inside]]
            missing = (pid == -1) & inside
            pid[missing] = m_pids[k[missing]]
        return _Chunk(
            device=device, line=_TPU_OPS_LINE, start=cols.start, duration=duration,
            self_ps=self_times(nest_start, duration),
            op=pd.Categorical(cols.names), module=pd.Categorical(module),
            category=pd.Categorical([c or "" for c in cols.text("hlo_category")]),
            program_id=pid, flops=cols.floats("model_flops", "flops"), bytes_=cols.floats("bytes_accessed"),
        )

    # --- host processes

    def _host_processes(self, procs: list, threads: dict, cpu_ops: bool):
        """Host events; CPU op rows when no device has ops; the step annotations as (start, end, step)."""
        ann: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        cpu_device = f"{self.host}/CPU"
        cpu_devices: set[str] = set()
        lines = [(threads.get((pid, tid), str(tid)), cols) for pid, by_tid in procs for tid, cols in by_tid.items()]
        op_ends = _end_markers([cols for _, cols in lines]) if cpu_ops else None
        for name, cols in lines:
            keep_host = np.ones(len(cols), dtype=bool)
            if cpu_ops:
                hlo_op = cols.text("hlo_op")
                is_op = np.array([h is not None for h in hlo_op], dtype=bool)
                if is_op.any():
                    ordinal, has_ordinal = cols.ints("device_ordinal")
                    extension = _extension_to_marker(cols, hlo_op, is_op, op_ends)
                    groups = [(f"{cpu_device}:{k}", is_op & has_ordinal & (ordinal == k))
                              for k in np.unique(ordinal[is_op & has_ordinal])]
                    if (is_op & ~has_ordinal).any():
                        groups.append((cpu_device, is_op & ~has_ordinal))
                    for device, rows in groups:
                        chunk = _stat_rows(device, name, cols.take(np.flatnonzero(rows)))
                        chunk.duration = chunk.duration + extension[rows]
                        chunk.self_ps = chunk.self_ps + extension[rows]
                        self.chunks.append(chunk)
                        cpu_devices.add(device)
                    keep_host = ~is_op
            step_num, has_step = cols.ints("step_num")
            has_step &= (step_num >= 0) & (step_num < _INT32_MAX)
            if has_step.any():
                ann.append((cols.start[has_step], cols.start[has_step] + cols.duration[has_step], step_num[has_step]))
            rows = np.flatnonzero(keep_host)
            self.host_chunks.append(dict(thread=name, start=cols.start[rows], duration=cols.duration[rows],
                                         name=pd.Categorical([cols.names[i] for i in rows])))
        for device in sorted(cpu_devices, key=_device_order):
            self.devices.append(Device(id=device, host=self.host, kind="CPU"))
        if not ann:
            return None
        a_start, a_end, a_step = (np.concatenate(x) for x in zip(*ann))
        order = np.argsort(a_start, kind="stable")
        return a_start[order], a_end[order], a_step[order]


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
        match = _MODULE_EVENT.match(n)
        names.append(match["name"] if match else n)
        pids.append(_pid(match["pid"]) if match else -1)
    order = np.argsort(cols.start, kind="stable")
    start = cols.start[order]
    return (start, start + cols.duration[order], np.array(names, dtype=object)[order],
            np.array(pids, dtype=np.int64)[order])


def _stat_rows(device: str, line: str, cols: _Columns) -> _Chunk:
    """Op rows named by hlo_op args (else the framework op of ``level 0``, else the event name)."""
    hlo_op = cols.text("hlo_op")
    framework = cols.text("level 0")
    op = [h if h is not None else (f.split("#", 1)[0] if f is not None else n)
          for h, f, n in zip(hlo_op, framework, cols.names)]
    pid, has_pid = cols.ints("program_id")
    run_id, _ = cols.ints("run_id")
    n = len(cols)
    chunk = _Chunk(
        device=device, line=line, start=cols.start, duration=cols.duration,
        self_ps=self_times(cols.start, cols.duration),
        op=pd.Categorical(op), module=pd.Categorical([m or "" for m in cols.text("hlo_module")]),
        category=pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), [""]),
        program_id=np.where(has_pid, pid, -1), flops=np.full(n, np.nan), bytes_=np.full(n, np.nan),
    )
    chunk.extra["run_id"] = run_id
    return chunk


def _end_markers(lines: list[_Columns]) -> dict[str, np.ndarray]:
    """Op name -> sorted end times of its ``end: <op>`` markers, over every host thread."""
    found: dict[str, list[np.ndarray]] = {}
    for cols in lines:
        rows = [i for i, n in enumerate(cols.names) if n.startswith(END_MARKER_PREFIX)]
        if not rows:
            continue
        idx = np.array(rows)
        ends = cols.start[idx] + cols.duration[idx]
        names = pd.Series([cols.names[i][len(END_MARKER_PREFIX):] for i in rows])
        for name, positions in names.groupby(names, sort=False).indices.items():
            found.setdefault(name, []).append(ends[positions])
    return {name: np.sort(np.concatenate(parts)) for name, parts in found.items()}


def _extension_to_marker(cols: _Columns, hlo_op: list, is_op: np.ndarray,
                         op_ends: dict[str, np.ndarray] | None) -> np.ndarray:
    """Per event, how far its ``end:`` marker lies past its own end (0 when none; see the module doc)."""
    extension = np.zeros(len(cols), dtype=np.int64)
    if not op_ends:
        return extension
    rows = np.flatnonzero(is_op)
    names = pd.Series([hlo_op[i] for i in rows])
    own_end = cols.start + cols.duration
    for name, positions in names.groupby(names, sort=False).indices.items():
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

