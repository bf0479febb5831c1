"""traceview.runtime.malloc: the traceview program and its pool workers keep freed memory for reuse.

Each case runs in a fresh interpreter (malloc's thresholds are process state
that earlier tests would have moved) and asks glibc, through mallinfo2, whether
a 4 MiB block (above glibc's start threshold, below traceview's) came from
fresh mmapped pages (the default) or from the heap.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import pytest

from traceview.runtime.collector import THRESHOLDS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")

PROBE = textwrap.dedent("""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]

    def mmapped_by_malloc(n=4 << 20):
        '''Bytes glibc mmapped to serve one malloc(n).'''
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
        libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]
        before = libc.mallinfo2().hblkhd
        block = libc.malloc(n)
        after = libc.mallinfo2().hblkhd
        libc.free(block)
        return after - before
""")


def _run(body: str) -> list[str]:
    script = PROBE + textwrap.dedent(body)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def _has_mallinfo2() -> bool:
    import ctypes

    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")
    except OSError:
        return False


needs_glibc = pytest.mark.skipif(not _has_mallinfo2(), reason="needs glibc 2.33+ (mallinfo2)")


# Freeing a mapped block raises glibc's threshold to its size, so each process probes once, last.

@needs_glibc
def test_the_probe_sees_glibcs_default_in_a_fresh_process():
    (fresh,) = _run("print(mmapped_by_malloc())")
    assert int(fresh) >= 4 << 20


@needs_glibc
def test_a_kept_process_serves_large_blocks_from_its_heap():
    kept, large = _run("""
        from traceview.runtime.malloc import MMAP_THRESHOLD, keep_freed_memory
        assert keep_freed_memory()
        print(mmapped_by_malloc(), mmapped_by_malloc(MMAP_THRESHOLD))
    """)
    assert int(kept) == 0
    assert int(large) >= 8 << 20       # columns of a million rows and more: pages of their own, given back


@needs_glibc
def test_a_gathering_process_grows_no_heap_for_blocks_of_64_kib():
    """Once a kept process gathers others' results, a block past 64 KiB that the heap has no room for is
    mmapped (given back when freed) rather than grow the heap; before, the heap grows; a process that never
    kept freed memory is left alone. (Each block is larger than the last: a freed one leaves room in the heap
    for a smaller one.)"""
    before, changed, during = _run("""
        from traceview.runtime.malloc import gathering, keep_freed_memory
        assert keep_freed_memory()
        before = mmapped_by_malloc(256 << 10)
        print(before, gathering(), mmapped_by_malloc(1 << 20))
    """)
    assert int(before) == 0 and changed == "True"
    assert int(during) >= 1 << 20
    changed, untouched = _run("""
        from traceview.runtime import malloc
        print(malloc.gathering(), mmapped_by_malloc(64 << 10))   # below glibc's start threshold: its heap
    """)
    assert changed == "False" and int(untouched) == 0


@needs_glibc
def test_the_traceview_program_keeps_freed_memory_but_not_for_version():
    body = """
        import sys
        import traceview.cli as cli
        sys.argv = ["traceview", *ARGS]
        cli.main = lambda: (print(mmapped_by_malloc()), 0)[1]
        cli.console()
    """
    (run,) = _run(body.replace("ARGS", "['analyze', 'somewhere']"))
    (version,) = _run(body.replace("ARGS", "['--version']"))
    assert int(run) == 0
    assert int(version) >= 4 << 20       # --version's fast path sets nothing


def test_the_traceview_program_collects_less_often_but_not_for_version():
    """The program's own process raises the collector's thresholds (traceview.runtime.collector); --version's fast
    path and in-process callers of main keep Python's."""
    code = ("import gc, sys\nimport traceview.cli as cli\nsys.argv = ['traceview', *ARGS]\n"
            "cli.main = lambda: (print(*gc.get_threshold()), 0)[1]\ncli.console()\n")
    runs = [subprocess.run([sys.executable, "-c", code.replace("ARGS", args)], capture_output=True, text=True,
                           timeout=60) for args in ("['analyze', 'somewhere']", "['--version']")]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert runs[0].stdout.split() == [str(t) for t in THRESHOLDS]
    assert runs[1].stdout.split() == [str(t) for t in gc.get_threshold()] != runs[0].stdout.split()


@needs_glibc
def test_pool_workers_keep_freed_memory():
    (worker,) = _run("""
        from traceview.runtime.pool import process_pool
        if __name__ == "__main__":
            with process_pool(1, "fork") as pool:       # the parent sets nothing: the worker does
                print(pool.submit(mmapped_by_malloc).result())
    """)
    assert int(worker) == 0


def test_freed_memory_stays_between_blocks_and_goes_back_when_idle():
    """Inside the blocks freed heap stays in the process (the reader's fewer page faults), and from one block
    to the next begun within the linger (a Dask worker reading host after host); once none has run for the
    linger, the process's own thresholds are back and the free heap is handed to the kernel."""
    code = textwrap.dedent("""
        import time
        import numpy as np
        from traceview.runtime.malloc import freed_memory_kept, _glibc
        if _glibc() is None:
            print("skip"); raise SystemExit
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096 >> 20
        def churn():
            blocks = [np.ones(250_000) for _ in range(400)]     # 2 MB each: heap, below the mmap threshold
            del blocks
        base = rss()
        with freed_memory_kept(linger_s=0.5):
            churn()
            inside = rss()
        between = rss()
        with freed_memory_kept(linger_s=0.5):
            pass
        time.sleep(0.2)
        still = rss()                          # the second block restarted the linger
        time.sleep(1.0)
        print(base, inside, between, still, rss())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    if out == ["skip"]:
        pytest.skip("not glibc")
    base, inside, between, still, after = map(int, out)
    assert inside - base > 500            # 800 MB freed, kept for reuse inside the block
    assert between - base > 500 and still - base > 500     # and between blocks
    assert after - base < 100             # handed back once idle
