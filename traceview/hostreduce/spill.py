"""A pod's kept rows on disk: the arrays each host's part holds (hostreduce.host_ops: its kept rows; its
activity's busy intervals, host threads and reduced step table) written to a file per host as the hosts
come in, and read back through memory maps one host at a time.

They are what grows with a pod's hosts (about 40 bytes per execution that overlaps another op or may be half
of an async pair: every row of a trace whose ops nest). Held in memory, 128 hosts of the TPU v6e timeline
are a gigabyte in the parent; the merged analysis reads them host by host anyway (``RunOps.chunks``, the idle
causes device by device), so they wait on disk instead: each part's arrays become read-only views of its
file, and after each host (or device) is measured its pages are dropped from the process
(``madvise(MADV_DONTNEED)``; the kernel's page cache keeps them while there is room, so the next pass reads
them from memory). A pool's workers write their hosts' files themselves, so the big arrays never travel
through a pipe. Each file is unlinked as soon as it is mapped: it vanishes when the process ends, however
it ends.
"""

from __future__ import annotations

import functools
import itertools
import mmap
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from traceview.errors import UserError
from traceview.hostreduce.pages import release as release  # re-exported: the passes drop pages through spill
from traceview.hostreduce.pages import spilled as spilled
from traceview.timeline.packed_frame import PackedFrame

if TYPE_CHECKING:
    from traceview.hostreduce.host_ops import OpsPart

STEP_FIELDS = ("step", "first", "last", "total", "count", "pair_step", "pair_device", "distinct")
KEPT_FIELDS = ("kept_group", "kept_device", "kept_start", "kept_duration", "kept_self", "kept_step", "kept_alone",
               "kept_steps")
_ALIGN = 64
_TOKEN = "token"
Slot = tuple[Callable[[], np.ndarray], Callable[[np.ndarray], None]]   # read an array, replace it


@dataclass
class Layout:
    """Where a part's arrays lie in its spill file: the file, and per array (offset, dtype, shape)."""

    path: str
    size: int
    arrays: list[tuple[int, str, tuple[int, ...]]]


class RowSpill:
    """The run's spill folder: one file per part, unlinked as soon as it is mapped (the mapping keeps it).

    :meth:`keep` moves a part's arrays to disk here; a pool worker writes its part with :func:`write_part`
    into :meth:`path_for` and the parent maps it with :func:`adopt` (the big arrays never travel through a
    pipe). :meth:`close` removes the folder and anything a failed host left in it.
    """

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="traceview-spill-")
        self._count = itertools.count()
        self.token = secrets.token_hex(16)       # a worker elsewhere finds this folder only if it reads this
        with open(os.path.join(self.directory, _TOKEN), "w", encoding="ascii") as handle:
            handle.write(self.token)

    def path_for(self, index: int) -> str:
        return os.path.join(self.directory, f"host{index}.rows")

    def keep(self, part: OpsPart) -> OpsPart:
        """The part with its large arrays moved to disk (read-only views of a file, one per part)."""
        try:
            layout = write_part(part, os.path.join(self.directory, f"kept{next(self._count)}.rows"))
        except OSError:                  # a full or read-only disk: the arrays stay in memory
            return part
        return adopt(part, layout) if layout is not None else part

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def sees_folder(path: str, token: str) -> bool:
    """Whether this process sees the spill folder of ``path`` (the same machine, or a shared file system): it
    holds the token its run wrote there."""
    try:
        with open(os.path.join(os.path.dirname(path), _TOKEN), encoding="ascii") as handle:
            return handle.read(64) == token
    except (OSError, UnicodeDecodeError):
        return False


def write_part(part: OpsPart, path: str) -> Layout | None:
    """Write the part's large arrays to ``path`` and leave empty ones of the same types in their place (a
    small part to send); None, and the part untouched, when it has none. ``adopt`` puts them back."""
    slots = _numeric_slots(part)
    arrays = [np.ascontiguousarray(get()) for get, _ in slots]
    if not any(a.size for a in arrays):
        return None
    entries = []
    at = 0
    with open(path, "wb") as handle:
        for a in arrays:
            pad = -at % _ALIGN
            handle.write(b"\0" * pad)
            at += pad
            entries.append((at, a.dtype.str, a.shape))
            a.tofile(handle)
            at += a.nbytes
    for (_, put), a in zip(slots, arrays):
        put(np.empty((0,) * a.ndim, dtype=a.dtype))
    return Layout(path, at, entries)


def adopt(part: OpsPart, layout: Layout, unlink: bool = True) -> OpsPart:
    """The part with its arrays as read-only views of its spill file (mapped, then unlinked unless
    ``unlink`` is False: a Dask worker keeping its copy of the part it wrote, which the caller maps next)."""
    with open(layout.path, "rb") as handle:
        # plain views of one read-only mapping: a view costs a quarter of an np.memmap's (no attributes of its
        # own), and a pod's parent holds dozens per host
        region = np.frombuffer(mmap.mmap(handle.fileno(), layout.size, access=mmap.ACCESS_READ), dtype=np.uint8)
    try:
        if unlink:
            os.unlink(layout.path)
    except OSError:          # the folder is removed at the end anyway
        pass
    slots = _numeric_slots(part)
    if [(get().dtype.str, get().ndim) for get, _ in slots] != [(dtype, len(shape)) for _, dtype, shape in layout.arrays]:
        raise UserError(f"{layout.path}: a host's arrays were written by a process running another traceview "
                        "(a Dask worker started before an upgrade?): restart the workers with this one")
    for (_, put), (offset, dtype, shape) in zip(slots, layout.arrays):
        size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        put(region[offset:offset + size].view(np.dtype(dtype)).reshape(shape))
    return part


def _numeric_slots(part: OpsPart) -> list[Slot]:
    return [(get, put) for get, put in _slots(part) if not get().dtype.hasobject]


def _slots(part: OpsPart) -> list[Slot]:
    """(read, replace) of every array of the part worth moving to disk."""
    activity = part.activity
    slots = _attr_slots(part, KEPT_FIELDS) + _tuple_slots(activity, "busy_union")
    # its step spans: summed up where read and folded as the host arrived (timeline.lateness.SpanFold); read
    # again only where two hosts' spans name one device
    slots += _frame_slots(activity, "step_spans")
    if activity.step_times is not None:      # folded as its host arrived (hostreduce.step_times): read again only
        slots += _attr_slots(activity.step_times, STEP_FIELDS)    # where two hosts' tables share a device
    for device in activity.devices.values():
        slots += _tuple_slots(device, "busy") + _attr_slots(device, ("collective_starts",))
    for sets in (activity.hosts or {}).values():
        for name in ("transfer", "dispatch", "wait", "active"):
            slots += _tuple_slots(sets, name)
        if sets.pieces is not None:
            slots += _attr_slots(sets.pieces, ("starts", "ends", "name", "feeding"))
            slots += _tuple_slots(sets.pieces, "transfers")
    return slots


def _attr_slots(owner: object, names: tuple[str, ...]) -> list[Slot]:
    return [(functools.partial(getattr, owner, name), functools.partial(setattr, owner, name)) for name in names]


def _tuple_slots(owner: object, name: str) -> list[Slot]:
    """Slots for each array of a tuple attribute (the tuple is rebuilt around the replaced array)."""
    def get(k: int) -> np.ndarray:
        return getattr(owner, name)[k]

    def put(k: int, view: np.ndarray) -> None:
        values = list(getattr(owner, name))
        values[k] = view
        setattr(owner, name, tuple(values))
    return [(functools.partial(get, k), functools.partial(put, k)) for k in range(len(getattr(owner, name)))]


def _frame_slots(owner: object, name: str) -> list[Slot]:
    """Slots for each column of a table attribute (a categorical's codes, its names kept), the table packed
    first (``timeline.packed_frame``): a DataFrame per host cost the caller more than its columns on disk save."""
    table = getattr(owner, name)
    packed = table if isinstance(table, PackedFrame) else PackedFrame.of(table)
    setattr(owner, name, packed)
    return [(functools.partial(packed.columns.__getitem__, c), functools.partial(packed.columns.__setitem__, c))
            for c in packed.columns]
