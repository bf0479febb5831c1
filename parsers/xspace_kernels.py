"""numba kernels of xspace_fast: the XLine / XEvent / XStat wire format walked byte by byte.

Imported only when numba is installed (it raises ImportError otherwise).
Every kernel returns an error code instead of raising (see xspace_fast._ERRORS).
"""

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def byte_at(buf, i):
    """buf[i], or 0 past the end (as if the buffer were zero-padded: every check then sees the overrun)."""
    if i < buf.size:
        return buf[i]
    return np.uint8(0)


@njit(cache=True, inline="always")
def varint(buf, pos):
    result = np.uint64(0)
    shift = np.uint64(0)
    for i in range(10):
        b = byte_at(buf, pos + i)
        result |= np.uint64(b & 0x7F) << shift
        if b < 0x80:
            return result, pos + i + 1
        shift += np.uint64(7)
    return result, -1

@njit(cache=True, inline="always")
def field(buf, p, end):
    """One field at p: (field number, wire, value, value start, value end, error)."""
    tag, p = varint(buf, p)
    if p < 0:
        return 0, 0, np.uint64(0), 0, 0, 6
    if p > end:
        return 0, 0, np.uint64(0), 0, 0, 1
    wire = np.int64(tag & np.uint64(7))
    number = np.int64(tag >> np.uint64(3))
    if wire != 0 and wire != 1 and wire != 2 and wire != 5:
        return 0, 0, np.uint64(0), 0, 0, 2
    if number == 0:
        return 0, 0, np.uint64(0), 0, 0, 3
    value = np.uint64(0)
    v_start = p
    v_end = p
    if wire == 0:
        value, v_end = varint(buf, p)
        if v_end < 0:
            return 0, 0, np.uint64(0), 0, 0, 6
    elif wire == 2:
        length, v_start = varint(buf, p)
        if v_start < 0:
            return 0, 0, np.uint64(0), 0, 0, 6
        room = end - v_start
        if room < 0 or length > np.uint64(room):
            return 0, 0, np.uint64(0), 0, 0, 4
        v_end = v_start + np.int64(length)
    else:
        size = 8 if wire == 1 else 4
        for i in range(size):
            value |= np.uint64(byte_at(buf, p + i)) << np.uint64(8 * i)
        v_end = p + size
    if v_end > end:
        return 0, 0, np.uint64(0), 0, 0, 5
    return number, wire, value, v_start, v_end, 0

@njit(cache=True)
def scan_line(buf, n):
    # head: id, timestamp_ns, duration_ps, display_id, name start/end, display_name start/end, error
    head = np.zeros(9, dtype=np.int64)
    count = 0
    p = 0
    while p < n:
        number, wire, value, vs, ve, err = field(buf, p, n)
        if err:
            head[8] = err
            return head, np.zeros(0, np.int64), np.zeros(0, np.int64)
        if number == 4 and wire == 2:
            count += 1
        p = ve
    starts = np.empty(count, dtype=np.int64)
    ends = np.empty(count, dtype=np.int64)
    k = 0
    p = 0
    while p < n:
        number, wire, value, vs, ve, err = field(buf, p, n)
        if wire == 0:
            v = np.int64(value)
            if number == 1:
                head[0] = v
            elif number == 3:
                head[1] = v
            elif number == 9:
                head[2] = v
            elif number == 10:
                head[3] = v
        elif wire == 2:
            if number == 4:
                starts[k] = vs
                ends[k] = ve
                k += 1
            elif number == 2:
                head[4] = vs
                head[5] = ve
            elif number == 11:
                head[6] = vs
                head[7] = ve
        p = ve
    return head, starts, ends

@njit(cache=True, inline="always")
def stat_lead(buf, s, e, keep, filtered):
    """(kept, first id, where the rest starts, error) of the stat at [s, e)."""
    tag, after_tag = varint(buf, s)
    if after_tag < 0:
        return False, np.uint64(0), s, 6
    if tag == 8 and after_tag < e:
        sid, after_id = varint(buf, after_tag)
        if after_id < 0:
            return False, np.uint64(0), s, 6
        if after_id > e:
            return False, np.uint64(0), s, 7
        kept = True
        if filtered:
            sid64 = np.int64(sid)
            i = np.searchsorted(keep, sid64)
            kept = i < keep.size and keep[i] == sid64
        return kept, sid, after_id, 0
    return True, np.uint64(0), s, 0

@njit(cache=True)
def count_stats(buf, starts, ends, keep, filtered):
    out = np.zeros(2, dtype=np.int64)  # kept stats, error
    for i in range(starts.size):
        p, end = starts[i], ends[i]
        while p < end:
            number, wire, value, vs, ve, err = field(buf, p, end)
            if err:
                out[1] = err
                return out
            if number == 4 and wire == 2:
                kept, sid, rest, err = stat_lead(buf, vs, ve, keep, filtered)
                if err:
                    out[1] = err
                    return out
                if kept:
                    out[0] += 1
            p = ve
    return out

@njit(cache=True)
def decode(buf, starts, ends, keep, filtered, m):
    n = starts.size
    mid = np.zeros(n, dtype=np.int64)
    off = np.zeros(n, dtype=np.int64)
    dur = np.zeros(n, dtype=np.int64)
    s_event = np.zeros(m, dtype=np.int64)
    s_id = np.zeros(m, dtype=np.int64)
    s_kind = np.zeros(m, dtype=np.int8)
    s_bits = np.zeros(m, dtype=np.uint64)
    s_start = np.zeros(m, dtype=np.int64)
    s_end = np.zeros(m, dtype=np.int64)
    error = 0
    j = 0
    for i in range(n):
        p, end = starts[i], ends[i]
        while p < end:
            number, wire, value, vs, ve, err = field(buf, p, end)
            if wire == 0:
                if number == 1:
                    mid[i] = np.int64(value)
                elif number == 2:
                    off[i] = np.int64(value)
                elif number == 3:
                    dur[i] = np.int64(value)
            elif number == 4 and wire == 2:
                kept, sid, q, err = stat_lead(buf, vs, ve, keep, filtered)
                if kept:
                    s_event[j] = i
                    s_id[j] = np.int64(sid)
                    while q < ve:
                        f2, w2, v2, vs2, ve2, err2 = field(buf, q, ve)
                        if err2:
                            error = err2
                            break
                        if f2 == 1 and w2 == 0:
                            s_id[j] = np.int64(v2)
                        elif f2 >= 2 and f2 <= 7:
                            s_kind[j] = f2
                            s_bits[j] = v2
                            s_start[j] = vs2
                            s_end[j] = ve2
                        q = ve2
                    j += 1
            p = ve
    return mid, off, dur, s_event, s_id, s_kind, s_bits, s_start, s_end, error



@njit(cache=True)
def slice_hashes(buf, starts, ends):
    """FNV-1a 64-bit hash of each buf[start:end]."""
    out = np.empty(starts.size, dtype=np.uint64)
    for i in range(starts.size):
        h = np.uint64(14695981039346656037)
        for p in range(starts[i], ends[i]):
            h = (h ^ np.uint64(buf[p])) * np.uint64(1099511628211)
        out[i] = h
    return out


@njit(cache=True)
def slices_equal(buf, starts, ends, ref_starts, ref_ends):
    """Whether every buf[start:end] equals its buf[ref_start:ref_end] (hash collisions check)."""
    for i in range(starts.size):
        n = ends[i] - starts[i]
        if n != ref_ends[i] - ref_starts[i]:
            return False
        for k in range(n):
            if buf[starts[i] + k] != buf[ref_starts[i] + k]:
                return False
    return True
