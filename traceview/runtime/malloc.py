"""Tune glibc's malloc for reading traces, in the processes traceview owns.

glibc serves a block of at least M_MMAP_THRESHOLD bytes (128 KiB at start,
raised by frees up to 32 MiB) with fresh pages from the kernel, and hands the
free top of its heap back to the kernel once it passes M_TRIM_THRESHOLD. A
reader allocates and frees hundreds of MB of columns per large file, so it
pays a zero-filled page fault for every 4 KiB it touches again. Fixing both
thresholds high keeps freed memory in the process for the next column: fewer
faults and less wall time, for some more peak memory (the figures are in
docs/scale.md, "Freed memory kept for reuse").

Only the ``traceview`` program and its pool workers call this (short-lived
processes); a library caller's process, and the dashboard's long-running
server, keep their allocator as they set it. A Dask worker (long-running, its
memory watched by Dask) has them only while it reads hosts
(:func:`freed_memory_kept`): a second after its last read, its own settings
come back and the freed memory goes back to the kernel. The program's own
process, once it hands a pod's reading to a Dask cluster, reads no file
itself: it serves large blocks from fresh pages again (:func:`gathering`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

# mallopt(3) parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# Blocks of 8 MiB and more (columns of a million rows) still get pages of their own, handed back when freed:
# kept in the heap, a 2 M-row file's columns raised its peak by 19 MB for no time saved (docs/scale.md).
MMAP_THRESHOLD = 8 << 20
TRIM_THRESHOLD = 1 << 30    # free heap kept for reuse before any goes back to the kernel


GLIBC_DEFAULT = 128 << 10   # both thresholds' start values


def keep_freed_memory() -> bool:
    """Set the thresholds above; False where there is no glibc (macOS, musl, Windows) or it refuses."""
    global _kept
    _kept = _set(MMAP_THRESHOLD, TRIM_THRESHOLD)
    return _kept


# A process that gathers the hosts others read: blocks of 64 KiB and more grow no heap.
GATHERING_MMAP_THRESHOLD = 64 << 10


def gathering() -> bool:
    """In a process that set :func:`keep_freed_memory` (traceview's own), once it hands the reading of a pod's
    hosts to a Dask cluster and gathers their results: for the rest of the run, a block of 64 KiB or more
    that the free heap has no room for gets pages of its own, given back when freed, instead of growing the
    heap. Such a process reads no file, so the faults the kept heap saves a reader do not arise; what it does
    is fold each host's message and let most of it go (its per-step sums, a few hundred kB), keep a few kB of
    small arrays per host, and merge. Served from the heap, the kept blocks landed in the holes the freed
    ones left, and each next host's, and the merge's, large blocks needed new heap above them: the Dask
    client's peak grew 1.52x from 128 to 1024 hosts, 1.43x with this, for 3.5 s more of its CPU at 1024
    hosts. A pool's parent is not set so: its peak did not move, and its forked passes, which inherit the
    setting, spent 55 s more in the kernel (docs/scale.md). False where nothing changed (a library caller's
    process keeps its own settings; no glibc)."""
    return _kept and _set(GATHERING_MMAP_THRESHOLD, TRIM_THRESHOLD)


LINGER_S = 1.0             # a worker's freed memory goes back this long after its last read ended


@contextlib.contextmanager
def freed_memory_kept(linger_s: float = LINGER_S) -> Iterator[None]:
    """The thresholds above while blocks run, then, ``linger_s`` after the last one ended with none begun
    since, the process's own (its ``MALLOC_*_THRESHOLD_`` environment, else glibc's start values) and the
    free heap handed back to the kernel (``malloc_trim``). A worker reading host after host keeps its freed
    memory from one to the next (the next host's columns would fault every page in again) and gives it back
    once it is idle."""
    global _blocks, _lent, _timer
    with _lock:
        if _timer is not None:
            _timer.cancel()
            _timer = None
        if _blocks == 0 and not _lent:
            _lent = keep_freed_memory()
        _blocks += 1
    try:
        yield
    finally:
        with _lock:
            _blocks -= 1
            if _blocks == 0 and _lent:
                if linger_s > 0:
                    _timer = threading.Timer(linger_s, _give_back_if_idle)
                    _timer.daemon = True
                    _timer.start()
                else:
                    _give_back()


_kept = False                              # keep_freed_memory set the thresholds in this process
_lock = threading.Lock()
_blocks = 0                                # blocks of freed_memory_kept running in this process
_lent = False                              # whether they set the thresholds, not yet given back
_timer: threading.Timer | None = None


def _give_back_if_idle() -> None:
    global _timer
    with _lock:
        _timer = None
        if _blocks == 0 and _lent:
            _give_back()


def trim() -> None:
    """The free heap handed back to the kernel now (glibc only; nothing elsewhere): before a process forks,
    so that its children do not start with its freed pages mapped (a forked child's resident size counts
    every page it shares)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def _give_back() -> None:
    """The process's own thresholds again, and the free heap to the kernel (call with ``_lock`` held)."""
    global _lent
    _lent = False
    _set(_env_int("MALLOC_MMAP_THRESHOLD_", GLIBC_DEFAULT), _env_int("MALLOC_TRIM_THRESHOLD_", GLIBC_DEFAULT))
    trim()


def _set(mmap_threshold: int, trim_threshold: int) -> bool:
    libc = _glibc()
    if libc is None:
        return False
    import ctypes

    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))


def _glibc():
    """glibc, where this process runs on it (None on macOS, musl, Windows: musl's mallopt does nothing)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") else None


def _env_int(name: str, default: int) -> int:
    try:
        return min(max(0, int(os.environ.get(name, default))), 2**31 - 1)
    except ValueError:
        return default
