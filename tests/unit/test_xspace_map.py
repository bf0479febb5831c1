"""A large trace file mapped instead of read (parsers/xspace/mapped.py): only under a read lease, so it cannot
shrink under the reader; its decoded pages leave the process; what it reads equals the bytes read."""

from __future__ import annotations

import gzip
import mmap
import os
import sys

import pytest

from traceview.parsers.xspace.mapped import map_file

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mapping is Linux only")


def _opens_for_writing(path) -> bool:
    """Whether another opener gets the file for writing now (not held back by a lease)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except BlockingIOError:
        return False
    os.close(fd)
    return True


def test_mapped_under_a_lease_that_holds_writers_back_until_unmapped(tmp_path):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(bytes(range(256)) * 64)
    mapped = map_file(path, 0, 1 << 20)
    assert mapped is not None and mapped.map[:] == path.read_bytes()
    assert not _opens_for_writing(path)          # a truncation or a writer waits: no SIGBUS for the reader
    mapped.close()
    assert _opens_for_writing(path)


def test_a_view_left_alive_keeps_the_lease(tmp_path):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(b"x" * 10_000)
    mapped = map_file(path, 0, 1 << 20)
    assert mapped is not None
    view = memoryview(mapped.map)
    mapped.close()                               # refused while the view lives: the mapping stays valid
    assert view[9_999] == ord("x") and not _opens_for_writing(path)
    view.release()
    del mapped
    assert _opens_for_writing(path)


def test_read_instead_when_open_for_writing_compressed_or_out_of_bounds(tmp_path):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(b"\x0a\x02hi" * 1000)
    with open(path, "r+b"):                      # someone writing it: no lease, no mapping
        assert map_file(path, 0, 1 << 20) is None
    assert map_file(path, 1 << 20, 1 << 30) is None         # below the size worth mapping
    assert map_file(path, 0, 100) is None                   # above the limit: read_limited says why
    assert map_file(tmp_path / "missing.xplane.pb", 0, 1 << 20) is None
    assert map_file(tmp_path, 0, 1 << 20) is None           # not a regular file
    packed = tmp_path / "packed.xplane.pb"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    assert map_file(packed, 0, 1 << 20) is None             # compressed: decompressed by read_limited
    empty = tmp_path / "empty.xplane.pb"
    empty.write_bytes(b"")
    assert map_file(empty, 0, 1 << 20) is None


def test_a_sigurg_handler_of_the_process_is_left_alone(tmp_path):
    import signal

    path = tmp_path / "host.xplane.pb"
    path.write_bytes(b"y" * 5000)
    previous = signal.signal(signal.SIGURG, lambda *_: None)
    try:
        assert map_file(path, 0, 1 << 20) is None   # a lease break would reach the process's own handler
    finally:
        signal.signal(signal.SIGURG, previous)


def test_dropped_pages_leave_the_process_and_read_back_the_same(tmp_path):
    page = mmap.PAGESIZE
    content = os.urandom(64 * page)
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(content)
    mapped = map_file(path, 0, 1 << 30)
    assert mapped is not None
    assert bytes(mapped.map[:]) == content                  # every page touched
    resident = _resident_pages(mapped.map)
    mapped.drop(page // 2, 40 * page + 7)                   # pages wholly inside: 1 .. 39
    after = _resident_pages(mapped.map)
    assert after == resident - 39
    assert bytes(mapped.map[:]) == content                  # touched again: read back from the page cache
    mapped.drop(10, 20)                                     # inside one page: nothing to drop
    mapped.close()
    mapped.drop(0, 64 * page)                               # closed: nothing happens


def _resident_pages(mapping: mmap.mmap) -> int:
    """Pages of the mapping in this process's resident set (its Rss line in /proc/self/smaps; the page cache
    may still hold the others)."""
    import numpy as np

    address = np.frombuffer(mapping, dtype=np.uint8).ctypes.data
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "Rss:":
                return int(line.split()[1]) * 1024 // mmap.PAGESIZE
    raise AssertionError("mapping not found in /proc/self/smaps")
