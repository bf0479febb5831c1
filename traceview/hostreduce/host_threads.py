"""What each host's threads were doing: one host's host events cut into the interval sets the idle causes
(``traceview.advice.idle``) test a device's gaps against, computed where the host is read.

Per host: its *feeding* threads (threads other than the device op lines that dispatch to a device at least
once: :data:`FEEDING`), and as disjoint interval sets the time a thread copied to or from a device
(:data:`TRANSFER`), the feeding threads' dispatch (:data:`DISPATCH`), their waits on the devices
(:data:`WAIT`, less dispatch) and everything they did; plus the events' self pieces for the evidence (which
names took the time). Everything depends on one host's events only, so a pod's hosts are cut in their
workers and the parent merges small interval sets (``hostreduce.activity``), never every host's events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceview.timeline.grouping import matches
from traceview.timeline.intervals import complement, pieces_within, subtract, union

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
MAX_DEPTH = 256             # nesting levels of host events looked at for the evidence

Intervals = tuple[np.ndarray, np.ndarray]
EMPTY: Intervals = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))


@dataclass
class Pieces:
    """Host events cut into their self pieces: the parts of each event not inside a nested event on the
    same thread (so on a thread the pieces are disjoint, and each instant belongs to its deepest event)."""

    starts: np.ndarray
    ends: np.ndarray
    name: np.ndarray            # code into ``names``
    names: np.ndarray
    feeding: np.ndarray         # the piece is on a feeding thread
    transfers: tuple[np.ndarray, np.ndarray, np.ndarray]   # the outermost transfer events: start, end, name


@dataclass
class HostSets:
    """One host's activity as disjoint interval sets, and the events behind them for the evidence."""

    threads: list[str] = field(default_factory=list)
    transfer: Intervals = EMPTY
    dispatch: Intervals = EMPTY
    wait: Intervals = EMPTY
    active: Intervals = EMPTY
    pieces: Pieces | None = None

    def __bool__(self) -> bool:
        return bool(self.threads)


def host_threads(op_line_pairs: list[tuple[str, str]], host_events: pd.DataFrame) -> dict[str, HostSets]:
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
        sets = HostSets(threads=feeding)
        sets.transfer = _union_of(events[events["transfer"]])
        sets.dispatch = _union_of(fed[fed["dispatch"]])
        sets.wait = subtract(*_union_of(fed[fed["wait"]]), *sets.dispatch)
        sets.active = _union_of(fed)
        sets.pieces = _self_pieces(events[on_feeding | events["transfer"].to_numpy()], set(feeding))
        out[str(host)] = sets
    return out


def _union_of(events: pd.DataFrame) -> Intervals:
    return union(events["start"].to_numpy(dtype=np.int64), events["end"].to_numpy(dtype=np.int64))


def _self_pieces(events: pd.DataFrame, feeding: set[str]) -> Pieces:
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
        return Pieces(empty, empty, empty, np.asarray(names), np.empty(0, dtype=bool), transfers)
    columns = [np.concatenate([p[k] for p in parts]) for k in range(4)]
    return Pieces(columns[0], columns[1], columns[2], np.asarray(names), columns[3], transfers)
