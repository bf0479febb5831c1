"""When each device was busy, and each device's part of each step: one host's op table reduced for the
idle causes and the stragglers (``traceview.advice``), merged across hosts.

A host's op table (hundreds of thousands of executions) is reduced where it is read, as
:mod:`traceview.hostreduce.host_ops` reduces it for the op tables, to an :class:`Activity`:

* per device (in order of first appearance): the union of its op intervals (disjoint, sorted; usually far
  fewer than its ops), its span (first start, last end, zero-length ops included), the host of its first
  row, and its collectives' start times and names (sorted by start, ties in row order);
* the distinct (host, line) pairs the ops ran on (the threads that are device op lines, not host threads);
* per (step, device, host): the first start and last end of the rows in that step.

:func:`merge_activity` merges the hosts' activities in host order: every figure equals the one a single
pass over all rows gives (unions of unions, minima of minima, stable merges of sorted lists), so the
advice reads no op execution again and holds none.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from traceview.hostreduce.host_threads import HostSets, host_threads
from traceview.hostreduce.pages import release
from traceview.timeline.grouping import column_codes, matches
from traceview.timeline.intervals import STEP_ROWS, union, union_in_steps
from traceview.timeline.lateness import PerStep, SpanFold, SpanSummary, folded_sums, summarize
from traceview.timeline.packed_frame import Table, as_frame
from traceview.timeline.step_parts import StepPart

COLLECTIVE = re.compile(
    r"all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast"
    r"|\bsend\b|\brecv\b|nccl|rccl|AllReduce|AllGather|ReduceScatter|AllToAll", re.IGNORECASE)

SPAN_COLUMNS = ["step", "device", "host", "start", "end"]
_NONE = np.empty(0, dtype=np.int64)


@dataclass
class DeviceActivity:
    """One device's busy intervals (their union), span, host, and collectives (start, name; by start)."""

    busy: tuple[np.ndarray, np.ndarray]
    first_ps: int
    last_ps: int
    host: str
    collective_starts: np.ndarray
    collective_names: np.ndarray


@dataclass
class Activity:
    """An op table's activity (see the module docstring). ``n_rows``: its executions."""

    n_rows: int = 0
    devices: dict[str, DeviceActivity] = field(default_factory=dict)
    op_lines: list[tuple[str, str]] = field(default_factory=list)
    # packed (its columns only) once a pod's reading moved them to disk (hostreduce.spill)
    step_spans: Table = field(default_factory=lambda: pd.DataFrame(columns=SPAN_COLUMNS))
    # a run's hosts' step spans, one table each, when no device is in two hosts' files (``step_spans`` is then
    # left empty: a pod's spans are never one table of every (step, device)); None otherwise
    host_spans: list[Table] | None = None
    # one host's step spans summed up where it was read (None: not yet); a run's, one per ``host_spans`` table
    span_summary: SpanSummary | None = None
    # one host's step table reduced where it was read (timeline.step_parts; None: not reduced)
    step_times: StepPart | None = None
    host_summaries: list[SpanSummary] | None = None
    # the stragglers' per-step sums over every ``host_spans`` table, per who (device, host), folded as the hosts
    # arrived or from their summaries (timeline.lateness.SpanFold); None: the stragglers sum up the tables
    span_sums: dict[str, PerStep] | None = None
    # the union of every device's busy intervals (where any device runs an op)
    busy_union: tuple[np.ndarray, np.ndarray] = field(default_factory=lambda: (_NONE, _NONE))
    # per host, its threads' interval sets (hostreduce.host_threads), cut where the host was read; None: not
    # cut (the idle causes then cut the run's host events themselves)
    hosts: dict[str, HostSets] | None = None

    def span_tables(self) -> list[Table]:
        """The step spans: one table per host where they were kept apart, else the one table."""
        return self.host_spans if self.host_spans is not None else [self.step_spans]


def with_host_threads(activity: Activity, host_events: pd.DataFrame) -> Activity:
    """The activity of one host's op table with that host's threads cut (``host_events``: the same file's),
    and its step spans summed up for the stragglers: both where the host is read, not in the parent."""
    return dataclasses.replace(activity, hosts=host_threads(activity.op_lines, host_events),
                               span_summary=summarize(as_frame(activity.step_spans)))


def reduce_activity(ops: pd.DataFrame) -> Activity:
    """One op table (``parsers.profile.OP_COLUMNS``: host, device, line, op, step, start_ps, duration_ps)."""
    out = Activity(n_rows=len(ops))
    if ops.empty:
        return out
    starts = ops["start_ps"].to_numpy(dtype=np.int64)
    durations = ops["duration_ps"].to_numpy(dtype=np.int64)
    host_codes, host_names = column_codes(ops["host"])
    hosts = np.array([str(h) for h in host_names] + ["nan"], dtype=object)   # code -1: a missing host
    is_collective = matches(ops["op"], COLLECTIVE)
    op_codes, op_names = column_codes(ops["op"])
    op_text = np.array([str(v) for v in op_names] + ["nan"], dtype=object)
    for name, rows in _device_rows(ops["device"]):
        if isinstance(rows, slice):
            collective = np.flatnonzero(is_collective[rows]) + rows.start
            first = rows.start
        else:
            collective = rows[is_collective[rows]]
            first = rows[0]
        collective = collective[np.argsort(starts[collective], kind="stable")]
        s, d = starts[rows], durations[rows]
        busy = union_in_steps(s, d)        # a device's rows in time order (the reader's): no column of ends
        out.devices[str(name)] = DeviceActivity(
            busy=busy if busy is not None else union(s, s + d), first_ps=int(s.min()), last_ps=_last_end(s, d),
            host=str(hosts[host_codes[first]]), collective_starts=starts[collective],
            collective_names=op_text[op_codes[collective]])
    out.busy_union = _union_of_unions([d.busy for d in out.devices.values()])
    out.op_lines = _op_lines(ops)
    out.step_spans = _step_spans(ops, starts, durations)
    return out


def _last_end(starts: np.ndarray, durations: np.ndarray) -> int:
    """The largest start + duration, in steps (no column of ends)."""
    return max(int((starts[a:a + STEP_ROWS] + durations[a:a + STEP_ROWS]).max()) for a in range(0, starts.size, STEP_ROWS))


def _device_rows(column: pd.Series) -> list[tuple[object, slice | np.ndarray]]:
    """Each device (in order of first appearance; a missing one has no rows) and its rows in table order:
    a slice where its rows lie together (the reader's tables are grouped by device), else their indices."""
    codes, names = column_codes(column)
    if codes.size:
        runs = np.flatnonzero(codes[1:] != codes[:-1]) + 1
        run_starts = np.concatenate(([0], runs))
        run_codes = codes[run_starts]
        if np.unique(run_codes).size == run_codes.size:   # each device's rows in one run
            run_ends = np.append(run_starts[1:], codes.size)
            return [(names[c], slice(int(lo), int(hi)))
                    for c, lo, hi in zip(run_codes.tolist(), run_starts.tolist(), run_ends.tolist()) if c >= 0]
    codes, device_names = pd.factorize(column)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(device_names) + 1))
    return [(name, order[bounds[k]:bounds[k + 1]]) for k, name in enumerate(device_names)]


def _op_lines(ops: pd.DataFrame) -> list[tuple[str, str]]:
    """The distinct (host, line) pairs of the rows, in order of first appearance (a missing name: ``nan``)."""
    host_codes, host_text = _codes_and_text(ops["host"])
    line_codes, line_text = _codes_and_text(ops["line"])
    if not host_codes.size:
        return []
    change = host_codes[1:] != host_codes[:-1]             # rows of a line lie together: only the runs count
    change |= line_codes[1:] != line_codes[:-1]
    runs = np.concatenate(([0], np.flatnonzero(change) + 1))
    width = len(line_text)                                  # codes + 1 (-1: missing) below it
    pair = (host_codes[runs].astype(np.int64) + 1) * width + line_codes[runs] + 1
    pairs = pd.unique(pair)                                 # in order of first appearance
    return list(dict.fromkeys((str(host_text[h]), str(line_text[k]))
                              for h, k in zip((pairs // width - 1).tolist(), (pairs % width - 1).tolist())))


def _step_spans(ops: pd.DataFrame, starts: np.ndarray, durations: np.ndarray) -> pd.DataFrame:
    """Per (step, device, host) of the rows in a step: their first start and last end (grouped by codes,
    named after)."""
    if "step" not in ops.columns:
        return pd.DataFrame(columns=SPAN_COLUMNS)
    inside = np.flatnonzero(ops["step"].to_numpy() >= 0)
    if not inside.size:
        return pd.DataFrame(columns=SPAN_COLUMNS)
    d_codes, d_names = _codes_and_text(ops["device"])
    h_codes, h_names = _codes_and_text(ops["host"])
    frame = pd.DataFrame({"step": ops["step"].to_numpy()[inside], "device": d_codes[inside],
                          "host": h_codes[inside], "start": starts[inside],
                          "end": starts[inside] + durations[inside]})
    spans = frame.groupby(["step", "device", "host"], sort=False).agg(start=("start", "min"), end=("end", "max"))
    spans = spans.reset_index()
    spans["device"] = pd.Categorical(d_names[spans["device"].to_numpy()])     # categories in name order
    spans["host"] = pd.Categorical(h_names[spans["host"].to_numpy()])
    return spans


def _codes_and_text(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Codes of the column's values, and their names as str (code -1, a missing value: ``nan``, as
    ``astype(str)`` writes it)."""
    codes, values = column_codes(column)
    return codes, np.array([str(v) for v in values] + ["nan"], dtype=object)


def merge_activity(parts: Sequence[Activity], span_fold: SpanFold | None = None) -> Activity:
    """The activities of a run's hosts (in host order) as one: what :func:`reduce_activity` gives on their
    op tables put end to end. ``span_fold``: the hosts' span summaries folded as they arrived (their own
    sums let go), else the summaries' sums are folded here."""
    if len(parts) == 1:
        return parts[0]
    out = Activity(n_rows=sum(p.n_rows for p in parts))
    for part in parts:
        for name, dev in part.devices.items():
            seen = out.devices.get(name)
            out.devices[name] = dev if seen is None else _merged_device(seen, dev)
        out.op_lines.extend(part.op_lines)
    out.op_lines = list(dict.fromkeys(out.op_lines))
    out.hosts = _merged_hosts(parts)
    out.busy_union = _union_of_unions([p.busy_union for p in parts])
    spanned = [p for p in parts if not p.step_spans.empty]
    spans = [p.step_spans for p in spanned]
    summaries = [p.span_summary for p in spanned]
    known = [s for s in summaries if s is not None]
    if len(spans) > 1 and names_apart([s.names["device"] - {None} for s in known] if len(known) == len(spans)
                                      else [set(as_frame(s)["device"].unique()) for s in spans]):
        out.host_spans = spans       # each (step, device, host) in one host's spans: nothing to merge
        out.host_summaries = known if len(known) == len(spans) else None
        out.span_sums = span_fold.result(len(spans)) if span_fold is not None else \
            folded_sums(summaries) if out.host_summaries is not None else None
    elif len(spans) > 1:
        # the spans of a device seen in several hosts' files grouped into one (step, device, host) each
        out.step_spans = joined_spans(spans).groupby(["step", "device", "host"], sort=False, observed=True).agg(
            start=("start", "min"), end=("end", "max")).reset_index()
    elif spans:
        out.step_spans = spans[0]
    return out


def joined_spans(tables: list[Table]) -> pd.DataFrame:
    """Step span tables end to end as one, names as categoricals in name order."""
    spans = [as_frame(t) for t in tables]
    both = pd.DataFrame({"step": np.concatenate([s["step"].to_numpy() for s in spans])}, copy=False)
    for name in ("device", "host"):
        both[name] = union_categoricals([pd.Categorical(s[name]) for s in spans], sort_categories=True)
    for name in ("start", "end"):
        both[name] = np.concatenate([s[name].to_numpy() for s in spans])
    return both


def _merged_device(a: DeviceActivity, b: DeviceActivity) -> DeviceActivity:
    """A device seen in two hosts' files: its rows of both (``a``'s first)."""
    starts = np.concatenate([a.collective_starts, b.collective_starts])
    order = np.argsort(starts, kind="stable")
    return DeviceActivity(busy=union(np.concatenate([a.busy[0], b.busy[0]]), np.concatenate([a.busy[1], b.busy[1]])),
                          first_ps=min(a.first_ps, b.first_ps), last_ps=max(a.last_ps, b.last_ps), host=a.host,
                          collective_starts=starts[order],
                          collective_names=np.concatenate([a.collective_names, b.collective_names])[order])


def _merged_hosts(parts: Sequence[Activity]) -> dict[str, HostSets] | None:
    """The hosts' thread sets side by side; None when a part was not cut or two parts name the same host (its
    threads must then be cut from both files' events together)."""
    if any(p.hosts is None for p in parts) or \
            not names_apart([set(p.hosts or ()) | {host for host, _ in p.op_lines} for p in parts]):
        return None
    return {host: sets for p in parts for host, sets in (p.hosts or {}).items()}


def names_apart(groups: Sequence[set]) -> bool:
    """Whether no name is in two of the groups (each host's devices or hosts: its own, then)."""
    return sum(len(g) for g in groups) == len(set().union(*groups))


def _union_of_unions(sets: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The union of interval sets, each a union already (disjoint, sorted), folded pairwise as in a binary
    counter: each set in turn is united with the partial union of as many sets before it, so at most one
    partial union per power of two is held (a pod's thousands of hosts: a dozen), never one table of every set
    nor a level of pairs. A spilled set's pages leave the process once it is united (hostreduce.spill)."""
    held: list[tuple[int, tuple[np.ndarray, np.ndarray]]] = []     # (sets it unites, partial union)
    for s in sets:
        if not s[0].size:
            continue
        count, part = 1, (s[0], s[1])
        while held and held[-1][0] == count:
            other = held.pop()[1]
            part = _united(other, part)
            count *= 2
        held.append((count, part))
    if not held:
        return _NONE, _NONE
    part = held.pop()[1]
    while held:
        part = _united(held.pop()[1], part)
    return part


def _united(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Two unions as one; a spilled one's pages leave the process once read."""
    out = union(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))
    release(a[0])
    release(b[0])
    return out
