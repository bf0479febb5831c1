"""Loading the compiled kernels (:mod:`traceview.parsers.native.kernels`) once per process.

The kernels' machine code is linked without numba where a process built it
before (:mod:`traceview.parsers.native.linker`), else loaded through numba
(from its disk cache, ``cache=True``; compiled on a machine's first use). With
``TRACEVIEW_NO_NUMBA=1``, or without numba, :func:`enabled` is False and every
caller takes its numpy path, which gives the same results.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager
from functools import lru_cache

import numpy as np


def loaded() -> bool:
    """Whether the kernels are already loaded in this process (and not switched off): using them is free."""
    return not os.environ.get("TRACEVIEW_NO_NUMBA") and kernels.cache_info().currsize > 0 and kernels() is not None


def enabled() -> bool:
    """numba importable and not switched off."""
    if os.environ.get("TRACEVIEW_NO_NUMBA"):
        return False
    return kernels() is not None


_LOAD_LOCK = threading.Lock()


# Called (from the loading thread) with True when a kernel is about to be compiled, not loaded from
# numba's cache (the first use on a machine: tens of seconds), and with False once the loading is over.
# The CLI's progress bar sets it to say so.
on_compile: Callable[[bool], None] | None = None


@lru_cache(maxsize=1)
def kernels():
    """The kernels: their machine code linked without numba where a process built it before
    (native.linker), else through numba (which then builds that file for the next processes)."""
    from traceview.parsers.native import linker

    with _LOAD_LOCK:
        native = linker.load()
        if native is not None:
            _drop_compiler_pages()  # loading llvmlite's library touched 45-50 MB of it
            return native
        try:
            from traceview.parsers.native import kernels as numba_kernels
        except ImportError:  # numba absent
            return None
        with _cache_loading_without_refresh():
            if linker.supported():
                _announce(True)
                native = linker.build(numba_kernels)
                _announce(False)
            if native is None:
                _call_each(numba_kernels)
        _drop_compiler_pages()
        return native or numba_kernels


def _announce(compiling: bool) -> None:
    if on_compile is not None:
        on_compile(compiling)


_COMPILER_LIBRARY = "libllvmlite"


_MADV_DONTNEED = 4  # Linux <sys/mman.h>


def _drop_compiler_pages() -> None:
    """Once the kernels are loaded, take LLVM's own code out of this process's resident set.

    Loading a cached kernel runs LLVM (libllvmlite: 65-70 MB of its code and
    read-only data touched); the loaded kernels never call into it again. Its
    read-only mappings that hold no page of their own (smaps ``Anonymous: 0``:
    every page is the file's, as it is on disk) are released with
    ``madvise(MADV_DONTNEED)``; the pages stay in the kernel's page cache, and
    a later compile (a kernel not in numba's cache) maps them again. Linux
    only; anything unexpected leaves the mappings as they are.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        madvise = ctypes.CDLL(None, use_errno=True).madvise
        madvise.argtypes, madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
        for start, end in _read_only_file_pages(_COMPILER_LIBRARY):
            madvise(start, end - start, _MADV_DONTNEED)
    except (OSError, ValueError, AttributeError):
        pass


def _read_only_file_pages(library: str) -> list[tuple[int, int]]:
    """(start, end) of each mapping of a file named like `library` that is not writable and holds no
    anonymous (copied-on-write) page, from /proc/self/smaps."""
    found: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head, _, rest = line.partition(" ")
            if not head.endswith(":"):                 # a mapping's first line: range, permissions, ..., path
                fields = rest.split()
                current = None
                if len(fields) >= 5 and library in fields[-1] and "w" not in fields[0]:
                    lo, hi = head.split("-")
                    current = (int(lo, 16), int(hi, 16))
            elif head == "Anonymous:" and current is not None:
                if int(rest.split()[0]) == 0:
                    found.append(current)
                current = None
    return found


@contextmanager
def loading():
    """Around a kernel's first calls: load it from numba's cache the light way."""
    with _LOAD_LOCK, _cache_loading_without_refresh():
        yield


@contextmanager
def _cache_loading_without_refresh():
    """While our kernels load from numba's disk cache, skip numba's full target set-up.

    Loading a cached kernel makes numba "refresh" its CPU target first:
    import every typing and lowering registry (and scipy.linalg, to probe
    BLAS) in each process (docs/scale.md has the cost), all of it needed only to *compile*.
    Loading machine code needs only the runtime (NRT), which is initialized
    here. A kernel not in the cache is compiled as usual (the compiler
    refreshes the target itself). The patch is undone before this returns, and
    anything unexpected in numba's internals leaves numba's own path in place.
    """
    try:
        from numba.core import caching
        from numba.core.runtime import rtsys

        cache = caching.Cache
        original = cache.load_overload
        guard, load = cache._guard_against_spurious_io_errors, cache._load_overload
    except (ImportError, AttributeError):
        yield
        return

    announced = []

    def load_overload(self, sig, target_context):
        rtsys.initialize(target_context)
        loaded = None
        with guard(self):
            loaded = load(self, sig, target_context)
        if loaded is None and on_compile is not None:  # not cached (or unreadable): numba compiles it now
            announced.append(on_compile)
            on_compile(True)
        return loaded

    cache.load_overload = load_overload
    try:
        yield
    finally:
        cache.load_overload = original
        if announced:
            announced[-1](False)


_threads: int | None = None  # set by share_cores() in a process that is one of several reading at once


def share_cores(processes: int) -> None:
    """This process is one of `processes` reading at once: it splits lines over its share of the cores
    only (a pool worker splitting a line over every core would make the pool's workers fight for them)."""
    global _threads
    _threads = max(1, _cores() // max(1, processes))


def split_threads() -> int:
    return _cores() if _threads is None else _threads


@lru_cache(maxsize=1)
def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _call_each(k) -> None:
    """Call every kernel the reader uses once, with the argument types it uses (a buffer of bytes is
    read-only to numba: another type would be another compiled version)."""
    line = b"\x12\x01l\x22\x08\x08\x01\x22\x04\x08\x02\x2a\x00"  # one event: metadata id 1, stat 2 = ""
    buf = np.frombuffer(line, dtype=np.uint8)
    head = k.line_head(buf, buf.size, np.zeros(10, dtype=np.int64))
    count = int(head[8])
    k.event_position(buf, buf.size, count)
    k.decode_wide(buf, 0, buf.size, 0, np.array([2], dtype=np.int64), *(np.zeros(count, np.int64) for _ in range(3)),
                  np.zeros((1, count), np.int8), np.zeros((1, count), np.uint64), np.zeros((1, count), np.uint32))
    k.space_outline(buf, buf.size, np.zeros((0, 5), dtype=np.int64))
    two = (np.zeros(2, np.int64) for _ in range(3))
    k.nested_children(np.array([0, 1], dtype=np.int64), np.array([3, 2], dtype=np.int64), np.array([2, 3], dtype=np.int64),
                      np.zeros(2, np.int64), np.full(2, -1, np.int64))
    k.self_times_in_order(np.array([0, 1], dtype=np.int64), np.array([3, 1], dtype=np.int64), *two)


def warm_up() -> bool:
    """Load the compiled kernels in this process (before forking workers: they inherit them
    instead of each loading numba and its cache again). False when numba is off."""
    return enabled()
