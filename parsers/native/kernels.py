"""numba kernels of the compiled tier: the XLine / XEvent / XStat wire format walked byte by byte, and
the nesting of a line's events (loaded by native.loader; called by xspace.fast and tables.nesting).

Imported only when numba is installed (it raises ImportError otherwise).
Every kernel returns an error code instead of raising (see xspace.fast._ERRORS).
"""

import numpy as np
from numba import njit


@njit(cache=True)
def slice_hashes(buf, starts, ends, out):
    """FNV-1a 64-bit hash of each buf[start:end], into ``out``."""
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
# raising (see xspace.fast._ERRORS).


# The loops over a line (line_head, event_position, decode_wide) call only
# _vint and _fixed, and write each field's checks out where they read it:
# numba's inline="always" of the tuple-returning _field (five values, several
# exits) made them 4-8 times slower, and so did a _vint that zeroes its value
# on error (measured: docs/scale.md, "GPU cold at parity with xprof-rs").
# LLVM inlines the small helpers itself. _field and _value serve the file's
# outline (a few hundred fields).


@njit(cache=True, nogil=True)
def _vint(buf, p, end):
    """(value, position after it) of the varint at p; position -1: runs past `end`, -2: longer than 10 bytes
    (the value is then meaningless)."""
    result = np.uint64(0)
    shift = np.uint64(0)
    q = p
    while True:
        if q >= end:
            q = np.int64(-1)
            break
        if shift > np.uint64(63):
            q = np.int64(-2)
            break
        b = buf[q]
        q += 1
        result |= np.uint64(b & 0x7F) << shift
        if b < 0x80:
            break
        shift += np.uint64(7)
    return result, q


@njit(cache=True, nogil=True)
def _span(buf, wire, q, end):
    """(value start, value end) of a field of wire type 1, 2 or 5 whose tag ends at q; a negative end is minus
    the error code (2: any other wire type)."""
    start = q
    stop = np.int64(-2)
    if wire == 2:
        length, s = _vint(buf, q, end)
        if s < 0:
            stop = np.int64(-4 if s == -1 else -6)
        elif length > np.uint64(end - s):  # compared unsigned: a huge length cannot wrap around
            stop = np.int64(-4)
        else:
            start = s
            stop = s + np.int64(length)
    elif wire == 1 or wire == 5:
        size = np.int64(8 if wire == 1 else 4)
        stop = q + size if size <= end - q else np.int64(-5)
    return start, stop


@njit(cache=True, nogil=True)
def _fixed(buf, start, stop):
    """The little-endian value of buf[start:stop] (a fixed32 / fixed64 field)."""
    v = np.uint64(0)
    for i in range(stop - start):
        v |= np.uint64(buf[start + i]) << np.uint64(8 * i)
    return v


@njit(cache=True, nogil=True)
def _value(buf, wire, q, end):
    """(value, value start, value end) of a field whose tag ends at q; a negative end is minus the error code."""
    if wire == 0:
        v, r = _vint(buf, q, end)
        if r < 0:
            return np.uint64(0), q, np.int64(-5 if r == -1 else -6)
        return v, q, r
    start, stop = _span(buf, wire, q, end)
    if stop < 0 or wire == 2:
        return np.uint64(0), start, stop
    return _fixed(buf, start, stop), start, stop


@njit(cache=True, nogil=True)
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
def line_head(buf, n, head):
    """A line's own fields and its event count, every top-level field checked (as _field reads them).

    head (10 zeros, filled): id, timestamp_ns, duration_ps, display_id, name start/end, display_name
    start/end, events, error.
    """
    count = np.int64(0)
    p = np.int64(0)
    while p < n:
        tag, q = _vint(buf, p, n)
        if q < 0:
            head[9] = 1 if q == -1 else 6
            return head
        number, wire = tag >> np.uint64(3), tag & np.uint64(7)
        if number == 0:
            head[9] = 3
            return head
        if wire == 0:
            v, p = _vint(buf, q, n)
            if p < 0:
                head[9] = 5 if p == -1 else 6
                return head
            if number == 1:
                head[0] = np.int64(v)
            elif number == 3:
                head[1] = np.int64(v)
            elif number == 9:
                head[2] = np.int64(v)
            elif number == 10:
                head[3] = np.int64(v)
        elif wire == 1 or wire == 5:
            w = np.int64(8 if wire == 1 else 4)
            if w > n - q:
                head[9] = 5
                return head
            p = q + w
        elif wire == 2:
            length, s = _vint(buf, q, n)
            if s < 0:
                head[9] = 4 if s == -1 else 6
                return head
            if length > np.uint64(n - s):
                head[9] = 4
                return head
            p = s + np.int64(length)
            if number == 4:
                count += 1
            elif number == 2:
                head[4] = s
                head[5] = p
            elif number == 11:
                head[6] = s
                head[7] = p
        else:
            head[9] = 2
            return head
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
        wire = tag & np.uint64(7)
        if wire == 0:
            _, p = _vint(buf, q, n)
        elif wire == 2:
            if tag == np.uint64(0x22):
                if seen == k:
                    return p
                seen += 1
            length, s = _vint(buf, q, n)
            if s < 0 or length > np.uint64(n - s):
                return n
            p = s + np.int64(length)
        elif wire == 1 or wire == 5:
            p = q + np.int64(8 if wire == 1 else 4)
        else:
            return n
        if p < 0 or p > n:
            return n
    return n


@njit(cache=True, nogil=True)
def decode_wide(buf, p0, n, first_event, wanted, mid, off, dur, kind, bits, size):
    """The events of a line from byte p0 (a field boundary) to n, as events first_event, first_event + 1, ...

    Fills metadata id, offset, duration (int64 per event) and, for each wanted
    stat id k: kind[k] (int8: 0 absent, 1 no value, else the XStat value field
    number), bits[k] (the varint / fixed value, or where a string starts in
    `buf`), size[k] (uint32 string length); returns (events read, error code:
    see xspace.fast._ERRORS; the count is meaningless then). The columns come
    zeroed. A stat whose leading metadata id is not wanted is skipped unread;
    else its last metadata id picks the column (none wanted: not kept); a stat
    repeated in an event: the last one counts. Threads may fill disjoint
    ranges of the same columns. Every field is checked as _field checks it
    (the same error codes), written out at each level for speed (see above).
    """
    n_wanted = wanted.size
    count = mid.size
    err = np.int64(0)
    i = first_event
    p = p0
    while p < n:  # a field of the line: only field 4 (events, length-delimited) is read
        tag, q = _vint(buf, p, n)
        if q < 0:
            err = np.int64(1 if q == -1 else 6)
            break
        number = tag >> np.uint64(3)
        wire = tag & np.uint64(7)
        if number == 0:
            err = np.int64(3)
            break
        if wire == 0:
            v, p = _vint(buf, q, n)
            if p < 0:
                err = np.int64(5 if p == -1 else 6)
                break
            continue
        if wire == 1 or wire == 5:
            w = np.int64(8 if wire == 1 else 4)
            if w > n - q:
                err = np.int64(5)
                break
            p = q + w
            continue
        if wire != 2:
            err = np.int64(2)
            break
        length, ev_start = _vint(buf, q, n)
        if ev_start < 0:
            err = np.int64(4 if ev_start == -1 else 6)
            break
        if length > np.uint64(n - ev_start):
            err = np.int64(4)
            break
        ev_end = ev_start + np.int64(length)
        p = ev_end
        if number != 4:
            continue
        if i >= count:
            err = np.int64(8)
            break
        # one event: [ev_start, ev_end)
        r = ev_start
        while r < ev_end:
            etag, rq = _vint(buf, r, ev_end)
            if rq < 0:
                err = np.int64(1 if rq == -1 else 6)
                break
            efield = etag >> np.uint64(3)
            ewire = etag & np.uint64(7)
            if efield == 0:
                err = np.int64(3)
                break
            if ewire == 0:
                v, r = _vint(buf, rq, ev_end)
                if r < 0:
                    err = np.int64(5 if r == -1 else 6)
                    break
                if efield == 1:
                    mid[i] = np.int64(v)
                elif efield == 2:
                    off[i] = np.int64(v)
                elif efield == 3:
                    dur[i] = np.int64(v)
                continue
            if ewire == 1 or ewire == 5:
                w = np.int64(8 if ewire == 1 else 4)
                if w > ev_end - rq:
                    err = np.int64(5)
                    break
                r = rq + w
                continue
            if ewire != 2:
                err = np.int64(2)
                break
            slen, s = _vint(buf, rq, ev_end)
            if s < 0:
                err = np.int64(4 if s == -1 else 6)
                break
            if slen > np.uint64(ev_end - s):
                err = np.int64(4)
                break
            e = s + np.int64(slen)
            r = e
            if efield != 4:
                continue
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
                stag, tq = _vint(buf, t, e)
                if tq < 0:
                    err = np.int64(1 if tq == -1 else 6)
                    break
                sfield = np.int64(stag >> np.uint64(3))
                swire = stag & np.uint64(7)
                if sfield == 0:
                    err = np.int64(3)
                    break
                sv = np.uint64(0)
                ss = tq
                if swire == 0:
                    sv, t = _vint(buf, tq, e)
                    if t < 0:
                        err = np.int64(5 if t == -1 else 6)
                        break
                elif swire == 1 or swire == 5:
                    w = np.int64(8 if swire == 1 else 4)
                    if w > e - tq:
                        err = np.int64(5)
                        break
                    t = tq + w
                    sv = _fixed(buf, tq, t)
                elif swire == 2:
                    l3, ss = _vint(buf, tq, e)
                    if ss < 0:
                        err = np.int64(4 if ss == -1 else 6)
                        break
                    if l3 > np.uint64(e - ss):
                        err = np.int64(4)
                        break
                    t = ss + np.int64(l3)
                else:
                    err = np.int64(2)
                    break
                if sfield == 1 and swire == 0:
                    sid = np.int64(sv)
                elif sfield >= 2 and sfield <= 7:
                    vkind = np.int8(sfield)
                    if sfield == 5 or sfield == 6:
                        vbits = np.uint64(ss)
                        vsize = t - ss
                    else:
                        vbits = sv
                        vsize = 0
            if err:
                break
            for k in range(n_wanted):
                if wanted[k] == sid:
                    # sizes only where a string is (or was: a repeated stat's last one counts), so a
                    # column of numbers and refs leaves its zeroed (untouched) size pages unmapped
                    if vsize != 0 or kind[k, i] == 5 or kind[k, i] == 6:
                        size[k, i] = np.uint32(vsize)
                    kind[k, i] = vkind
                    bits[k, i] = vbits
                    break
        if err:
            break
        i += 1
    return i - first_event, err


# ---------------------------------------------------------------- nesting (tables.nesting.self_times)


@njit(cache=True, nogil=True)
def nested_children(s, e, ends, children, last):
    """Per event, the time its directly nested events cover (into ``children``, zeroed), for events in
    (start, longest first) order (``ends``: the events' ends, sorted; ``last``: n entries of -1).

    The same definition as tables.nesting's vectorized pass, in one walk: an
    event's depth is the number of earlier events still open at its start (ends
    sorted, counted with a pointer that only moves forward, as starts only
    grow), its parent the last event seen one level up, and the part of the
    event inside its parent (none for a partial overlap past the parent's end)
    counts as the parent's children's time.
    """
    n = s.size                                 # last: per depth, the last event seen at it
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


@njit(cache=True, nogil=True)
def self_times_in_order(start, duration, out, heap, last):
    """tables.nesting.self_times of a line whose events of positive length are in (start, longest first) order,
    straight from its columns into ``out``; returns False (``out`` unspecified) when they are not.
    ``heap``, ``last``: room for as many numbers as events (only what the nesting needs is touched).

    The same walk as nested_children, with no sorted copy of the ends: the
    earlier events still open at an event's start are kept in a min-heap of
    their ends (starts only grow, so an event closed once stays closed), its
    depth is their number. Events of no or negative length neither have nor
    are children; a self time is max(duration - children's time, 0).
    """
    n = start.size
    overlap = False
    reach = np.int64(0)
    prev_s = np.int64(0)
    prev_e = np.int64(0)
    seen = False
    for i in range(n):  # the order, and whether anything overlaps at all (then self time = duration)
        out[i] = duration[i]
        if duration[i] <= 0:
            continue
        s = start[i]
        e = s + duration[i]
        if seen:
            if s < prev_s or (s == prev_s and e > prev_e):
                return False
            if s < reach:
                overlap = True
            reach = max(reach, e)
        else:
            reach = e
            seen = True
        prev_s, prev_e = s, e
    if not overlap:
        return True
    # heap: ends of the earlier events still open (a binary min-heap); last: per depth, the last event
    # seen at it (-1: none), set up to top
    size = 0
    top = -1
    for i in range(n):
        if duration[i] <= 0:
            continue
        s = start[i]
        e = s + duration[i]
        while size > 0 and heap[0] <= s:  # pop the smallest end
            size -= 1
            moved = heap[size]
            j = 0
            while True:
                c = 2 * j + 1
                if c >= size:
                    break
                if c + 1 < size and heap[c + 1] < heap[c]:
                    c += 1
                if heap[c] >= moved:
                    break
                heap[j] = heap[c]
                j = c
            if size > 0:
                heap[j] = moved
        depth = size
        if depth > 0:
            parent = last[depth - 1]
            if parent >= 0:
                covered = min(e, start[parent] + duration[parent]) - s
                if covered > 0:
                    out[parent] -= covered
        while top < depth:
            top += 1
            last[top] = -1
        last[depth] = i
        j = size  # push e
        size += 1
        while j > 0:
            up = (j - 1) // 2
            if heap[up] <= e:
                break
            heap[j] = heap[up]
            j = up
        heap[j] = e
    for i in range(n):
        if duration[i] > 0 and out[i] < 0:
            out[i] = 0
    return True


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
