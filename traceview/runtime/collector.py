"""Python's garbage collector run less often in the processes that read and analyze traces.

Reading a trace and analyzing it allocate millions of short-lived objects and keep a large heap of pandas'
and the analysis' objects, so Python's default thresholds (700, 10, 10) run full collections over that
heap again and again; :data:`THRESHOLDS` make them 30-70 times rarer for the same peak memory (the
measurements and their method: docs/scale.md, the garbage-collector sections of the benchmark log).

The ``traceview`` program sets them for its whole (short) life, and its forked workers inherit them
(``cli.console``); a Dask worker has them while it reads a host (:func:`fewer_collections`), its own after.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

THRESHOLDS = (20_000, 50, 50)

_lock = threading.Lock()
_blocks = 0
_saved: tuple[int, ...] | None = None


def collect_less_often() -> None:
    """:data:`THRESHOLDS` for the rest of this process."""
    gc.set_threshold(*THRESHOLDS)


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """:data:`THRESHOLDS` (or the process's own where they are higher) while blocks run, the process's own
    once the last one running ends (blocks may run in several threads at once)."""
    global _blocks, _saved
    with _lock:
        if _blocks == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*(max(mine, theirs) for mine, theirs in zip(THRESHOLDS, _saved)))
        _blocks += 1
    try:
        yield
    finally:
        with _lock:
            _blocks -= 1
            if _blocks == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None
