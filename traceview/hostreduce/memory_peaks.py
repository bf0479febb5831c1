"""Runtime memory per allocator: the peak of what the allocator held, and what held it.

Definitions follow XProf's memory profile (xplane_to_memory_profile):

* usage after an event = bytes reserved (stack) + bytes allocated (heap);
* the peak is the largest usage in the profiling window; on ties the latest
  event wins (XProf compares with ``>=``);
* capacity = stack + heap + free at the peak;
* an event without a step (group_id) takes the previous step's + 1 (0 at the start).

Allocations at the peak are the allocations made inside the window and not
yet freed when the peak happened (matched by address). What the heap held
beyond them was allocated before the profile started: it is one row,
"allocated before the profile", and the stack is another, so the rows add up
to the peak. (XProf restricts its table to the peak's step and folds the rest
into "unused preallocated device memory".)

A pod's hosts are reduced to their peaks where each is read (:func:`host_peaks`, in the reading process):
what reaches the parent is bounded per allocator (a timeline of at most ``MAX_TIMELINE_POINTS`` and what was
live at the peak), not every host's events; :func:`merged_peaks` puts them in the order one table of every
event gives.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import tempfile
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import pandas as pd

from traceview.runtime.forked import fork_map

MAX_TIMELINE_POINTS = 1000


@dataclass(frozen=True, slots=True)
class HeldAtPeak:
    """One thing an allocator held at its peak: an allocation made inside the profile window and not yet freed
    (``kind`` "allocation", with what the trace says of it), what the heap held beyond those, allocated before
    the profile ("before profile"), or the stack ("stack"). A peak's rows add up to its peak bytes."""

    size_bytes: int
    requested_bytes: int | None       # what the program asked for (an allocation only)
    shape: str | None
    op: str | None                    # the op that allocated it; a label for the other two kinds
    region_type: str | None           # "stack" for the stack
    data_type: str | None
    step: int | None                  # the step it was allocated in (an allocation only)
    time_ps: int | None               # when it was allocated, absolute (an allocation only)
    address: int | None
    kind: str                         # "allocation" | "before profile" | "stack"


@dataclass
class RuntimePeak:
    device: str                   # host/allocator, e.g. "tw003/GPU_0_bfc"
    name: str                     # the allocator (memory id)
    host: str
    capacity_bytes: int | None
    peak_bytes: int
    stack_bytes: int
    heap_bytes: int
    free_bytes: int
    fragmentation: float
    peak_time_ps: int             # absolute
    step: int
    lifetime_peak_bytes: int      # the allocator's own peak_bytes_in_use stat (may precede the window)
    events: int
    # its timeline and rows, or them packed (:meth:`packed`), or packed and written to a file (:class:`DetailStore`)
    detail: PeakDetail | bytes | StoredDetail = field(repr=False)

    @property
    def timeline(self) -> pd.DataFrame:
        """time_ps, stack_bytes, heap_bytes, step (downsampled)."""
        return self.unpacked().timeline

    @property
    def at_peak(self) -> list[HeldAtPeak]:
        """What it held at its peak, largest first."""
        return self.unpacked().at_peak

    def unpacked(self) -> PeakDetail:
        """Its timeline and rows (unpacked on each call when packed: nothing kept)."""
        if isinstance(self.detail, StoredDetail):
            return pickle.loads(zlib.decompress(self.detail.read()))
        if isinstance(self.detail, bytes):
            return pickle.loads(zlib.decompress(self.detail))
        return self.detail

    def packed(self) -> RuntimePeak:
        """The same peak with its timeline and rows as one compressed string: a pod's parent holds thousands of
        allocators' peaks, of which an analysis reads the bytes only (the memory view's tables unpack them)."""
        if isinstance(self.detail, (bytes, StoredDetail)):
            return self
        return dataclasses.replace(self, detail=zlib.compress(pickle.dumps(self.detail, protocol=5), 1))


class StoredDetail:
    """A packed peak detail (:meth:`RuntimePeak.packed`) written to a :class:`DetailStore`'s file: read back on
    each unpack, and pickled as the bytes themselves (a process it travels to gets them, not the file)."""

    __slots__ = ("store", "offset", "size")

    def __init__(self, store: DetailStore, offset: int, size: int) -> None:
        self.store = store
        self.offset = offset
        self.size = size

    def read(self) -> bytes:
        return self.store.read(self.offset, self.size)

    def __reduce__(self) -> tuple:
        return bytes, (self.read(),)


class DetailStore:
    """Where a pod's caller keeps its hosts' packed peak details as the hosts arrive: one unnamed temporary file
    (gone when the last peak that reads it is), each detail appended and read back on each unpack. ``analyze``
    reads only the peaks' bytes, and only the memory view unpacks the details; held in memory they were about
    10 kB a host (four allocators), the largest part of what the caller kept per host. A disk that refuses
    leaves the details in memory, as before."""

    def __init__(self) -> None:
        self._file: BinaryIO | None = None
        self._end = 0
        self._lock = threading.Lock()     # a file without pread is read by seek and read

    def keep(self, held: HostPeaks) -> None:
        """Each packed detail of ``held`` written here, its peak reading it from here from now on."""
        for k, peak in enumerate(held.peaks):
            if not isinstance(peak.detail, bytes):
                continue
            try:
                stored = self._write(peak.detail)
            except OSError:
                return
            held.peaks[k] = dataclasses.replace(peak, detail=stored)

    def _write(self, data: bytes) -> StoredDetail:
        with self._lock:
            if self._file is None:
                self._file = tempfile.TemporaryFile()
            self._file.seek(self._end)
            self._file.write(data)
            self._file.flush()
            offset, self._end = self._end, self._end + len(data)
        return StoredDetail(self, offset, len(data))

    def read(self, offset: int, size: int) -> bytes:
        assert self._file is not None
        if hasattr(os, "pread"):          # no shared file offset: a forked process may read at the same time
            return os.pread(self._file.fileno(), size, offset)
        with self._lock:
            self._file.seek(offset)
            return self._file.read(size)


@dataclass(frozen=True)
class PeakDetail:
    """One allocator's use over time and what it held at its peak."""

    timeline: pd.DataFrame
    at_peak: list[HeldAtPeak] = field(default_factory=list)


def fill_steps(steps: np.ndarray) -> np.ndarray:
    """-1 (no group_id) becomes the previous valid step + 1 (0 before any)."""
    out = steps.copy()
    last = -1
    for i, s in enumerate(out.tolist()):
        if s < 0:
            out[i] = last + 1
        else:
            last = s
    return out


def _downsample(frame: pd.DataFrame, peak_row: int, limit: int) -> pd.DataFrame:
    """At most `limit` points: in each bucket the point of highest usage, the peak always kept."""
    if len(frame) <= limit:
        return frame
    usage = (frame["stack_bytes"] + frame["heap_bytes"]).to_numpy()
    bucket = np.arange(len(frame)) * limit // len(frame)
    order = np.lexsort((-usage, bucket))
    first = order[np.r_[True, bucket[order][1:] != bucket[order][:-1]]]
    keep = np.union1d(first, [peak_row])
    return frame.iloc[keep]


def _active_at_peak(events: pd.DataFrame, peak_row: int) -> list[HeldAtPeak]:
    live: dict[int, int] = {}
    kinds = events["kind"].to_numpy()
    addrs = events["address"].to_numpy()
    for i in range(peak_row + 1):
        if kinds[i] == "alloc":
            live[int(addrs[i])] = i
        else:
            live.pop(int(addrs[i]), None)
    cols = {c: events[c].tolist() for c in ("allocation_bytes", "requested_bytes", "shape", "tf_op", "region_type",
                                             "data_type", "step", "time_ps", "address")}

    def text(column: str, i: int) -> str | None:
        v = cols[column][i]
        return v if isinstance(v, str) and v else None

    rows = [HeldAtPeak(size_bytes=int(cols["allocation_bytes"][i]), requested_bytes=int(cols["requested_bytes"][i]),
                       shape=text("shape", i), op=text("tf_op", i), region_type=text("region_type", i),
                       data_type=text("data_type", i), step=int(cols["step"][i]), time_ps=int(cols["time_ps"][i]),
                       address=int(cols["address"][i]), kind="allocation") for i in live.values()]
    rows.sort(key=lambda r: (-r.size_bytes, r.time_ps))
    return rows


def runtime_peaks(events: pd.DataFrame, timeline_points: int = MAX_TIMELINE_POINTS, jobs: int = 1) -> list[RuntimePeak]:
    """One RuntimePeak per (host, allocator) in an allocator event table (parsers.xspace.allocator_events); ``jobs``:
    processes a pod's allocators may be split over (runtime.forked; the same peaks whatever it is)."""
    if events.empty:
        return []
    grouped = events.groupby(["host", "memory"], observed=True, sort=True)
    # each group's rows taken where it is measured (a pod's hundreds of groups never all copied at once)
    number = grouped.ngroup().to_numpy()
    order = np.argsort(number, kind="stable")
    bounds = np.searchsorted(number[order], np.arange(number.max() + 2))
    keys = list(grouped.size().index)

    def peak(i: int) -> RuntimePeak:
        return _runtime_peak(keys[i][0], keys[i][1], events.iloc[order[bounds[i]:bounds[i + 1]]], timeline_points)

    return fork_map(peak, len(keys), jobs)


def _runtime_peak(host, memory, group: pd.DataFrame, timeline_points: int) -> RuntimePeak:
    """One allocator's peak: when its use was highest, what was live then, and its use over time."""
    group = group.sort_values("time_ps", kind="stable").reset_index(drop=True)
    group["step"] = fill_steps(group["step"].to_numpy())
    usage = (group["stack_bytes"] + group["heap_bytes"]).to_numpy()
    peak_row = int(len(usage) - 1 - np.argmax(usage[::-1]))  # the latest of equal maxima
    p = group.iloc[peak_row]
    stack, heap, free = int(p["stack_bytes"]), int(p["heap_bytes"]), int(p["free_bytes"])
    capacity = stack + heap + free if free > 0 else None
    at_peak = _active_at_peak(group, peak_row)
    attributed = sum(r.size_bytes for r in at_peak)
    if heap - attributed > 0:
        at_peak.append(HeldAtPeak(size_bytes=heap - attributed, requested_bytes=None, shape=None,
                                  op="allocated before the profile", region_type=None, data_type=None, step=None,
                                  time_ps=None, address=None, kind="before profile"))
    if stack > 0:
        at_peak.append(HeldAtPeak(size_bytes=stack, requested_bytes=None, shape=None, op="stack",
                                  region_type="stack", data_type=None, step=None, time_ps=None, address=None,
                                  kind="stack"))
    at_peak.sort(key=lambda r: -r.size_bytes)
    timeline = _downsample(group[["time_ps", "stack_bytes", "heap_bytes", "step"]], peak_row, timeline_points)
    return RuntimePeak(
        device=f"{host}/{memory}", name=str(memory), host=str(host), capacity_bytes=capacity,
        peak_bytes=int(usage[peak_row]), stack_bytes=stack, heap_bytes=heap, free_bytes=free,
        fragmentation=float(p["fragmentation"]), peak_time_ps=int(p["time_ps"]), step=int(p["step"]),
        lifetime_peak_bytes=int(group["peak_bytes_in_use"].max()), events=len(group),
        detail=PeakDetail(timeline.reset_index(drop=True), at_peak))


@dataclass
class HostPeaks:
    """One trace file's allocator events reduced to what the memory view reads."""

    peaks: list[RuntimePeak]          # per (host, allocator) of the file, as runtime_peaks orders them
    first_ps: int | None              # its first allocator event's time (None: it has none)


def host_peaks(events: pd.DataFrame) -> HostPeaks:
    """A file's allocator events (parsers.xspace.allocator_events) reduced to its allocators' peaks, their
    timelines and rows packed (what a pod's parent holds per host until the memory view asks)."""
    peaks = [p.packed() for p in runtime_peaks(events)]
    return HostPeaks(peaks, int(events["time_ps"].min()) if len(events) else None)


def merged_peaks(parts: Sequence[HostPeaks]) -> list[RuntimePeak] | None:
    """The files' peaks as :func:`runtime_peaks` gives them over every file's events at once: hosts in order
    (a stable sort: each file keeps its allocators' order); None when two files hold events of one (host,
    allocator), whose peak only their events together tell."""
    peaks = [p for part in parts for p in part.peaks]
    if len({(p.host, p.name) for p in peaks}) < len(peaks):
        return None
    return sorted(peaks, key=lambda p: p.host)
