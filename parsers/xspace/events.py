"""One XLine's events as numpy columns, decoded straight from the wire bytes, with typed access to
per-event stats by name.

Lines are decoded by :func:`traceview.parsers.xspace.schema.decode_wide`
(compiled by :mod:`traceview.parsers.xspace.fast` when numba is there: no
Python object per event); only the stats a line's rules ask for are decoded.
Text stats stay codes into distinct strings, each string decoded once.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from traceview.errors import TraceError
from traceview.parsers.tables.columns import Vocab
from traceview.parsers.tables.conventions import MAX_TIME_PS
from traceview.parsers.xspace.plane import PlaneView
from traceview.parsers.xspace.schema import (
    STAT_BYTES,
    STAT_DOUBLE,
    STAT_REF,
    STAT_STR,
    WideEvents,
    WireError,
    decode_wide,
)

_FAST_MIN_STRINGS = 100_000  # string stats decoded by hash (numba) from this many on


def _valid_events(cols: WideEvents, line_ps: int) -> tuple[WideEvents, int]:
    """The events whose line start, offset and duration are non-negative and whose end stays within MAX_TIME_PS;
    and how many are not."""
    if not 0 <= line_ps <= MAX_TIME_PS:  # times count from the session start: never before it
        good = np.zeros(len(cols), dtype=bool)
    elif not len(cols) or _all_valid(cols.offset_ps, cols.duration_ps, line_ps):
        return cols, 0
    else:
        off, dur = cols.offset_ps, cols.duration_ps
        good = (off >= 0) & (dur >= 0) & (off <= MAX_TIME_PS) & (dur <= MAX_TIME_PS)
        good &= off + np.where(good, dur, 0) <= MAX_TIME_PS - max(line_ps, 0)
    bad = int(good.size - np.count_nonzero(good))
    if not bad:
        return cols, 0
    return dataclasses.replace(
        cols, metadata_id=cols.metadata_id[good], offset_ps=cols.offset_ps[good], duration_ps=cols.duration_ps[good],
        kind=cols.kind[:, good], bits=cols.bits[:, good], size=cols.size[:, good]), bad


def _all_valid(off: np.ndarray, dur: np.ndarray, line_ps: int) -> bool:
    """Whether every event is valid, from four reductions (no column allocated): the usual case."""
    off_max, dur_max = int(off.max()), int(dur.max())
    return (int(off.min()) >= 0 and int(dur.min()) >= 0 and off_max <= MAX_TIME_PS and dur_max <= MAX_TIME_PS
            and off_max + dur_max <= MAX_TIME_PS - line_ps)


class LineEvents:
    """One line's events as columns, with typed access to per-event stats by name.

    Events with negative or overflowing times are dropped here (counted in
    ``counter["events"]``); the reader warns with the count.
    """

    def __init__(self, view: PlaneView, line, path: str, stats: tuple[str, ...] = (),
                 counter: dict[str, int] | None = None) -> None:
        names = [n for n in dict.fromkeys(stats) if n in view.stat_ids]
        self._column = {n: k for k, n in enumerate(names)}
        keep = np.array([view.stat_ids[n] for n in names], dtype=np.int64)
        try:
            cols = decode_wide(line.events, keep)
        except WireError as exc:
            raise TraceError(f"{path}: corrupt events on line {line.name!r} ({exc})") from exc
        line_ps = int(line.timestamp_ns) * 1000
        self.cols, dropped = _valid_events(cols, line_ps)
        self.counter = counter if counter is not None else {}
        self.counter["events"] = self.counter.get("events", 0) + dropped
        self.view = view
        self.mid = self.cols.metadata_id
        # The offsets become start times in place (a column of their own: nothing reads the offsets after).
        self.start = self.cols.offset_ps
        self.start += np.int64(line_ps if dropped < len(cols) else 0)
        self.duration = self.cols.duration_ps

    def __len__(self) -> int:
        return self.duration.size

    def has_stat(self, name: str) -> bool:
        """Whether the stat was asked for and the plane knows it (else every event lacks it)."""
        return name in self._column

    def release(self) -> None:
        """Drop the decoded stats and metadata ids (the caller is done with them): only start and duration
        stay. Keeps the peak of a large line's read lower."""
        self._column = {}
        self.mid = np.zeros(0, dtype=np.int64)
        self.cols = dataclasses.replace(self.cols, metadata_id=self.mid, offset_ps=self.mid, duration_ps=self.mid,
                                        kind=np.zeros((0, 0), np.int8), bits=np.zeros((0, 0), np.uint64),
                                        size=np.zeros((0, 0), np.uint32))

    def _stat(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        k = self._column.get(name)
        if k is None:
            return None
        return self.cols.kind[k], self.cols.bits[k], self.cols.size[k]

    def ints(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(int64 value, present) per event; uint64 values keep their bits, doubles are truncated."""
        stat = self._stat(name)
        if stat is None:
            return np.zeros(len(self), dtype=np.int64), np.zeros(len(self), dtype=bool)
        kind, bits, _ = stat
        present = (kind != 0) & (kind != STAT_STR) & (kind != STAT_BYTES)
        values = np.where(present, bits.view(np.int64), 0)
        dbl = np.flatnonzero(kind == STAT_DOUBLE)
        if dbl.size:  # a double that is no int64 (NaN, inf, 1e300) is absent
            as_float = bits[dbl].view(np.float64)
            ok = np.isfinite(as_float) & (np.abs(as_float) < 2.0**63)
            present[dbl] = ok
            with np.errstate(invalid="ignore"):
                values[dbl] = np.where(ok, as_float, 0).astype(np.int64)
        return values, present

    def text_codes(self, name: str, vocab: Vocab | None = None) -> tuple[np.ndarray, list[str]]:
        """The stat as text per event: (code per event, -1 where absent; distinct strings).

        Ref values name a stat metadata; str values are decoded from UTF-8
        (each distinct one once); numbers are written in decimal; bytes count as absent.
        With ``vocab``, the codes are that vocabulary's (its strings returned).
        """
        vocab = Vocab() if vocab is None else vocab
        stat = self._stat(name)
        if stat is None:
            return np.full(len(self), -1, dtype=np.int64), vocab.strings
        kind, bits, size = stat
        if len(self) and (kind == STAT_REF).all():  # the usual GPU line (hlo_op, hlo_module): no gathers
            return _ref_codes(bits, vocab, self.view.stat_names), vocab.strings
        codes = np.full(len(self), -1, dtype=np.int64)
        ref = np.flatnonzero(kind == STAT_REF)
        if ref.size:
            inverse, distinct = _distinct_ints(bits[ref])
            codes[ref] = vocab.take(inverse, [self.view.stat_names.get(int(i), "") for i in distinct])
        text = np.flatnonzero(kind == STAT_STR)
        if text.size:
            starts = bits[text].astype(np.int64)
            inverse, strings = _distinct_slices(self.cols.buffer, starts, starts + size[text])
            codes[text] = vocab.take(inverse, strings)
        other = np.flatnonzero((kind != 0) & (kind != STAT_REF) & (kind != STAT_STR) & (kind != STAT_BYTES))
        if other.size:
            inverse, distinct = _distinct_ints(bits[other])
            codes[other] = vocab.take(inverse, [str(int(v)) for v in distinct.view(np.int64)])
        return codes, vocab.strings


def _ref_codes(values: np.ndarray, vocab: Vocab, stat_names: dict[int, str]) -> np.ndarray:
    """``vocab`` codes of the stat metadata names that ref values (uint64) point to; what
    vocab.take(_distinct_ints(values)) gives, in one gather through a table when the ids are small."""
    top = int(values.max())
    if top >= max(1 << 16, 4 * values.size):
        inverse, distinct = _distinct_ints(values)
        return vocab.take(inverse, [stat_names.get(int(i), "") for i in distinct])
    ids = values.view(np.int64)  # below 2^63 here
    seen = np.zeros(top + 1, dtype=bool)
    seen[ids] = True
    distinct = np.flatnonzero(seen)
    table = np.full(top + 1, -1, dtype=np.int64)
    table[distinct] = vocab.take(np.arange(distinct.size), [stat_names.get(int(i), "") for i in distinct.tolist()])
    return table[ids]


def _distinct_ints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each value in the distinct values, the distinct values sorted) of a uint64 array."""
    top = int(values.max())
    if top < max(1 << 16, 4 * values.size):  # small ids (stat metadata ids): a lookup table, no sort
        values = values.view(np.int64)  # below 2^63 here: the same numbers, and faster to index with
        seen = np.zeros(top + 1, dtype=bool)
        seen[values] = True
        distinct = np.flatnonzero(seen)
        lookup = np.zeros(top + 1, dtype=np.int64)
        lookup[distinct] = np.arange(distinct.size)
        return lookup[values], distinct.astype(np.uint64)
    distinct, inverse = np.unique(values, return_inverse=True)
    return inverse.reshape(-1), distinct


def _distinct_slices(buffer: bytes | memoryview, starts: np.ndarray,
                     ends: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(index into the strings of each buffer[start:end], the distinct decoded strings); each decoded once."""
    if starts.size >= _FAST_MIN_STRINGS:
        from traceview.parsers.xspace import fast as xspace_fast

        fast = xspace_fast.distinct_slices(buffer, starts, ends)
        if fast is not None:
            return fast
    memo: dict[bytes, int] = {}
    get = memo.get
    inverse = np.empty(starts.size, dtype=np.int64)
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        b = bytes(buffer[s:e])
        code = get(b)
        if code is None:
            code = memo[b] = len(memo)
        inverse[i] = code
    return inverse, [b.decode("utf-8", "replace") for b in memo]


def _decoded(buffer: bytes | memoryview, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Object array of the UTF-8 strings at buffer[start:end]; each distinct string decoded once."""
    inverse, strings = _distinct_slices(buffer, starts, ends)
    texts = np.empty(len(strings), dtype=object)
    texts[:] = strings
    return texts[inverse]
