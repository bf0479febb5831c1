"""How traceview's caches store their entries and how large they may grow (no heavy import: the CLI reads it
at start).

The entries live under :func:`traceview.cache_root.cache_root` (``TRACEVIEW_CACHE_DIR`` wins, else
``$XDG_CACHE_HOME/traceview``, else ``~/.cache/traceview``). ``TRACEVIEW_CACHE_MAX_MB`` (default 4096) bounds
each kind of entry (parsed tables: cache/tables.py; finished outputs: cache/results.py).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

DEFAULT_MAX_MB = 4096


def max_bytes() -> int:
    try:
        return int(float(os.environ.get("TRACEVIEW_CACHE_MAX_MB", DEFAULT_MAX_MB)) * 2**20)
    except ValueError:
        return DEFAULT_MAX_MB * 2**20


def store(entry: Path, suffix: str, write: Callable[[BinaryIO], None]) -> bool:
    """Write an entry atomically (`write` fills a temporary file in the same folder, then it is renamed
    into place) and evict what no longer fits. Any failure (read-only folder, full disk, `write`
    raising to give up) stores nothing, leaves no temporary file and returns False: never an error."""
    import tempfile  # only a cache miss stores: not for the CLI's start

    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-", suffix=suffix)
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.replace(tmp, entry)
        tmp = None
    except Exception:  # noqa: BLE001 - a cache is an accelerator: any failure is "not stored"
        return False
    finally:
        if tmp is not None:
            remove(Path(tmp))
    evict(entry.parent, suffix, keep=entry)
    return True


# (folder, suffix) -> (bytes of its entries as this process last counted them plus what it stored since,
# when it counted them): see evict.
_tallies: dict[tuple[str, str], tuple[int, float]] = {}
_RECOUNT_S = 5.0


def evict(folder: Path, suffix: str, keep: Path) -> None:
    """Drop the least recently used entries (files named *suffix in `folder`) until they fit in
    max_bytes(); `keep` (the entry just stored) goes last, when it alone is over the limit.

    The folder is counted (every entry stat'ed) at most every few seconds by a process: in between, what
    it stores is added to its last count, and only a sum over the limit counts again. A pod's hundreds of
    hosts, each stored as it is read, made counting the folder after each quadratic. Entries that other
    processes store meanwhile are seen at the next count, a few seconds later at most.
    """
    key, limit, now = (str(folder), suffix), max_bytes(), time.monotonic()
    counted = _tallies.get(key)
    if counted is not None and now - counted[1] < _RECOUNT_S:
        try:
            added = keep.stat().st_size
        except OSError:
            added = 0
        if counted[0] + added <= limit:
            _tallies[key] = (counted[0] + added, counted[1])
            return
    sized = []
    try:
        entries = [f for f in folder.iterdir() if f.name.endswith(suffix)]
    except OSError:
        return
    for f in entries:
        try:
            st = f.stat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            sized.append((st.st_mtime, st.st_size, f))
    total = sum(size for _, size, _ in sized)
    for _, size, f in sorted(sized, key=lambda t: t[0]):
        if total <= limit:
            break
        if f != keep:
            remove(f)
            total -= size
    if total > limit:
        remove(keep)
        total -= sum(size for _, size, f in sized if f == keep)
    _tallies[key] = (total, now)


def touch(path: Path) -> None:
    """Mark an entry as just used (eviction drops the least recently used first)."""
    try:
        os.utime(path)
    except OSError:
        pass


def remove(path: Path) -> None:
    """Delete a cache file if possible (a read-only folder keeps it: never an error)."""
    try:
        path.unlink()
    except OSError:
        pass
