"""Self time: an event's duration minus the time its directly nested events cover.

Both readers time every op row and host event this way, on each line
separately. The arithmetic runs in the compiled kernels
(:mod:`traceview.parsers.native.kernels`) when they are loaded, else in numpy.
"""

from __future__ import annotations

import numpy as np

from traceview.parsers.native import loader


def _in_order(s: np.ndarray, e: np.ndarray) -> bool:
    """Whether (start, longest first) order is the order the events already have (lines usually are)."""
    later = s[1:] > s[:-1]
    if later.all():
        return True
    tie = ~later
    return bool((s[1:][tie] == s[:-1][tie]).all() and (e[1:][tie] <= e[:-1][tie]).all())


def self_times(start: np.ndarray, duration: np.ndarray) -> np.ndarray:
    """Duration minus the time covered by directly nested events of the same line.

    Events sorted by (start, longest first); an event's depth is the number
    of earlier events still open at its start, and its parent is the last
    event one level up. Partial overlaps count only the overlapping part;
    zero-length events neither have nor are children. One compiled pass when
    the reader's kernels are loaded (a line in that order already: no
    temporary column), else one vectorized pass per level.
    """
    if loader.loaded():
        in_order = _self_times_in_order(start, duration)
        if in_order is not None:
            return in_order
    self_ps = duration.astype(np.int64, copy=True)
    idx = np.flatnonzero(duration > 0)
    if idx.size < 2:
        return self_ps
    s = start[idx] if idx.size < start.size else start
    e = s + (duration[idx] if idx.size < start.size else duration)
    if np.all(s[1:] >= np.maximum.accumulate(e)[:-1]):
        return self_ps  # in time order already and nothing overlaps: the common case on GPU streams
    if not _in_order(s, e):
        order = np.lexsort((-e, s))
        s, e, idx = s[order], e[order], idx[order]
        if np.all(s[1:] >= np.maximum.accumulate(e)[:-1]):
            return self_ps  # nothing overlaps once in order
    children = nested_children(s, e)
    self_ps[idx] = np.maximum(duration[idx] - children, 0)
    return self_ps


def _self_times_in_order(start: np.ndarray, duration: np.ndarray) -> np.ndarray | None:
    """The compiled kernel's self times of a line in (start, longest first) order, in one pass and no
    temporary column; None when its events are not in that order (the kernels must be loaded)."""
    start = np.ascontiguousarray(start, dtype=np.int64)
    duration = np.ascontiguousarray(duration, dtype=np.int64)
    out, heap, last = (np.empty(duration.size, dtype=np.int64) for _ in range(3))  # untouched room costs nothing
    return out if loader.kernels().self_times_in_order(start, duration, out, heap, last) else None


def nested_children(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per event, the time its directly nested events cover, for events of positive length in
    (start, longest first) order (``s`` starts, ``e`` ends): an event's depth is the number of earlier events
    still open at its start, its parent the last event one level up, and the part of it inside its parent
    counts.

    One definition in two forms: the compiled walk (``native.kernels.nested_children``, one sequential
    pass) when the kernels are loaded, else :func:`_nested_children_by_level`. The walk needs each
    event's predecessor one level up, which numpy cannot find in one vectorized pass; numba is optional,
    so the walk cannot be the only form. tests/integration/test_xplane.py checks that both agree.
    """
    if not loader.loaded():
        return _nested_children_by_level(s, e)
    s, e = np.ascontiguousarray(s, dtype=np.int64), np.ascontiguousarray(e, dtype=np.int64)
    children = np.zeros(s.size, dtype=np.int64)
    # numpy sorts the ends faster than the kernel would
    loader.kernels().nested_children(s, e, np.sort(e), children, np.full(s.size, -1, dtype=np.int64))
    return children


def _nested_children_by_level(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """nested_children without the kernels: one vectorized pass per nesting level."""
    closed = np.searchsorted(np.sort(e), s, side="right")
    depth = np.arange(s.size) - closed
    children = np.zeros(s.size, dtype=np.int64)
    # Events grouped by depth once (each group in start order): no pass over all events per level.
    by_depth = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[by_depth], np.arange(int(depth.max()) + 2))
    for d in range(1, int(depth.max()) + 1):
        child = by_depth[bounds[d]:bounds[d + 1]]
        parents_pool = by_depth[bounds[d - 1]:bounds[d]]
        if child.size == 0 or parents_pool.size == 0:
            continue
        k = np.searchsorted(parents_pool, child) - 1
        ok = k >= 0
        child, parent = child[ok], parents_pool[k[ok]]
        covered = np.minimum(e[child], e[parent]) - s[child]
        np.add.at(children, parent, np.maximum(covered, 0))
    return children
