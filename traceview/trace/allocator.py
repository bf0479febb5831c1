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
server, keep their allocator as they set it.
"""

from __future__ import annotations

import sys

# mallopt(3) parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 << 20   # the highest glibc's own adjustment goes on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 1 << 30    # free heap kept for reuse before any goes back to the kernel


def keep_freed_memory() -> bool:
    """Set the thresholds above; False where there is no glibc (macOS, musl, Windows) or it refuses."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version"):   # not glibc: musl's mallopt does nothing
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
