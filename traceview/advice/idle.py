"""Why each device sat idle: its idle time split into causes, per device and per step.

A device's idle time is its span less the union of its op intervals (``timeline.devices``), i.e. the
gaps between its ops. Each instant of a gap goes to the first cause below that holds at that instant
(docs/advice.md gives the reasons):

1. ``transfer``: a host thread of the device's host is copying data to or from a device
   (:data:`TRANSFER`: ``BufferFromHostBuffer``, ``np.asarray(jax.Array)``, ``cuMemcpyHtoDAsync``, ...).
2. ``sync``: another device is still busy, and this one waits at a collective (the gap ends where a
   collective op starts on it) or its host is blocked waiting on the devices (:data:`WAIT`).
3. ``launch``: a feeding thread is inside the runtime's dispatch (:data:`DISPATCH`), or blocked waiting
   on devices none of which is busy (the runtime has not handed control back yet).
4. ``host``: a feeding thread is busy with anything else (the user's Python, the input pipeline, a
   step annotation around them): the device waits for the host.
5. ``unknown``: no traced host activity explains the gap.

The feeding threads of a host are its threads (other than the device op lines themselves, which on
the CPU are host threads too) that dispatch at least once. Everything is interval arithmetic on numpy
arrays (``timeline.intervals``); no Python object per event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceview.timeline.activity import Activity, matches, reduce_activity
from traceview.timeline.intervals import complement, covered_length, intersect, pieces_within, subtract, union

CAUSES = ("host", "launch", "sync", "transfer", "unknown")
ORDER = ("transfer", "sync", "launch", "host")          # the first that holds decides; the rest is unknown

FEEDING = re.compile(
    r"PjitFunction|PmapFunction|LoadedExecutable::Execute|ExecuteHelper|EnqueueExecution|LaunchKernel"
    r"|GraphLaunch|cu(?:da)?Launch|hip(?:Module|Ext)?Launch"
    r"|ExecutorState::Process|FunctionRun|EagerExecute|EagerKernelExecute", re.IGNORECASE)   # TensorFlow
DISPATCH = re.compile(
    FEEDING.pattern + r"|ExecutePrepare|ExecuteLaunch|DoEnqueueProgram|EnqueueContinuationProgram|LoadProgram"
    r"|System::Execute|ParseArguments|Handle inputs|Handle outputs|CreateOutputs|AllocateOutput"
    r"|Acquire semaphore|Release semaphore|Wait for (?:donation|usage) holds|ThunkExecutor", re.IGNORECASE)
TRANSFER = re.compile(
    r"TransferToDevice|TransferFromDevice|TransferLiteral|BufferFromHostBuffer|CopyToHost|ToLiteral"
    r"|HostToDevice|DeviceToHost|Memcpy(?:HtoD|DtoH|H2D|D2H)|np\.asarray\(jax\.Array\)|device_put|DevicePut"
    r"|copy_to_host|CopyToMemory|shard_args",
    re.IGNORECASE)
WAIT = re.compile(
    r"block_until_ready|BlockHostUntilReady|BlockUntilReady|Synchroni[sz]e|WaitForAll|Barrier"
    r"|sync_global_devices|StreamWaitEvent|EventSynchronize", re.IGNORECASE)
EVIDENCE_NAMES = 5          # host event names kept as evidence per cause
MAX_DEPTH = 256             # nesting levels of host events looked at for the evidence


@dataclass
class IdleCauses:
    """Idle time by cause (ps, summed over the active devices, as ``summary.idle_us`` is).

    ``reason`` says why nothing could be split (then ``causes`` is empty). ``per_device``: one row per
    device (device, idle_ps, <cause>_ps); ``per_step``: one row per step (step, idle_ps, <cause>_ps),
    the devices' gaps inside the step's window; ``evidence``: per cause, the names that took most of
    its time ({"name", "time_ps", "source": "host"|"device"}), largest first.
    """

    idle_ps: int = 0
    causes: dict[str, int] = field(default_factory=dict)
    evidence: dict[str, list[dict]] = field(default_factory=dict)
    per_device: pd.DataFrame = field(default_factory=pd.DataFrame)
    per_step: pd.DataFrame = field(default_factory=pd.DataFrame)
    feeding_threads: list[str] = field(default_factory=list)
    reason: str | None = None


Intervals = tuple[np.ndarray, np.ndarray]
_EMPTY: Intervals = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))


def idle_causes(ops: pd.DataFrame | Activity, host_events: pd.DataFrame,
                steps: pd.DataFrame | None = None) -> IdleCauses:
    """Split every active device's idle time into :data:`CAUSES`.

    ``ops``: the run's activity (``timeline.activity``, its hosts' reductions merged), or the op
    executions themselves (``parsers.profile.OP_COLUMNS``: host, device, line, op, start_ps,
    duration_ps), reduced here; ``host_events``: the host threads (``HOST_EVENT_COLUMNS``); ``steps``:
    step, start_ps, time_ps (the analysis' step table) for the per-step split.
    """
    activity = ops if isinstance(ops, Activity) else reduce_activity(ops)
    if activity.n_rows == 0:
        return IdleCauses(reason="the trace has no device op executions")
    devices = {name: (d.busy, (d.first_ps, d.last_ps), d.host, (d.collective_starts, d.collective_names))
               for name, d in activity.devices.items()}
    # In a device's gaps it runs nothing, so "another device is busy" there is "any device is busy".
    any_busy = union(*_concat([v[0] for v in devices.values()]))
    hosts = _host_sets(activity.op_lines, host_events)
    per_device: list[dict] = []
    evidence_time: dict[str, dict[tuple[str, str], int]] = {c: {} for c in CAUSES}
    if steps is None or steps.empty:
        steps = pd.DataFrame({"step": [], "start_ps": [], "time_ps": []})
    step_ids = steps["step"].to_numpy(dtype=np.int64)
    step_lo = steps["start_ps"].to_numpy(dtype=np.int64)
    step_hi = step_lo + steps["time_ps"].to_numpy(dtype=np.int64)
    per_step = {c: np.zeros(step_ids.size, dtype=np.int64) for c in CAUSES}
    feeding: set[str] = set()
    for device, ((b_starts, b_ends), (first, last), host, collectives) in devices.items():
        gaps = complement(b_starts, b_ends, first, last)
        sets = hosts.get(host, _HostSets())
        feeding.update(f"{host}/{t}" for t in sets.threads)
        at_collective = _gaps_before(gaps, collectives)
        candidates = {
            "transfer": sets.transfer,
            # the waits are few, the busy intervals of a pod many: cut the few by the many
            "sync": intersect(*union(*_concat([at_collective, sets.wait])), *any_busy),
            "launch": union(*_concat([sets.dispatch, sets.wait])),
            "host": sets.active,
        }
        left, parts = gaps, {}
        for cause in ORDER:
            parts[cause] = intersect(*left, *candidates[cause])
            left = subtract(*left, *parts[cause])
        parts["unknown"] = left
        lengths = {c: int((parts[c][1] - parts[c][0]).sum()) for c in CAUSES}
        per_device.append({"device": device, "idle_ps": int((gaps[1] - gaps[0]).sum()),
                           **{f"{c}_ps": lengths[c] for c in CAUSES}})
        for c in CAUSES:
            if step_ids.size and lengths[c]:
                per_step[c] += covered_length(step_lo, step_hi, *parts[c])
            if lengths[c]:
                _add_evidence(evidence_time[c], c, parts[c], sets, at_collective, collectives)
    device_table = pd.DataFrame(per_device, columns=["device", "idle_ps", *(f"{c}_ps" for c in CAUSES)])
    causes = {c: int(device_table[f"{c}_ps"].sum()) for c in CAUSES}
    step_table = pd.DataFrame({"step": step_ids, **{f"{c}_ps": per_step[c] for c in CAUSES}})
    step_table.insert(1, "idle_ps", sum(per_step[c] for c in CAUSES) if step_ids.size else np.empty(0))
    evidence = {c: [{"name": n, "time_ps": t, "source": s} for (n, s), t in
                    sorted(evidence_time[c].items(), key=lambda kv: (-kv[1], kv[0]))[:EVIDENCE_NAMES]]
                for c in CAUSES}
    return IdleCauses(idle_ps=int(device_table["idle_ps"].sum()), causes=causes, evidence=evidence,
                      per_device=device_table, per_step=step_table, feeding_threads=sorted(feeding),
                      reason=None if any(hosts.values()) else "the trace has no host thread that dispatches "
                      "to a device: idle time is unknown")


# ------------------------------------------------------------------ the device side


def _gaps_before(gaps: Intervals, collectives: tuple[np.ndarray, np.ndarray]) -> Intervals:
    """The gaps that end where a collective starts (the device waits at it)."""
    ends_at = np.isin(gaps[1], collectives[0])
    return gaps[0][ends_at], gaps[1][ends_at]


# ------------------------------------------------------------------ the host side


@dataclass
class _Pieces:
    """Host events cut into their self pieces: the parts of each event not inside a nested event on the
    same thread (so on a thread the pieces are disjoint, and each instant belongs to its deepest event)."""

    starts: np.ndarray
    ends: np.ndarray
    name: np.ndarray            # code into ``names``
    names: np.ndarray
    feeding: np.ndarray         # the piece is on a feeding thread
    transfers: tuple[np.ndarray, np.ndarray, np.ndarray]   # the outermost transfer events: start, end, name


@dataclass
class _HostSets:
    """One host's activity as disjoint interval sets, and the events behind them for the evidence."""

    threads: list[str] = field(default_factory=list)
    transfer: Intervals = _EMPTY
    dispatch: Intervals = _EMPTY
    wait: Intervals = _EMPTY
    active: Intervals = _EMPTY
    pieces: _Pieces | None = None

    def __bool__(self) -> bool:
        return bool(self.threads)


def _host_sets(op_line_pairs: list[tuple[str, str]], host_events: pd.DataFrame) -> dict[str, _HostSets]:
    """Per host, its activity; ``op_line_pairs``: the (host, line) threads that are device op lines."""
    if host_events.empty:
        return {}
    op_lines = pd.MultiIndex.from_tuples(op_line_pairs, names=["host", "line"]) if op_line_pairs else \
        pd.MultiIndex.from_arrays([[], []])
    names = host_events["name"]
    frame = pd.DataFrame({"host": host_events["host"].astype(str), "thread": host_events["thread"].astype(str),
                          "name": names.astype(str), "start": host_events["start_ps"].to_numpy(dtype=np.int64),
                          "feeding": matches(names, FEEDING), "dispatch": matches(names, DISPATCH),
                          "transfer": matches(names, TRANSFER), "wait": matches(names, WAIT)})
    frame["end"] = frame["start"] + host_events["duration_ps"].to_numpy(dtype=np.int64)
    on_op_line = pd.MultiIndex.from_arrays([frame["host"], frame["thread"]]).isin(op_lines)
    frame = frame[(frame["end"] > frame["start"]).to_numpy() & ~on_op_line]
    out = {}
    for host, events in frame.groupby("host", sort=False):
        feeding = sorted(set(events.loc[events["feeding"], "thread"]))
        on_feeding = events["thread"].isin(feeding).to_numpy()
        fed = events[on_feeding]
        sets = _HostSets(threads=feeding)
        sets.transfer = _union_of(events[events["transfer"]])
        sets.dispatch = _union_of(fed[fed["dispatch"]])
        sets.wait = subtract(*_union_of(fed[fed["wait"]]), *sets.dispatch)
        sets.active = _union_of(fed)
        sets.pieces = _self_pieces(events[on_feeding | events["transfer"].to_numpy()], set(feeding))
        out[str(host)] = sets
    return out


def _union_of(events: pd.DataFrame) -> Intervals:
    return union(events["start"].to_numpy(dtype=np.int64), events["end"].to_numpy(dtype=np.int64))


def _self_pieces(events: pd.DataFrame, feeding: set[str]) -> _Pieces:
    """Per thread, each event's nesting depth (the events that started before it, less those that had
    ended by its start: exact where events nest, as TraceMe's do), then per depth the events less the
    union of the next depth's, each piece owned by the event it lies in."""
    events = events.sort_values(["thread", "start", "end"], ascending=[True, True, False], kind="stable")
    codes, names = pd.factorize(events["name"])
    starts, ends = events["start"].to_numpy(), events["end"].to_numpy()
    transfer = events["transfer"].to_numpy()
    parts: list[tuple[np.ndarray, ...]] = []
    outer_transfers: list[np.ndarray] = []
    for thread, rows in events.groupby("thread", sort=False).indices.items():
        rows = np.sort(rows)
        copies = rows[transfer[rows]]
        if copies.size:                 # a transfer inside another on its thread is part of that one
            reach = np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(ends[copies])[:-1]))
            outer_transfers.append(copies[starts[copies] >= reach])
        s, e = starts[rows], ends[rows]
        depth = np.arange(rows.size) - np.searchsorted(np.sort(e), s, side="right")
        for level in range(min(int(depth.max()), MAX_DEPTH) + 1):
            here = rows[depth == level]
            if here.size == 0:
                continue
            below = rows[depth == level + 1]
            lo, hi = int(starts[here].min()), int(ends[here].max())
            ps, pe, which = pieces_within(starts[here], ends[here],
                                          *complement(*union(starts[below], ends[below]), lo, hi))
            owner = here[which]
            parts.append((ps, pe, codes[owner], np.full(ps.size, thread in feeding)))
    outer = np.concatenate(outer_transfers) if outer_transfers else np.empty(0, dtype=np.int64)
    transfers = (starts[outer], ends[outer], codes[outer])
    if not parts:
        empty = np.empty(0, dtype=np.int64)
        return _Pieces(empty, empty, empty, np.asarray(names), np.empty(0, dtype=bool), transfers)
    columns = [np.concatenate([p[k] for p in parts]) for k in range(4)]
    return _Pieces(columns[0], columns[1], columns[2], np.asarray(names), columns[3], transfers)


def _add_evidence(into: dict, cause: str, part: Intervals, sets: _HostSets, at_collective: Intervals,
                  collectives: tuple[np.ndarray, np.ndarray]) -> None:
    """Add to ``into`` ({(name, source): ps}) the self time (time not inside a nested event on the same
    thread) that the feeding threads' events spent inside the cause's intervals ``part``; for
    ``transfer``, the time of the outermost transfer events there; for ``sync``, also the time waited
    before each collective, by the collective's name."""
    pieces = sets.pieces
    if cause != "unknown" and pieces is not None:
        if cause == "transfer":
            starts, ends, name = pieces.transfers
        else:
            starts, ends, name = pieces.starts[pieces.feeding], pieces.ends[pieces.feeding], pieces.name[pieces.feeding]
        inside = covered_length(starts, ends, *part)
        sums = np.bincount(name, weights=inside, minlength=len(pieces.names))
        for k in np.flatnonzero(sums > 0):
            key = (str(pieces.names[k]), "host")
            into[key] = into.get(key, 0) + int(sums[k])
    if cause == "sync":
        waited = intersect(*part, *at_collective)
        if waited[0].size:
            # each waited piece ends at or before its gap's end: the collective starting there
            at = np.searchsorted(at_collective[1], waited[1], side="left")
            gap_ends = at_collective[1][np.minimum(at, at_collective[1].size - 1)]
            names = collectives[1][np.searchsorted(collectives[0], gap_ends, side="left")
                                   .clip(0, collectives[1].size - 1)]
            for name, t in pd.Series(waited[1] - waited[0], index=names).groupby(level=0).sum().items():
                key = (f"before {name}", "device")
                into[key] = into.get(key, 0) + int(t)


def _concat(sets: list[Intervals]) -> Intervals:
    sets = [s for s in sets if s[0].size]
    if not sets:
        return _EMPTY
    return np.concatenate([s[0] for s in sets]), np.concatenate([s[1] for s in sets])
