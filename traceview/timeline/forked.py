"""A pod's merged analysis spread over the cores: per host (or device) work run in forked processes.

Once a pod's hosts are merged, what is left is measured host by host or device by device (the kept rows'
overlaps and steps, the idle causes, the stragglers: ``timeline.run_ops``, ``advice``), in the parent, after
the last host was read, on one core. :func:`fork_map` runs those pieces in ``jobs`` processes forked from the
parent: they inherit everything it holds (the merged parts, and the spilled arrays' memory maps, whose files
are already unlinked), so only an index goes to each and only its small result comes back. The results come
in the items' order and the callers combine them as they would one by one: the output is the same byte for
byte whatever ``jobs`` is.

Forked only where forking is safe: Linux, no other Python thread running but the main one and at most one
helper (the table cache's writer, a progress bar), and where there are at least two items and two jobs; else
one by one, here. A process that ran JAX forks too (its threads are native ones the children never call into,
as for the reading pool: traceview.trace.hosts), without JAX's warning about it. ``TRACEVIEW_NO_FORK=1``:
never.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


def fork_map(task: Callable[[int], Any], count: int, jobs: int) -> list[Any]:
    """``[task(i) for i in range(count)]``, computed by ``jobs`` processes when it can be: this one and
    ``jobs - 1`` forked from it, each taking the next item until none is left."""
    jobs = min(jobs, count)
    if jobs <= 1 or not _can_fork():
        return [task(i) for i in range(count)]
    import multiprocessing

    try:
        counter = multiprocessing.get_context("fork").Value("q", 0)
    except OSError:              # no shared semaphores here (a /dev/shm the process may not write)
        return [task(i) for i in range(count)]
    return _Workers(task, count, jobs, counter).results()


class _Workers:
    """The forked half of :func:`fork_map`. The processes share a counter (the next item); each child pickles
    its ``(index, result)`` pairs into a pipe of its own once the items run out, and the parent reads them
    after its own share: its results never travel, and a child that dies is an error, not a hang."""

    def __init__(self, task: Callable[[int], Any], count: int, jobs: int, counter: Any) -> None:
        self.task, self.count, self.next = task, count, counter
        self.children: list[tuple[int, int]] = []     # (pid, read end of its pipe)
        gc.freeze()             # the children's collections leave the inherited objects' pages alone
        try:
            with warnings.catch_warnings():
                # JAX warns at every fork of a process that ran it; the children never call into JAX
                warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
                for _ in range(jobs - 1):
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
                answer = self._share()
                try:
                    data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception:         # noqa: BLE001 - an error or a result that does not pickle
                    failed = answer.index if isinstance(answer, _Failed) else 0
                    data = pickle.dumps(_Failed(failed, RuntimeError(f"a forked task's answer does not pickle: "
                                                                     f"{answer!r:.200}")))
                with os.fdopen(write, "wb") as out:
                    out.write(data)
                code = 0
            except BaseException:         # noqa: BLE001 - an interrupt, a closed pipe: the parent sees the status
                pass
            finally:
                os._exit(code)
        os.close(write)
        self.children.append((pid, read))

    def _share(self) -> list[tuple[int, Any]] | _Failed:
        """This process's items and their results, or the first error one raised."""
        done: list[tuple[int, Any]] = []
        while True:
            with self.next.get_lock():
                index = self.next.value
                self.next.value = index + 1
            if index >= self.count:
                return done
            try:
                done.append((index, self.task(index)))
            except Exception as exc:     # noqa: BLE001 - it reaches the caller
                with self.next.get_lock():
                    self.next.value = self.count      # every process stops taking items
                return _Failed(index, exc)

    def results(self) -> list[Any]:
        try:
            mine = self._share()
            answers = [mine] + [self._answer(pid, read) for pid, read in self.children]
        finally:
            self._stop()
        failed = [a for a in answers if isinstance(a, _Failed)]
        if failed:
            raise min(failed, key=lambda f: f.index).error
        out: list[Any] = [None] * self.count
        for answer in answers:
            for index, value in answer:
                out[index] = value
        return out

    def _answer(self, pid: int, read: int) -> Any:
        with os.fdopen(read, "rb") as pipe:
            data = pipe.read()
        self.children = [c for c in self.children if c[0] != pid]
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0 or not data:
            raise RuntimeError(f"a forked process of traceview ended without its results "
                               f"(exit status {os.waitstatus_to_exitcode(status)})")
        return pickle.loads(data)

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


def fork_map_items(task: Callable[[Any], Any], items: Sequence[Any], jobs: int) -> list[Any]:
    """:func:`fork_map` over a sequence's items."""
    return fork_map(lambda i: task(items[i]), len(items), jobs)


@dataclass
class _Failed:
    index: int
    error: BaseException


def _can_fork() -> bool:
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() <= 2
            and not os.environ.get("TRACEVIEW_NO_FORK"))


# A run's kept rows come in chunks, each holding whole devices (a host, or the hosts sharing a device): a
# ``ForEach`` applies a function of one chunk (its raw rows, and per row its op row or label) to every chunk
# and returns the results in chunk order (timeline.run_ops.RunOps.for_each: in forked processes).
ForEach = Callable[[Callable[[Any, Any], Any]], list[Any]]


def one_chunk(raw: Any, rows: Any) -> ForEach:
    """The ``ForEach`` of a single table (the row-level functions: every row in one chunk)."""
    return lambda task: [task(raw, rows)]


def batches(count: int, jobs: int) -> list[range]:
    """``range(count)`` cut into at most ``16 * jobs`` contiguous runs (one forked task each, whose results
    it merges before they travel: a pod's per-host results never all held at once). Sixteen per process:
    the processes take runs as they finish one, so they end at most a run's time apart."""
    parts = max(1, min(count, 16 * max(jobs, 1)))
    bounds = [count * k // parts for k in range(parts + 1)]
    return [range(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
