"""Interval arithmetic on numpy arrays: unions, and how much of each interval another set covers.

Used for idle time (a device's span not covered by any op) and for the
exposed time of asynchronous collectives (their time not overlapped by
compute). Everything is vectorized: O(n log n), no Python loop per interval.
"""

from __future__ import annotations

import numpy as np

# Rows per step of the passes that walk a long sorted column in steps (union_in_steps, and host_ops'
# device pass): their working columns stay this long, whatever the table's length.
STEP_ROWS = 1 << 18


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint, sorted intervals covering exactly the union of [starts, ends)."""
    u_starts, u_ends, _ = tagged_union(starts, ends, None)
    return u_starts, u_ends


def union_in_steps(starts: np.ndarray, durations: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`union` of [start, start + duration) for starts in order (None when they are not), walked in
    steps of STEP_ROWS intervals carrying the running maximum of the ends and the open block: no working
    column (ends, their running maximum) as long as the input."""
    n = starts.size
    if n and not (starts[1:] >= starts[:-1]).all():
        return None
    out_starts: list[np.ndarray] = []
    out_ends: list[np.ndarray] = []
    reach_before = None       # the running maximum of the ends before the step (None: no interval yet)
    for a in range(0, n, STEP_ROWS):
        s = np.asarray(starts[a:a + STEP_ROWS], dtype=np.int64)
        e = s + np.asarray(durations[a:a + STEP_ROWS], dtype=np.int64)
        keep = e > s
        if not keep.all():
            s, e = s[keep], e[keep]
        if not s.size:
            continue
        reach = np.maximum.accumulate(e)
        if reach_before is not None:
            np.maximum(reach, reach_before, out=reach)
        new = np.empty(s.size, dtype=bool)
        new[0] = reach_before is None or bool(s[0] > reach_before)
        np.greater(s[1:], reach[:-1], out=new[1:])
        first = np.flatnonzero(new)
        if reach_before is not None and first.size:      # the block open before the step ends here
            out_ends.append(np.array([reach_before if first[0] == 0 else reach[first[0] - 1]], dtype=np.int64))
        out_starts.append(s[first])
        out_ends.append(reach[first[1:] - 1])
        reach_before = reach[-1]
    if reach_before is None:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    out_ends.append(np.array([reach_before], dtype=np.int64))  # the last block
    return np.concatenate(out_starts), np.concatenate(out_ends)


def tagged_union(starts: np.ndarray, ends: np.ndarray,
                 tags: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """:func:`union`, and per disjoint interval the tag of the first interval it grew from (e.g. the
    group of intervals kept apart on the time axis, so no union interval spans two tags)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
        tags = None if tags is None else tags[keep]
    if starts.size == 0:
        return starts, ends, tags
    if not (starts[1:] >= starts[:-1]).all():     # the reader's rows are mostly in time order already
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        tags = None if tags is None else tags[order]
    reach = np.maximum.accumulate(ends)
    # A new block starts where an interval begins after everything before it ended; a block ends
    # where the running maximum of ends stands just before the next block (or the last interval).
    new_block = np.empty(starts.size, dtype=bool)
    new_block[0] = True
    np.greater(starts[1:], reach[:-1], out=new_block[1:])
    first = np.flatnonzero(new_block)
    last = np.append(first[1:] - 1, starts.size - 1)
    return starts[first], reach[last], None if tags is None else tags[first]


def covered_length(starts: np.ndarray, ends: np.ndarray,
                   u_starts: np.ndarray, u_ends: np.ndarray) -> np.ndarray:
    """For each query [starts[i], ends[i]), the length covered by the disjoint union (u_starts, u_ends)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if u_starts.size == 0:
        return np.zeros(starts.size, dtype=np.int64)
    lengths = u_ends - u_starts
    before = np.concatenate(([0], np.cumsum(lengths)[:-1]))

    def measure_below(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(u_starts, x, side="right") - 1
        inside = i >= 0
        j = np.where(inside, i, 0)
        part = np.clip(x - u_starts[j], 0, lengths[j])
        return np.where(inside, before[j] + part, 0)

    return np.maximum(measure_below(ends) - measure_below(starts), 0)


def total_length(u_starts: np.ndarray, u_ends: np.ndarray) -> int:
    return int((u_ends - u_starts).sum())


def intersect(a_starts: np.ndarray, a_ends: np.ndarray,
              b_starts: np.ndarray, b_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The intersection of two disjoint, sorted interval sets, itself disjoint and sorted."""
    starts, ends, _ = pieces_within(a_starts, a_ends, b_starts, b_ends)
    return starts, ends


def pieces_within(a_starts: np.ndarray, a_ends: np.ndarray,
                  b_starts: np.ndarray, b_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each interval of ``a`` (sorted by start; they may touch or overlap) cut to the disjoint, sorted set
    ``b``: the pieces, and for each the index of the ``a`` interval it came from.

    Each interval of ``a`` meets a contiguous run of ``b`` (found by searchsorted); the pieces are the
    pairwise overlaps, built without a Python loop per interval.
    """
    a_starts, a_ends = np.asarray(a_starts, dtype=np.int64), np.asarray(a_ends, dtype=np.int64)
    b_starts, b_ends = np.asarray(b_starts, dtype=np.int64), np.asarray(b_ends, dtype=np.int64)
    if a_starts.size == 0 or b_starts.size == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, empty
    first = np.searchsorted(b_ends, a_starts, side="right")      # first b ending after a starts
    stop = np.searchsorted(b_starts, a_ends, side="left")        # b starting before a ends
    counts = np.maximum(stop - first, 0)
    which_a = np.repeat(np.arange(a_starts.size), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    which_b = np.repeat(first, counts) + offsets
    starts = np.maximum(a_starts[which_a], b_starts[which_b])
    ends = np.minimum(a_ends[which_a], b_ends[which_b])
    keep = ends > starts
    return starts[keep], ends[keep], which_a[keep]


def complement(u_starts: np.ndarray, u_ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The gaps of a disjoint, sorted interval set within [lo, hi)."""
    u_starts, u_ends = intersect(u_starts, u_ends, np.array([lo]), np.array([hi]))
    starts = np.concatenate(([lo], u_ends)).astype(np.int64)
    ends = np.concatenate((u_starts, [hi])).astype(np.int64)
    keep = ends > starts
    return starts[keep], ends[keep]


def subtract(a_starts: np.ndarray, a_ends: np.ndarray,
             b_starts: np.ndarray, b_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a`` less ``b`` (both disjoint and sorted)."""
    if np.asarray(a_starts).size == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    lo, hi = int(np.min(a_starts)), int(np.max(a_ends))
    return intersect(a_starts, a_ends, *complement(b_starts, b_ends, lo, hi))
