"""A large trace file mapped into memory instead of read whole: its pages leave the process once decoded.

Read into a bytes object, a 118 MB file stays in the process until its tables
are built, beside its decoded columns. Mapped, a page of it is in the process
from the walk that touches it until that range is decoded: the compiled reader
(xspace.fast) hands each decoded range back (:meth:`MappedFile.drop`,
``madvise(MADV_DONTNEED)``); the page stays in the kernel's page cache and a
later touch maps it again, so nothing is lost, only no longer counted.

A mapped file that shrinks under its reader kills it (SIGBUS on a page past
the new end), so a file is mapped only under a read lease (``F_SETLEASE``):
the kernel grants one only while no process has the file open for writing,
and holds back whoever then opens it for writing or truncates it until the
mapping is gone (the lease lives as long as the mapping) or the system's
lease-break time has passed (``/proc/sys/fs/lease-break-time``, 45 s by
default; a read takes about a second per 100 MB). The kernel tells the lease's
holder with SIGURG, whose default action is to ignore it. Where no lease can
be had (another user's file without CAP_LEASE, a network file system, a
process with its own SIGURG handler, not Linux) the file is read as before.
"""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

from traceview.parsers.compressed import compression_of


class MappedFile:
    """A file's bytes, mapped read-only; ``map`` is used as the bytes would be (slices, buffers)."""

    def __init__(self, mapping: mmap.mmap) -> None:
        self.map = mapping

    def __len__(self) -> int:
        return len(self.map)

    def drop(self, start: int, end: int) -> None:
        """Take the pages wholly inside bytes [start, end) out of the process (a later touch maps them again)."""
        page = mmap.PAGESIZE
        lo, hi = -(-start // page) * page, end // page * page
        if hi > lo:
            try:
                self.map.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
            except (OSError, ValueError):  # a closed mapping, or a kernel that refuses: the pages just stay
                pass

    def close(self) -> None:
        """Unmap now (and so end the lease) unless views of it are still alive (then it goes with them)."""
        try:
            self.map.close()
        except BufferError:
            pass


def map_file(path: str | Path, min_size: int, limit: int) -> MappedFile | None:
    """The file mapped under a read lease when it is a plain (uncompressed) regular file of min_size to limit
    bytes and a lease can be had; None: read it instead."""
    if not sys.platform.startswith("linux") or not hasattr(mmap.mmap, "madvise"):
        return None
    import fcntl
    import signal
    import stat

    if signal.getsignal(signal.SIGURG) not in (signal.SIG_DFL, signal.SIG_IGN):
        return None  # the process handles SIGURG itself: a lease break would reach its handler
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)  # refused while anyone has it open for writing
        size = os.fstat(fd).st_size                         # under the lease: it can no longer change
        if not min_size <= size <= limit or size == 0:
            return None                                     # closing the descriptor ends the lease
        mapping = mmap.mmap(fd, size, access=mmap.ACCESS_READ)  # holds the lease (its own descriptor) until unmapped
    except (OSError, ValueError, OverflowError):
        return None
    finally:
        os.close(fd)
    if compression_of(mapping[:8]) is not None:
        mapping.close()
        return None
    return MappedFile(mapping)
