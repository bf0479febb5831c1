"""runtime.forked: per-host work in forked processes gives what one process gives, in order.

Each check runs in a fresh interpreter: the test process itself may hold threads (Dask's, Streamlit's)
under which fork_map rightly declines to fork.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from traceview.runtime import forked

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork_map forks on Linux only")


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          check=True).stdout.strip()


@linux_only
def test_forked_results_come_in_order_from_other_processes():
    out = _fresh("""
        import os, time
        from traceview.runtime import forked
        assert forked._can_fork()
        def task(i):
            time.sleep(0.01)          # long enough for the forked process to take items too
            return i * i, os.getpid()
        got = forked.fork_map(task, 40, 2)
        assert [v for v, _ in got] == [i * i for i in range(40)]
        print(len({pid for _, pid in got} - {os.getpid()}))
    """)
    assert int(out) >= 1                       # the work ran in forked processes


@linux_only
def test_a_forked_process_that_dies_is_an_error_not_a_hang():
    out = _fresh("""
        import os, time
        from traceview.runtime import forked
        parent = os.getpid()
        def task(i):
            if os.getpid() != parent:
                os._exit(9)               # killed, as by the kernel's OOM killer
            time.sleep(0.01)
            return i
        try:
            forked.fork_map(task, 20, 2)
        except RuntimeError as exc:
            print(exc)
    """)
    assert "ended without its results" in out and "9" in out


@linux_only
def test_a_result_that_does_not_pickle_is_an_error():
    out = _fresh("""
        import os, threading, time
        from traceview.runtime import forked
        def task(i):
            time.sleep(0.01)
            return threading.Lock()       # no pickle
        try:
            forked.fork_map(task, 20, 2)
        except RuntimeError as exc:
            print(exc)
    """)
    assert "does not pickle" in out


@linux_only
def test_an_error_in_a_forked_task_reaches_the_caller():
    out = _fresh("""
        from traceview.runtime import forked
        def task(i):
            if i == 7:
                raise ValueError("host 7")
            return i
        try:
            forked.fork_map(task, 10, 2)
        except ValueError as exc:
            print(exc)
    """)
    assert out == "host 7"


def test_one_job_or_one_item_runs_here(monkeypatch):
    parent = os.getpid()
    assert forked.fork_map(lambda i: os.getpid(), 5, 1) == [parent] * 5
    assert forked.fork_map(lambda i: os.getpid(), 1, 4) == [parent]
    monkeypatch.setenv("TRACEVIEW_NO_FORK", "1")
    assert forked.fork_map(lambda i: os.getpid(), 5, 4) == [parent] * 5


@linux_only
def test_no_process_to_fork_leaves_the_work_here():
    out = _fresh("""
        import os
        from traceview.runtime import forked
        def refuse():
            raise BlockingIOError(11, "Resource temporarily unavailable")
        os.fork = refuse
        forked.fork_map(lambda i: i, 3, 2)          # the shared counter's memory is set up once
        before = len(os.listdir("/proc/self/fd"))
        got = forked.fork_map(lambda i: (i, os.getpid()), 30, 2)
        assert [i for i, _ in got] == list(range(30))
        print(len({pid for _, pid in got}), len(os.listdir("/proc/self/fd")) - before)
    """)
    processes, leaked = map(int, out.split())
    assert processes == 1 and leaked == 0      # all here, the pipe made for the child closed


@linux_only
def test_children_that_answered_are_reaped_by_the_next_fork_map_not_waited_for():
    out = _fresh("""
        import os, time
        from traceview.runtime import forked
        def task(i):
            time.sleep(0.01)
            return os.getpid()
        first = set(forked.fork_map(task, 20, 2)) - {os.getpid()}
        assert first and first <= set(forked._ending)      # answered, then left to end on their own
        time.sleep(0.5)
        second = set(forked.fork_map(task, 20, 2)) - {os.getpid()}
        reaped = []
        for pid in first:
            try:
                os.waitpid(pid, os.WNOHANG)
                reaped.append(False)                     # still ours to reap
            except ChildProcessError:
                reaped.append(True)
        print(all(reaped), not (first & set(forked._ending)), second <= set(forked._ending))
    """)
    assert out == "True True True"


@pytest.mark.parametrize(("count", "jobs"), [(0, 2), (1, 2), (5, 2), (32, 2), (128, 2), (256, 2), (1000, 8), (7, 1)])
def test_batches_cover_the_items_in_order_in_shrinking_runs(count, jobs):
    runs = forked.batches(count, jobs)
    assert [i for run in runs for i in run] == list(range(count))
    lengths = [len(run) for run in runs]
    assert all(a >= b for a, b in zip(lengths, lengths[1:]))          # the long runs first
    assert all(length >= max(1, count // (64 * jobs)) for length in lengths[:-1])
    if count >= 4 * jobs:
        assert lengths[0] <= -(-count // (2 * jobs))                      # no process's first run is half
        assert lengths[-1] <= max(1, count // (64 * jobs), count // 50)    # the last ones short
        assert len(runs) <= 16 * jobs + 8                                  # few results to merge


def test_nothing_forks_once_a_threaded_runtime_is_loaded(monkeypatch):
    """JAX (or TensorFlow, PyTorch) loaded: its native threads may hold a lock at the fork, so fork_map
    runs here and the reading pool uses a fork server."""
    import types

    from traceview.runtime.pool import start_method as _start_method

    monkeypatch.delitem(sys.modules, "jaxlib", raising=False)
    monkeypatch.setattr(forked, "THREADED_RUNTIMES", ("jaxlib", "a_runtime_of_the_test"))
    monkeypatch.setattr(forked.threading, "active_count", lambda: 1)
    if sys.platform.startswith("linux"):
        assert forked.fork_is_safe() and _start_method() == "fork"
    monkeypatch.setitem(sys.modules, "a_runtime_of_the_test", types.ModuleType("a_runtime_of_the_test"))
    assert forked.threaded_runtime() == "a_runtime_of_the_test"
    assert not forked.fork_is_safe() and not forked._can_fork()
    assert _start_method() in ("forkserver", "spawn")
    parent = os.getpid()
    assert forked.fork_map(lambda i: os.getpid(), 6, 2) == [parent] * 6


@linux_only
def test_forked_processes_do_not_start_with_the_parents_freed_heap():
    """A parent keeping its freed heap for reuse (the CLI's malloc thresholds) hands it back before it forks:
    a forked process's resident size counts every page it shares, so it would start with that heap too."""
    out = _fresh("""
        import os, time
        from traceview.runtime import forked, malloc
        if not malloc.keep_freed_memory():
            print("skip")
            raise SystemExit
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        blocks = [bytearray(os.urandom(1 << 10) * 1024) for _ in range(120)]     # 120 MB on the heap, touched
        del blocks
        before = rss()
        def task(i):
            time.sleep(0.02)
            return os.getpid(), rss()
        got = forked.fork_map(task, 20, 2)
        child = [r for pid, r in got if pid != os.getpid()]
        print(before, min(child) if child else -1)
    """)
    if out == "skip":
        pytest.skip("no glibc to tune")
    before, child = map(int, out.split())
    assert child > 0 and child < before - 60 * 2**20


@linux_only
def test_the_parent_takes_no_item_so_no_items_working_memory():
    """Items run in the forked processes only: the parent, which lives on holding the run's results, never
    reaches an item's working memory (its peak would stay for the rest of the run, and every later fork
    would start from it)."""
    out = _fresh("""
        import os, time
        from traceview.runtime import forked, malloc
        malloc.keep_freed_memory()
        def peak():
            with open("/proc/self/status") as f:
                return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) * 1024
        def task(i):
            time.sleep(0.01)
            held = bytearray(80 * 2**20)
            held[::4096] = b"x" * len(range(0, len(held), 4096))     # every page touched
            return os.getpid(), peak()
        before = peak()
        got = forked.fork_map(task, 12, 2)
        print(len({pid for pid, _ in got}), int(os.getpid() in {pid for pid, _ in got}),
              max(p for _, p in got) - before, peak() - before)
    """)
    processes, parent_ran, child_rise, parent_rise = map(int, out.split())
    assert processes >= 1 and not parent_ran          # every item in a forked process, none in this one
    assert child_rise > 70 * 2**20                     # an item's memory is there to be seen
    assert parent_rise < 20 * 2**20
