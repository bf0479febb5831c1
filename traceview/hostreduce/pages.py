"""Whether an array is a view of a spill file, and dropping its pages from the process: what the passes over a
pod's spilled parts call after reading one (``traceview.hostreduce.spill`` writes and maps the files)."""

from __future__ import annotations

import mmap

import numpy as np


def _mapping(array: object) -> mmap.mmap | None:
    """The file mapping a spilled array is a view of (None: not one)."""
    while isinstance(array, np.ndarray):
        array = array.base
    if isinstance(array, memoryview):       # np.frombuffer's view of the mapping
        array = array.obj
    return array if isinstance(array, mmap.mmap) else None


def spilled(array: object) -> bool:
    """Whether ``array`` is a view of a spill file (moved to disk) rather than in memory."""
    return _mapping(array) is not None


def release(array: object) -> None:
    """Drop the pages of a spilled array's region (its part's) from the process; read again from the file
    when next used. Anything else: nothing to do."""
    mapped = _mapping(array)
    if mapped is not None and hasattr(mmap, "MADV_DONTNEED"):
        try:
            mapped.madvise(mmap.MADV_DONTNEED)
        except (OSError, ValueError):      # closed, or a platform that refuses: the pages just stay
            pass
