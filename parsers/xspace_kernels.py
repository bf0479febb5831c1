"""numba kernels of xspace_fast: the XLine / XEvent / XStat wire format walked byte by byte.

Imported only when numba is installed (it raises ImportError otherwise).
Every kernel returns an error code instead of raising (see xspace_fast._ERRORS).
"""

import numpy as np
from numba import njit


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


# ---------------------------------------------------------------- one-pass wide decoding
#
# The reader's hot path: a line's events straight into per-event columns, and
# for each wanted stat id one column of (kind, bits, size), in one pass over
# the line's bytes. Every read is bounded by the message that holds it (no
# padding, no reads past a message); an error code is returned instead of
# raising (see xspace_fast._ERRORS).


# The hot loop below is written with only these three helpers, inlined by numba
# (calls returning tuples cost several times the decoding itself).


@njit(cache=True, nogil=True, inline="always")
def _vint(buf, p, end):
    """(value, position after it) of the varint at p; position -1: runs past `end`, -2: longer than 10 bytes."""
    if p >= end:
        return np.uint64(0), np.int64(-1)
    b = buf[p]
    if b < 0x80:
        return np.uint64(b), p + 1
    result = np.uint64(b & 0x7F)
    shift = np.uint64(7)
    q = p + 1
    while True:
        if q >= end:
            return np.uint64(0), np.int64(-1)
        if shift > np.uint64(63):
            return np.uint64(0), np.int64(-2)
        b = buf[q]
        q += 1
        result |= np.uint64(b & 0x7F) << shift
        if b < 0x80:
            return result, q
        shift += np.uint64(7)


@njit(cache=True, nogil=True, inline="always")
def _value(buf, wire, q, end):
    """(value, value start, value end) of a field whose tag ends at q; a negative end is minus the error code."""
    zero = np.uint64(0)
    if wire == 0:
        v, r = _vint(buf, q, end)
        if r < 0:
            return zero, q, np.int64(-5 if r == -1 else -6)
        return v, q, r
    if wire == 2:
        length, s = _vint(buf, q, end)
        if s < 0:
            return zero, q, np.int64(-4 if s == -1 else -6)
        if length > np.uint64(end - s):  # compared unsigned: a huge length cannot wrap around
            return zero, q, np.int64(-4)
        return zero, s, s + np.int64(length)
    if wire == 1 or wire == 5:
        size = np.int64(8 if wire == 1 else 4)
        if size > end - q:
            return zero, q, np.int64(-5)
        v = zero
        for i in range(size):
            v |= np.uint64(buf[q + i]) << np.uint64(8 * i)
        return v, q, q + size
    return zero, q, np.int64(-2)


@njit(cache=True, nogil=True, inline="always")
def _field(buf, p, end):
    """(field number, wire type, value, value start, value end) of the field whose tag starts at p; a
    negative end is minus the error code: 1 the tag runs past `end`, 6 a varint too long, 3 field number
    0, else _value's."""
    tag, q = _vint(buf, p, end)
    if q < 0:
        return np.int64(0), np.int64(0), np.uint64(0), p, np.int64(-1 if q == -1 else -6)
    number = np.int64(tag >> np.uint64(3))
    if number == 0:
        return number, np.int64(0), np.uint64(0), p, np.int64(-3)
    wire = np.int64(tag & np.uint64(7))
    value, vs, ve = _value(buf, wire, q, end)
    return number, wire, value, vs, ve


@njit(cache=True, nogil=True)
def line_head(buf, n):
    """A line's own fields and its event count, every top-level field checked.

    head: id, timestamp_ns, duration_ps, display_id, name start/end, display_name start/end, events, error.
    """
    head = np.zeros(10, dtype=np.int64)
    count = np.int64(0)
    p = np.int64(0)
    while p < n:
        number, wire, value, vs, ve = _field(buf, p, n)
        if ve < 0:
            head[9] = -ve
            return head
        p = ve
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
                count += 1
            elif number == 2:
                head[4] = vs
                head[5] = ve
            elif number == 11:
                head[6] = vs
                head[7] = ve
    head[8] = count
    return head


@njit(cache=True, nogil=True)
def event_position(buf, n, k):
    """Where the line's k-th event field (its tag) starts; n when it has fewer (the line was checked by line_head)."""
    seen = np.int64(0)
    p = np.int64(0)
    while p < n:
        tag, q = _vint(buf, p, n)
        if q < 0:
            return n
        if tag == np.uint64(0x22):
            if seen == k:
                return p
            seen += 1
        value, vs, ve = _value(buf, np.int64(tag & np.uint64(7)), q, n)
        if ve < 0:
            return n
        p = ve
    return n


@njit(cache=True, nogil=True)
def decode_wide(buf, p0, n, first_event, wanted, mid, off, dur, kind, bits, size):
    """The events of a line from byte p0 (a field boundary) to n, as events first_event, first_event + 1, ...

    Fills metadata id, offset, duration (int64 per event) and, for each wanted
    stat id k: kind[k] (int8: 0 absent, 1 no value, else the XStat value field
    number), bits[k] (the varint / fixed value, or where a string starts in
    `buf`), size[k] (uint32 string length); returns (events read, error code:
    see xspace_fast._ERRORS). The columns come zeroed. A stat whose leading
    metadata id is not wanted is skipped unread; else its last metadata id
    picks the column (none wanted: not kept); a stat repeated in an event: the
    last one counts. Threads may fill disjoint ranges of the same columns.
    """
    n_wanted = wanted.size
    count = mid.size
    err = np.int64(0)
    i = first_event
    p = p0
    while p < n and err == 0:
        number, wire, value, ev_start, ev_end = _field(buf, p, n)
        if ev_end < 0:
            err = -ev_end
            break
        p = ev_end
        if number != 4 or wire != 2:  # only field 4 (events, length-delimited)
            continue
        if i >= count:
            err = np.int64(8)
            break
        # one event: [ev_start, ev_end)
        r = ev_start
        while r < ev_end:
            efield, ewire, v, s, e = _field(buf, r, ev_end)
            if e < 0:
                err = -e
                break
            r = e
            if efield == 1 and ewire == 0:
                mid[i] = np.int64(v)
            elif efield == 2 and ewire == 0:
                off[i] = np.int64(v)
            elif efield == 3 and ewire == 0:
                dur[i] = np.int64(v)
            elif efield == 4 and ewire == 2:
                # one stat: [s, e)
                sid = np.int64(0)
                t = s
                if s < e:
                    lead, after = _vint(buf, s, e)
                    if after == -2:
                        err = np.int64(6)
                        break
                    if after > 0 and lead == np.uint64(8) and after < e:
                        first, t = _vint(buf, after, e)
                        if t < 0:
                            err = np.int64(7 if t == -1 else 6)
                            break
                        sid = np.int64(first)
                        col = -1
                        for k in range(n_wanted):
                            if wanted[k] == sid:
                                col = k
                                break
                        if col < 0:
                            continue  # not wanted: skipped unread
                    else:
                        t = s
                vkind = np.int8(1)
                vbits = np.uint64(0)
                vsize = np.int64(0)
                while t < e:
                    sfield, swire, sv, ss, se = _field(buf, t, e)
                    if se < 0:
                        err = -se
                        break
                    t = se
                    if sfield == 1 and swire == 0:
                        sid = np.int64(sv)
                    elif sfield >= 2 and sfield <= 7:
                        vkind = np.int8(sfield)
                        if sfield == 5 or sfield == 6:
                            vbits = np.uint64(ss)
                            vsize = se - ss
                        else:
                            vbits = sv
                            vsize = 0
                if err:
                    break
                for k in range(n_wanted):
                    if wanted[k] == sid:
                        kind[k, i] = vkind
                        bits[k, i] = vbits
                        size[k, i] = np.uint32(vsize)
                        break
        i += 1
    return i - first_event, err


# ---------------------------------------------------------------- nesting (xplane.self_times)


@njit(cache=True, nogil=True)
def nested_children(s, e, ends):
    """Per event, the time its directly nested events cover, for events in (start, longest first) order
    (``ends``: the events' ends, sorted).

    The same definition as xplane.self_times' vectorized pass, in one walk: an
    event's depth is the number of earlier events still open at its start (ends
    sorted, counted with a pointer that only moves forward, as starts only
    grow), its parent the last event seen one level up, and the part of the
    event inside its parent (none for a partial overlap past the parent's end)
    counts as the parent's children's time.
    """
    n = s.size
    children = np.zeros(n, dtype=np.int64)
    last = np.full(n, -1, dtype=np.int64)      # per depth, the last event seen at it
    closed = 0
    for i in range(n):
        while closed < n and ends[closed] <= s[i]:
            closed += 1
        depth = i - closed
        if depth > 0:
            parent = last[depth - 1]
            if parent >= 0:
                covered = min(e[i], e[parent]) - s[i]
                if covered > 0:
                    children[parent] += covered
        last[depth] = i
    return children


# ---------------------------------------------------------------- the file's outline (xspace_fast.parse_space)


@njit(cache=True, nogil=True, inline="always")
def _outline_row(out, row, plane, number, tag_at, start, end):
    """Row ``row`` of the outline, when ``out`` has room for it (a counting pass passes none)."""
    if row < out.shape[0]:
        out[row, 0] = plane
        out[row, 1] = number
        out[row, 2] = tag_at
        out[row, 3] = start
        out[row, 4] = end


@njit(cache=True, nogil=True)
def space_outline(buf, n, out):
    """The fields of an XSpace and of each of its planes, without reading any plane's lines.

    Rows of ``out`` (int64, 5 columns): plane (-1: a field of the XSpace itself, the plane's own
    number for a field inside it), field number, where the field's tag starts, where its value
    starts and ends. A plane (XSpace field 1) gives its own row, then one row per field inside it.
    With ``out`` too small, only counts. Returns (rows, 0), or (0, 1) for anything but the plain
    layout (a malformed field, a plane or line that is not length-delimited, a group): the caller
    then lets protobuf parse the file as before, so errors and odd files are handled as they were.
    """
    rows = np.int64(0)
    planes = np.int64(0)
    p = np.int64(0)
    while p < n:
        number, wire, value, vs, ve = _field(buf, p, n)
        if ve < 0 or (number == 1 and wire != 2):
            return np.int64(0), np.int64(1)
        _outline_row(out, rows, -1, number, p, vs, ve)
        rows += 1
        if number == 1:
            r = vs
            while r < ve:
                inner, inner_wire, v, s, e = _field(buf, r, ve)
                if e < 0 or (inner == 3 and inner_wire != 2):
                    return np.int64(0), np.int64(1)
                _outline_row(out, rows, planes, inner, r, s, e)
                rows += 1
                r = e
            planes += 1
        p = ve
    return rows, np.int64(0)
