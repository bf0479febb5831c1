"""A pod's kept rows on disk: the rows each host's part keeps (timeline.host_ops) written to one temporary
file of the run as the hosts come in, and read back through memory maps one host at a time.

A part's kept rows are what grows most with a pod's hosts (about 40 bytes per execution that overlaps another op
or may be half of an async pair; every row of a trace whose ops nest). Held in memory, 128 hosts of the TPU
v6e timeline are a gigabyte in the parent; the merged analysis reads them host by host anyway
(``RunOps.chunks``), so they wait on disk instead, with the host's device activity (busy intervals,
host threads: what the idle causes read device by device): each part's arrays become read-only views of the
file, and after each host (or device) is measured its pages are dropped from the process (``madvise(MADV_DONTNEED)``; the
kernel's page cache keeps them while there is room, so the next pass reads them from memory). The file is
unlinked from the start: it vanishes when the process ends, however it ends.
"""

from __future__ import annotations

import functools
import mmap
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from traceview.timeline.host_ops import OpsPart

KEPT_FIELDS = ("kept_group", "kept_device", "kept_start", "kept_duration", "kept_self", "kept_step", "kept_alone")
_ALIGN = 64


class RowSpill:
    """The run's spill file: :meth:`keep` moves a part's kept rows, and its activity's interval arrays, into it."""

    def __init__(self, directory: str | None = None) -> None:
        self._file = tempfile.TemporaryFile(prefix="traceview-rows-", dir=directory)
        self._end = 0

    def keep(self, part: OpsPart) -> OpsPart:
        """The part with its large arrays moved to the file (they become read-only views of it, one region
        per part): the kept rows, each device's busy intervals and collective starts, the run-wide busy
        union, and its host threads' interval sets (timeline.host_threads)."""
        slots = [(get, put) for get, put in _slots(part) if not get().dtype.hasobject]
        arrays = [np.ascontiguousarray(get()) for get, _ in slots]
        if not any(a.size for a in arrays):
            return part
        mapped = self._write(arrays)
        for (_, put), view in zip(slots, mapped):
            put(view)
        return part

    def _write(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        start = at = self._end
        offsets = []
        self._file.seek(start)
        for a in arrays:
            pad = -at % _ALIGN
            self._file.write(b"\0" * pad)
            at += pad
            offsets.append(at)
            a.tofile(self._file)
            at += a.nbytes
        self._file.flush()
        self._end = at
        region = np.memmap(self._file, dtype=np.uint8, mode="r", offset=start, shape=(max(at - start, 1),))
        return [region[off - start:off - start + a.nbytes].view(a.dtype).reshape(a.shape)
                for a, off in zip(arrays, offsets)]

    def close(self) -> None:
        self._file.close()


def _slots(part: OpsPart) -> list[tuple[Callable[[], np.ndarray], Callable[[np.ndarray], None]]]:
    """(read, replace) of every numeric array of the part worth moving to disk."""
    slots: list[tuple[Callable[[], np.ndarray], Callable[[np.ndarray], None]]] = [
        (functools.partial(getattr, part, name), functools.partial(setattr, part, name)) for name in KEPT_FIELDS]
    activity = part.activity
    slots += _pair_slots(activity, "busy_union")
    for device in activity.devices.values():
        slots += _pair_slots(device, "busy")
        slots.append((functools.partial(getattr, device, "collective_starts"),
                      functools.partial(setattr, device, "collective_starts")))
    for sets in (activity.hosts or {}).values():
        for name in ("transfer", "dispatch", "wait", "active"):
            slots += _pair_slots(sets, name)
        if sets.pieces is not None:
            pieces = sets.pieces
            slots += [(functools.partial(getattr, pieces, name), functools.partial(setattr, pieces, name))
                      for name in ("starts", "ends", "name", "feeding")]
            slots += _tuple_slots(pieces, "transfers", 3)
    return slots


def _pair_slots(owner, name: str) -> list:
    return _tuple_slots(owner, name, 2)


def _tuple_slots(owner, name: str, size: int) -> list:
    """Slots for each array of a tuple attribute (the tuple is rebuilt around the replaced array)."""
    def put(k: int, view: np.ndarray) -> None:
        values = list(getattr(owner, name))
        values[k] = view
        setattr(owner, name, tuple(values))
    return [(functools.partial(lambda k: getattr(owner, name)[k], k), functools.partial(put, k)) for k in range(size)]


def release(array: object) -> None:
    """Drop the pages of a spilled array's region (its part's) from the process; read again from the file
    when next used. Anything else: nothing to do."""
    mapped = getattr(array, "_mmap", None)
    if mapped is not None and hasattr(mmap, "MADV_DONTNEED"):
        try:
            mapped.madvise(mmap.MADV_DONTNEED)
        except (OSError, ValueError):      # closed, or a platform that refuses: the pages just stay
            pass
