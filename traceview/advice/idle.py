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

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceview.hostreduce.activity import Activity, reduce_activity
from traceview.hostreduce.host_threads import (
    DISPATCH,
    EMPTY,
    FEEDING,
    TRANSFER,
    WAIT,
    HostSets,
    Intervals,
    host_threads,
)
from traceview.hostreduce.spill import release
from traceview.hostreduce.workers import PartWorkers
from traceview.runtime.forked import batches, fork_map_items
from traceview.timeline.intervals import complement, covered_length, intersect, subtract, union

__all__ = ["CAUSES", "DISPATCH", "FEEDING", "TRANSFER", "WAIT", "IdleCauses", "idle_causes"]

CAUSES = ("host", "launch", "sync", "transfer", "unknown")
ORDER = ("transfer", "sync", "launch", "host")          # the first that holds decides; the rest is unknown

EVIDENCE_NAMES = 5          # host event names kept as evidence per cause


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




def idle_causes(ops: pd.DataFrame | Activity, host_events: pd.DataFrame,
                steps: pd.DataFrame | None = None, jobs: int = 1, workers: PartWorkers | None = None) -> IdleCauses:
    """Split every active device's idle time into :data:`CAUSES`.

    ``ops``: the run's activity (``hostreduce.activity``, its hosts' reductions merged), or the op
    executions themselves (``parsers.profile.OP_COLUMNS``: host, device, line, op, start_ps,
    duration_ps), reduced here; ``host_events``: the host threads (``HOST_EVENT_COLUMNS``); ``steps``:
    step, start_ps, time_ps (the analysis' step table) for the per-step split. ``jobs``: processes the
    devices may be split over (a pod's: runtime.forked; the same result whatever it is). ``workers``: where
    the run's host parts are held too (hostreduce.workers): each part's devices are measured there when
    every device is in one part and each host's threads were cut where it was read.
    """
    activity = ops if isinstance(ops, Activity) else reduce_activity(ops)
    if activity.n_rows == 0:
        return IdleCauses(reason="the trace has no device op executions")
    hosts = activity.hosts if activity.hosts is not None else host_threads(activity.op_lines, host_events)
    if steps is None or steps.empty:
        steps = pd.DataFrame({"step": [], "start_ps": [], "time_ps": []})
    step_ids = steps["step"].to_numpy(dtype=np.int64)
    step_lo = steps["start_ps"].to_numpy(dtype=np.int64)
    windows = (step_lo, step_lo + steps["time_ps"].to_numpy(dtype=np.int64))
    devices = list(activity.devices.items())

    def run_of_devices(run: range) -> _Causes:            # a forked task: its devices, added up before they travel
        # each device's causes added in as it is measured: a run of thousands of a pod's devices never held
        return _Causes.added((_device_causes(*devices[i], hosts, activity.busy_union, windows) for i in run),
                             step_ids.size)

    if workers is not None and activity.hosts is not None and \
            [name for names in workers.devices_by_part for name in names] == [name for name, _ in devices]:
        # each worker adds up its parts' devices, this process the workers' sums as they finish
        found = workers.map(_held_causes, [[i] for i in range(len(workers.devices_by_part))],
                            activity.busy_union, windows, step_ids.size,
                            fold=functools.partial(_two_added, n_steps=step_ids.size))
    else:
        found = fork_map_items(run_of_devices, batches(len(devices), jobs), jobs)
    total = _Causes.added(found, step_ids.size)
    position = {name: k for k, (name, _) in enumerate(devices)}
    total.rows.sort(key=lambda row: position[row["device"]])    # as measured one device after another
    per_device, per_step, evidence_time, feeding = total.rows, total.per_step, total.evidence, total.feeding
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


@dataclass
class _Causes:
    """Devices' idle time by cause added up, in device order: their rows of the per-device table, per step
    (cause -> ps per step; a single device: only the causes it has time for), the evidence (cause ->
    {(name, source): ps}) and their hosts' feeding threads."""

    rows: list[dict]
    per_step: dict[str, np.ndarray]
    evidence: dict[str, dict[tuple[str, str], int]]
    feeding: set[str]

    @staticmethod
    def added(found: Iterable[_Causes], n_steps: int) -> _Causes:
        """``found`` (in device order; a list, or a generator measuring each device as it is added) added up: the same sums, rows and evidence order as one device after
        another."""
        out = _Causes([], {c: np.zeros(n_steps, dtype=np.int64) for c in CAUSES}, {c: {} for c in CAUSES}, set())
        for f in found:
            out.rows.extend(f.rows)
            out.feeding.update(f.feeding)
            for c in CAUSES:
                if c in f.per_step:
                    out.per_step[c] += f.per_step[c]
                for key, t in f.evidence[c].items():
                    out.evidence[c][key] = out.evidence[c].get(key, 0) + t
        return out


def _held_causes(group: list[int], parts: list, any_busy: Intervals, windows: tuple[np.ndarray, np.ndarray],
                 n_steps: int) -> _Causes:
    """Where the parts are held (hostreduce.workers): their devices' causes, each added in as it is measured,
    before they travel (each device's rows in its part alone, each host's threads cut where it was read)."""
    return _Causes.added((_device_causes(name, d, p.activity.hosts or {}, any_busy, windows)
                          for p in parts for name, d in p.activity.devices.items()), n_steps)


def _two_added(a: _Causes, b: _Causes, n_steps: int) -> _Causes:
    """Two runs of devices' causes as one (the fold of ``PartWorkers.map``: integer sums, a set, and rows put
    back in device order by the caller, so the order they are added in does not matter)."""
    return _Causes.added((a, b), n_steps)


def _device_causes(device: str, d, hosts: dict[str, HostSets], any_busy: Intervals,
                   windows: tuple[np.ndarray, np.ndarray]) -> _Causes:
    """Each instant of the device's gaps given to the first cause that holds there."""
    gaps = complement(d.busy[0], d.busy[1], d.first_ps, d.last_ps)
    sets = hosts.get(d.host, HostSets())
    collectives = (d.collective_starts, d.collective_names)
    at_collective = _gaps_before(gaps, collectives)
    candidates = {
        "transfer": sets.transfer,
        # In a device's gaps it runs nothing, so "another device is busy" there is "any device is busy";
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
    out = _Causes(rows=[{"device": device, "idle_ps": int((gaps[1] - gaps[0]).sum()),
                         **{f"{c}_ps": lengths[c] for c in CAUSES}}],
                  per_step={}, evidence={c: {} for c in CAUSES}, feeding={f"{d.host}/{t}" for t in sets.threads})
    for c in CAUSES:
        if windows[0].size and lengths[c]:
            out.per_step[c] = covered_length(windows[0], windows[1], *parts[c])
        if lengths[c]:
            _add_evidence(out.evidence[c], c, parts[c], sets, at_collective, collectives)
    release(d.busy[0])            # a pod's device and host intervals wait on disk (hostreduce.spill)
    release(sets.active[0])
    return out


# ------------------------------------------------------------------ the device side


def _gaps_before(gaps: Intervals, collectives: tuple[np.ndarray, np.ndarray]) -> Intervals:
    """The gaps that end where a collective starts (the device waits at it)."""
    ends_at = np.isin(gaps[1], collectives[0])
    return gaps[0][ends_at], gaps[1][ends_at]


def _add_evidence(into: dict, cause: str, part: Intervals, sets: HostSets, at_collective: Intervals,
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
        return EMPTY
    return np.concatenate([s[0] for s in sets]), np.concatenate([s[1] for s in sets])
