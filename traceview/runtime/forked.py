"""A pod's merged analysis spread over the cores: per host (or device) work run in forked processes.

Once a pod's hosts are merged, what is left is measured host by host or device by device (the kept rows'
overlaps and steps, the idle causes, the stragglers: ``hostreduce.run_ops``, ``advice``), in the parent, after
the last host was read, on one core. :func:`fork_map` runs those pieces in ``jobs`` processes forked from the
parent: they inherit everything it holds (the merged parts, and the spilled arrays' memory maps, whose files
are already unlinked), so only an index goes to each and only its small result comes back. The results come
in the items' order and the callers combine them as they would one by one: the output is the same byte for
byte whatever ``jobs`` is.

Forked only where forking is safe (:func:`fork_is_safe`): Linux, no other Python thread running but the
main one and at most one helper (the table cache's writer, a progress bar), no multithreaded runtime loaded
(JAX, TensorFlow, PyTorch: their native threads may hold a lock at the fork that the child then waits on
forever), and where there are at least two items and two jobs; else one by one, here. ``TRACEVIEW_NO_FORK=1``:
never.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from traceview.runtime.malloc import trim


def fork_map(task: Callable[[int], Any], count: int, jobs: int) -> list[Any]:
    """``[task(i) for i in range(count)]``, computed by ``jobs`` processes when it can be: forked from this
    one, each taking the next item until none is left, while this one waits for their answers (see
    :class:`_Workers` for why it takes none itself)."""
    jobs = min(jobs, count)
    if jobs <= 1 or not _can_fork():
        return [_timed(task, i) for i in range(count)]
    import multiprocessing

    try:
        counter = multiprocessing.get_context("fork").Value("q", 0)
    except OSError:              # no shared semaphores here (a /dev/shm the process may not write)
        return [_timed(task, i) for i in range(count)]
    return _Workers(task, count, jobs, counter).results()


_items_cpu = 0.0        # CPU seconds this process spent in fork_map items it ran itself


def items_cpu() -> float:
    """CPU seconds this process has spent running fork_map items itself (not forked children's): work that
    more processes would share, apart from the serial rest of a run (the benchmark's serial share)."""
    return _items_cpu


def _timed(task: Callable[[int], Any], index: int) -> Any:
    global _items_cpu
    before = time.process_time()
    try:
        return task(index)
    finally:
        _items_cpu += time.process_time() - before


class _Workers:
    """The forked half of :func:`fork_map`. The children share a counter (the next item); each pickles each
    result as it comes and sends its ``(index, pickled result)`` pairs into a pipe of its own once the items
    run out, and the parent reads them: a child that dies is an error, not a hang.

    The parent takes no item while children run (only when no child could be forked). An item's working
    memory then comes and goes in a child, and the parent, which lives to the end of the run and holds every
    host's results, never grows by it: glibc keeps what a process frees for reuse (the CLI's thresholds,
    runtime.malloc), so an item run here would leave the parent's resident size at the item's peak for the
    rest of the run, and each later fork would start its children from it. A child's resident size starts at
    the parent's private pages only: the parent's file mappings (the spilled parts, the libraries) count in a
    child only once it reads them."""

    def __init__(self, task: Callable[[int], Any], count: int, jobs: int, counter: Any) -> None:
        _reap_ended()
        self.task, self.count, self.next = task, count, counter
        self.children: list[tuple[int, int]] = []     # (pid, read end of its pipe)
        gc.freeze()             # the children's collections leave the inherited objects' pages alone
        trim()                  # nor do they start with this one's freed heap mapped
        try:
            for _ in range(jobs):
                self._fork()
        except OSError:          # no more processes or memory for one: those started share the items
            pass
        except BaseException:
            self._stop()
            raise
        finally:
            gc.unfreeze()

    def _fork(self) -> None:
        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            raise
        if pid == 0:                      # the child: its share, then its answer, then gone
            code = 1
            try:
                os.close(read)
                answer = self._share(pickled=True)
                try:
                    data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception:         # noqa: BLE001 - an error that does not pickle (results are bytes)
                    failed = answer.index if isinstance(answer, _Failed) else 0
                    data = pickle.dumps(_Failed(failed, RuntimeError(f"a forked task failed: {answer!r:.200}")))
                with os.fdopen(write, "wb") as out:
                    out.write(data)
                code = 0
            except BaseException:         # noqa: BLE001 - an interrupt, a closed pipe: the parent sees the status
                pass
            finally:
                os._exit(code)
        os.close(write)
        self.children.append((pid, read))

    def _share(self, pickled: bool = False) -> list[tuple[int, Any]] | _Failed:
        """This process's items and their results, or the first error one raised. ``pickled``: each result
        pickled as it comes (a child's: its answer is then ready to send as soon as the items run out)."""
        done: list[tuple[int, Any]] = []
        while True:
            with self.next.get_lock():
                index = self.next.value
                self.next.value = index + 1
            if index >= self.count:
                return done
            try:
                result = _timed(self.task, index)
            except Exception as exc:     # noqa: BLE001 - it reaches the caller
                return self._failed(index, exc)
            if pickled:
                try:
                    result = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception as exc:  # noqa: BLE001 - a result that does not pickle
                    return self._failed(index, RuntimeError(f"a forked task's answer does not pickle: {exc}"))
            done.append((index, result))

    def _failed(self, index: int, error: BaseException) -> _Failed:
        with self.next.get_lock():
            self.next.value = self.count      # every process stops taking items
        return _Failed(index, error)

    def results(self) -> list[Any]:
        try:
            mine = self._share() if not self.children else []     # no child could be forked: all here
            theirs = [self._answer(pid, read) for pid, read in self.children]
        finally:
            self._stop()
        failed = [a for a in (mine, *theirs) if isinstance(a, _Failed)]
        if failed:
            raise min(failed, key=lambda f: f.index).error
        out: list[Any] = [None] * self.count
        for index, value in cast(list, mine):
            out[index] = value
        for answer in theirs:
            for index, data in answer:
                out[index] = pickle.loads(data)
        return out

    def _answer(self, pid: int, read: int) -> Any:
        """A child's answer. One that came whole is not waited for: its process, a copy of this one, takes a
        while to end (docs/scale.md), and is reaped at the next fork_map (or by init once we are gone)."""
        with os.fdopen(read, "rb") as pipe:
            data = pipe.read()
        self.children = [c for c in self.children if c[0] != pid]
        try:
            answer = pickle.loads(data) if data else None
        except Exception:            # noqa: BLE001 - cut short: the exit status says why
            answer = None
        if answer is None:
            _, status = os.waitpid(pid, 0)
            raise RuntimeError(f"a forked process of traceview ended without its results "
                               f"(exit status {os.waitstatus_to_exitcode(status)})")
        _ending.append(pid)
        return answer

    def _stop(self) -> None:
        """Children still running (the parent failed first): ended and reaped."""
        for pid, read in self.children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            os.close(read)
        self.children = []


_ending: list[int] = []       # children that gave their answer and are ending: reaped without waiting


def _reap_ended() -> None:
    """Reap the children of earlier fork_maps that have ended (a finished child is a zombie until then)."""
    for pid in list(_ending):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:     # reaped elsewhere
            done = pid
        if done:
            _ending.remove(pid)


def fork_map_items(task: Callable[[Any], Any], items: Sequence[Any], jobs: int) -> list[Any]:
    """:func:`fork_map` over a sequence's items."""
    return fork_map(lambda i: task(items[i]), len(items), jobs)


@dataclass
class _Failed:
    index: int
    error: BaseException


# Runtimes whose native thread pools start with them: a fork while one of their threads holds a lock (the
# allocator's, a queue's) leaves that lock held forever in the child. Loaded at all counts as started: their
# threads are not Python threads, so threading.active_count() does not see them.
THREADED_RUNTIMES = ("jaxlib", "tensorflow", "torch")


def threaded_runtime() -> str | None:
    """The first multithreaded runtime loaded in this process (a THREADED_RUNTIMES name), or None."""
    return next((name for name in THREADED_RUNTIMES if name in sys.modules), None)


def fork_is_safe() -> bool:
    """Whether this process may fork: Linux, at most one Python thread besides the main one (a progress bar,
    the table cache's writer, which the child never touches) and no multithreaded runtime loaded."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() <= 2
            and threaded_runtime() is None)


def _can_fork() -> bool:
    return fork_is_safe() and not os.environ.get("TRACEVIEW_NO_FORK")


# A run's kept rows come in chunks, each holding whole devices (a host, or the hosts sharing a device): a
# ``ForEach`` applies a function of one chunk (its raw rows, and per row its op row or label) to every chunk
# and returns the results in chunk order (hostreduce.run_ops.RunOps.for_each: in forked processes); given
# ``fold=`` (:func:`added`), results that add up are added as they are made and a few sums come back instead.
ForEach = Callable[..., list[Any]]


def one_chunk(raw: Any, rows: Any) -> ForEach:
    """The ``ForEach`` of a single table (the row-level functions: every row in one chunk)."""
    return lambda task, fold=None: [task(raw, rows)]


def added(a: Any, b: Any) -> Any:
    """Two chunks' results as one: whole-number arrays summed, flag arrays or-ed, tuples of them element by
    element, None (nothing measured) the other one. Exact whatever the order and grouping: a pod's per-op sums
    (an array over every op of the run per chunk, thousands of chunks) are never all held at once."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, tuple):
        return tuple(added(x, y) for x, y in zip(a, b, strict=True))
    if a.dtype == bool:
        return a | b
    if a.dtype.kind not in "iu" or b.dtype.kind not in "iu":
        raise TypeError(f"only whole numbers add up in any order, not {a.dtype} and {b.dtype}")
    return a + b


def batches(count: int, jobs: int) -> list[range]:
    """``range(count)`` cut into contiguous runs, one forked task each, whose results it merges before they
    travel (a pod's per-host results are never all held at once). The runs shrink as they go (guided
    scheduling): each is ``1 / (2 * jobs)`` of what is left, and at least ``count / (64 * jobs)`` long, so
    the processes, taking runs as they finish one, end at most a short run's time apart, with few runs to
    merge."""
    jobs = max(jobs, 1)
    shortest = max(1, count // (64 * jobs))
    out, start = [], 0
    while start < count:
        length = max(shortest, -(-(count - start) // (2 * jobs)))
        out.append(range(start, min(count, start + length)))
        start += length
    return out
