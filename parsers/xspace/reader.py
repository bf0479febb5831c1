"""Read one profiler XSpace file (``*.xplane.pb``, optionally gzipped) into traceview's tables.

What comes out (see :mod:`traceview.parsers.profile` for the columns):

* device op table: one row per op execution, counted as XProf's HLO op stats
  count occurrences (TPU: each event on the ``XLA Ops`` line; GPU: each kernel
  or memcpy on a ``Stream #N`` line, so an HLO op run as several kernels has
  several rows; CPU-only traces: each host event carrying an ``hlo_op`` stat);
* host event table: everything on host threads that is not an op row;
* steps, devices, environment strings (jax / jaxlib versions, profile times);
* the HloProto bytes of ``/host:metadata``, keyed as that plane names them:
  ``"<module>(<program id>)"``, e.g. ``"jit_train_step(17)"`` (the program id
  in decimal, as uint64).

Program ids are uint64 in XLA; the int64 ``program_id`` column holds them bit
for bit (see :func:`as_int64` / :func:`as_uint64`), -1 when unknown.

Events are decoded line by line straight from the wire bytes into numpy columns
(xspace_schema.decode_wide, compiled by xspace_fast when numba is there: no Python object per event);
names and per-op stats are resolved once per event *metadata* and spread with
index arrays. Per-event stats are read only on the lines that need them.
Stats are always resolved by name through the plane's stat metadata.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from traceview.errors import TraceError
from traceview.parsers.layout import host_of
from traceview.parsers.profile import HOST_EVENT_COLUMNS, OP_COLUMNS, STEP_COLUMNS, Device, as_declared, empty_frame
from traceview.parsers.tables.gpu_kernels import CUDA_GRAPH_STAT, GRAPH_LAUNCH_STAT, GpuKernelRows
from traceview.parsers.xspace.file import load_xspace
from traceview.parsers.xspace.schema import (
    STAT_BYTES,
    STAT_DOUBLE,
    STAT_REF,
    STAT_STR,
    WideEvents,
    WireError,
    decode_wide,
)

_DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):(\d+)$")
_MODULE_EVENT = re.compile(r"^(?P<name>.*)\((?P<pid>-?\d+)\)$")
# Lines of a device plane holding one event per executed op.
_TPU_OPS_LINE = "XLA Ops"
_TPU_MODULES_LINE = "XLA Modules"
_STEPS_LINE = "Steps"
_GPU_STREAM_PREFIX = "Stream #"
HOST_PLANE = "/host:CPU"
METADATA_PLANE = "/host:metadata"
TASK_ENV_PLANE = "Task Environment"
_HLO_PROTO_STAT = ("Hlo Proto", "hlo_proto")
_UINT64 = 1 << 64
_INT64_MAX = (1 << 63) - 1
_FAST_MIN_STRINGS = 100_000  # string stats decoded by hash (numba) from this many on
_INT32_MAX = (1 << 31) - 1


@dataclass
class TraceData:
    """Everything read from one host's XSpace file."""

    host: str
    ops: pd.DataFrame
    host_events: pd.DataFrame
    steps: pd.DataFrame
    devices: list[Device]
    hlo_protos: dict[str, bytes] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- file


# ---------------------------------------------------------------------- plane helpers


def _stat_value(stat, stat_names: dict[int, str]):
    """A stat's python value; ref_value resolves to the referenced stat metadata's name."""
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":
        return stat_names.get(stat.ref_value, "")
    return getattr(stat, kind)


def _stats_dict(stats, stat_names: dict[int, str]) -> dict:
    return {stat_names.get(s.metadata_id, str(s.metadata_id)): _stat_value(s, stat_names) for s in stats}


def _to_int(value) -> int | None:
    """Integer stats may be stored as int64, uint64, double or string."""
    if value is None or isinstance(value, (bytes, bytearray)):
        return None
    if isinstance(value, str) and len(value) > 40:  # no int64 is that long (and int() of 5000 digits is slow)
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def as_int64(value: int) -> int:
    """A uint64 program id as the int64 ``program_id`` column holds it (bit for bit).

    XLA program ids are uint64 (TPU ids are often above 2^63, e.g.
    ``jit_f(12190760917235803885)``); the op table keeps them in int64 by
    wrapping, so such ids are negative there. -1 means unknown.
    """
    return value - _UINT64 if value > _INT64_MAX else value


def _pid(value) -> int:
    """A program id stat as the int64 column holds it; -1 when absent or no uint64/int64."""
    v = _to_int(value)
    return -1 if v is None or not -(1 << 63) <= v < _UINT64 else as_int64(v)


def as_uint64(program_id: int) -> int:
    """Undo the int64 wrap of a uint64 program id (-1 stays -1: unknown)."""
    return program_id + _UINT64 if program_id < -1 else program_id


class _Plane:
    """Name and stat lookups for one XPlane, computed once."""

    def __init__(self, plane) -> None:
        self.plane = plane
        self.stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        self.stat_ids = {v: k for k, v in self.stat_names.items()}
        md = plane.event_metadata
        ids = np.fromiter(md.keys(), dtype=np.int64, count=len(md))
        order = np.argsort(ids)
        self.md_ids = ids[order]
        self.md_list = [md[int(i)] for i in self.md_ids]
        self._md_stats: list[dict] | None = None

    def md_index(self, metadata_ids: np.ndarray) -> np.ndarray:
        """Index into md_list for each metadata id (unknown ids -> -1)."""
        if self.md_ids.size == 0:
            return np.full(metadata_ids.size, -1, dtype=np.int64)
        pos = np.searchsorted(self.md_ids, metadata_ids)
        pos = np.minimum(pos, self.md_ids.size - 1)
        return np.where(self.md_ids[pos] == metadata_ids, pos, -1)

    def md_stats(self) -> list[dict]:
        if self._md_stats is None:
            self._md_stats = [_stats_dict(m.stats, self.stat_names) for m in self.md_list]
        return self._md_stats

    def plane_stats(self) -> dict:
        return _stats_dict(self.plane.stats, self.stat_names)



# No time in a trace is this far from the session start (2^62 ps is 53 days): larger ones are corrupt,
# and keeping every start + duration below it means no sum of two times overflows int64.
MAX_TIME_PS = 1 << 62


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


class _Events:
    """One line's events as columns, with typed access to per-event stats by name.

    Events with negative or overflowing times are dropped here (counted in
    ``counter["events"]``); the reader warns with the count.
    """

    def __init__(self, view: _Plane, line, path: str, stats: tuple[str, ...] = (),
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

    def text_codes(self, name: str, vocab: _Vocab | None = None) -> tuple[np.ndarray, list[str]]:
        """The stat as text per event: (code per event, -1 where absent; distinct strings).

        Ref values name a stat metadata; str values are decoded from UTF-8
        (each distinct one once); numbers are written in decimal; bytes count as absent.
        With ``vocab``, the codes are that vocabulary's (its strings returned).
        """
        vocab = _Vocab() if vocab is None else vocab
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


def _ref_codes(values: np.ndarray, vocab: _Vocab, stat_names: dict[int, str]) -> np.ndarray:
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


class _Vocab:
    """Distinct strings gathered from several sources, each with one code."""

    def __init__(self) -> None:
        self.strings: list[str] = []
        self._index: dict[str, int] = {}

    def code(self, text: str) -> int:
        found = self._index.get(text)
        if found is None:
            found = self._index[text] = len(self.strings)
            self.strings.append(text)
        return found

    def take(self, codes: np.ndarray, strings: list[str]) -> np.ndarray:
        """Codes into `strings` (-1: none) as codes into this vocabulary."""
        remap = np.empty(len(strings) + 1, dtype=np.int64)
        remap[:-1] = [self.code(t) for t in strings]
        remap[-1] = -1
        return remap[codes]

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        """pd.Categorical of these codes: only the strings used, sorted (as pd.Categorical(values) has them)."""
        used = np.flatnonzero(np.bincount(codes + 1, minlength=len(self.strings) + 1)[1:])
        texts = [self.strings[i] for i in used.tolist()]
        order = sorted(range(len(texts)), key=texts.__getitem__)
        remap: np.ndarray = np.full(len(self.strings) + 1, -1, dtype=_code_dtype(len(order)))  # codes of the size pandas keeps
        remap[used[order]] = np.arange(len(order))
        return pd.Categorical.from_codes(remap[codes], categories=pd.Index([texts[i] for i in order]))


def _code_dtype(categories: int) -> type:
    """The integer type pandas keeps a Categorical's codes in for this many categories (so it need not
    convert them)."""
    for dtype in (np.int8, np.int16, np.int32):
        if categories < np.iinfo(dtype).max:
            return dtype
    return np.int64


def categorical(values: np.ndarray) -> pd.Categorical:
    """pd.Categorical(values) for an object array of str (None: missing), by hash instead of by sort.

    Same categories (sorted), codes and dtypes as pd.Categorical, several
    times faster when millions of values repeat a few thousand strings.
    """
    values = np.asarray(values, dtype=object)
    codes, keys = pd.factorize(values)  # a C hash table over the objects; None -> -1
    keys = keys.tolist()
    if not keys or not all(type(k) is str for k in keys):
        return pd.Categorical(values)
    order = sorted(range(len(keys)), key=keys.__getitem__)
    remap = np.empty(len(keys) + 1, dtype=np.int64)
    remap[order] = np.arange(len(keys))
    remap[-1] = -1  # codes of -1 (missing) index the last slot
    return pd.Categorical.from_codes(remap[codes], categories=pd.Index([keys[i] for i in order]))


# ----------------------------------------------------------------------- nesting


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
    from traceview.parsers.xspace import fast as xspace_fast

    if xspace_fast.loaded():
        in_order = xspace_fast.self_times_in_order(start, duration)
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
    children = xspace_fast.nested_children(s, e) if xspace_fast.loaded() else _nested_children(s, e)
    self_ps[idx] = np.maximum(duration[idx] - children, 0)
    return self_ps


def _nested_children(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """xspace_kernels.nested_children without numba: one vectorized pass per nesting level."""
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


# ------------------------------------------------------------------------ devices


def _device(plane_view: _Plane, host: str, kind: str, ordinal: str) -> Device:
    return Device.from_plane_stats(f"{host}/{kind}:{ordinal}", host, kind, plane_view.plane_stats())


# ------------------------------------------------------------------------ op rows


@dataclass
class _Chunk:
    """Op rows of one line, before they become DataFrame columns."""

    device: str
    line: str | pd.Categorical   # one line, or each row's (trace JSON: many lines in one chunk)
    start: np.ndarray
    duration: np.ndarray
    self_ps: np.ndarray
    op: pd.Categorical
    module: pd.Categorical
    category: pd.Categorical
    program_id: np.ndarray
    flops: np.ndarray
    bytes_: np.ndarray
    extra: dict = field(default_factory=dict)  # run_id for CPU step detection


def _spread(per_md: list, index: np.ndarray, default) -> pd.Categorical:
    """Categorical of per-metadata values spread over events by metadata index."""
    codes, dtype = _spread_table(tuple(per_md), default)
    return pd.Categorical.from_codes(codes[np.where(index >= 0, index, codes.size - 1)], dtype=dtype)


@lru_cache(maxsize=64)
def _spread_table(values: tuple, default) -> tuple[np.ndarray, pd.CategoricalDtype]:
    """Codes and dtype of pd.Categorical(values + default), made once per list (a plane's lines share it)."""
    cats = pd.Categorical(list(values) + [default])
    return cats.codes, cats.dtype


def _op_name_from_md(md) -> str:
    """HLO op name of a TPU event metadata: display_name, else the name before ' = '."""
    if md.display_name:
        return md.display_name
    name = md.name.split(" = ", 1)[0].strip()
    return name[1:] if name.startswith("%") else name


def _tpu_modules(view: _Plane, ev: _Events) -> tuple[dict[int, str], tuple]:
    """program id -> module name, and the module executions (start, end, names, pids) sorted by start."""
    idx = view.md_index(ev.mid)
    names, pids = [], []
    for m in view.md_list:
        match = _MODULE_EVENT.match(m.name)
        names.append(match["name"] if match else m.name)
        pids.append(_pid(match["pid"]) if match else -1)
    by_pid = {p: n for p, n in zip(pids, names) if p != -1}
    names_arr = np.array(names + [""], dtype=object)
    pids_arr = np.array(pids + [-1], dtype=np.int64)
    order = np.argsort(ev.start, kind="stable")
    idx = idx[order]
    start = ev.start[order]
    return by_pid, (start, start + ev.duration[order], names_arr[idx], pids_arr[idx])


def _tpu_ops(view: _Plane, device: str, ev: _Events, line_name: str, modules: dict[int, str],
             mod_exec: tuple | None) -> _Chunk:
    # XProf times TPU ops by the device clock (device_duration_ps) when the event has it;
    # nesting is then judged on the device clock too.
    dev_dur, has_dur = ev.ints("device_duration_ps")
    dev_off, has_off = ev.ints("device_offset_ps")
    # Device-clock times that cannot be (negative, overflowing) are dropped: the event's own times count.
    bad_dur = has_dur & ((dev_dur < 0) | (dev_dur > MAX_TIME_PS))
    bad_off = has_off & ((dev_off < 0) | (dev_off > MAX_TIME_PS))
    ev.counter["device_times"] = ev.counter.get("device_times", 0) + int(bad_dur.sum() + bad_off.sum())
    has_dur &= ~bad_dur
    has_off &= ~bad_off
    duration = np.where(has_dur, dev_dur, ev.duration)
    nest_start = dev_off if has_off.all() else ev.start
    idx = view.md_index(ev.mid)
    md_stats = view.md_stats()
    md_pid = np.array([_pid(st.get("program_id")) for st in md_stats] + [-1], dtype=np.int64)
    pid = md_pid[idx]
    md_flops = np.array([_float(st.get("flops")) for st in md_stats] + [np.nan])
    md_bytes = np.array([_float(st.get("bytes_accessed")) for st in md_stats] + [np.nan])
    module = _spread([modules.get(int(p), "") for p in md_pid[:-1]], idx, "")
    if mod_exec is not None and (pid == -1).any():
        # Ops whose metadata has no program id: the enclosing module execution says.
        m_start, m_end, m_names, m_pids = mod_exec
        k = np.searchsorted(m_start, ev.start, side="right") - 1
        inside = (k >= 0) & (ev.start < m_end[np.maximum(k, 0)])
        missing = (pid == -1) & inside
        pid = pid.copy()
        pid[missing] = m_pids[k[missing]]
        module = pd.Categorical(np.where(missing, m_names[np.maximum(k, 0)], np.asarray(module, dtype=object)))
    return _Chunk(
        device=device, line=line_name, start=ev.start, duration=duration,
        self_ps=self_times(nest_start, duration),
        op=_spread([_op_name_from_md(m) for m in view.md_list], idx, ""),
        module=module,
        category=_spread([str(st.get("hlo_category", "")) for st in md_stats], idx, ""),
        program_id=pid, flops=md_flops[idx], bytes_=md_bytes[idx],
    )


def _float(v) -> float:
    try:
        return float(v) if v is not None and not isinstance(v, (bytes, str)) else np.nan
    except (TypeError, ValueError):
        return np.nan


# Per-event stats that name an op on GPU streams and CPU threads.
_OP_STATS = ("hlo_op", "hlo_module", "program_id", "level 0", "run_id")
# Read only on planes that have the graph stat (no cost for traces without CUDA graphs).
_GRAPH_STATS = (CUDA_GRAPH_STAT, GRAPH_LAUNCH_STAT)


def _stat_rows(view: _Plane, device: str, line_name: str, ev: _Events, keep: np.ndarray | None = None,
               last_use: bool = False, kernels: bool = False) -> _Chunk:
    """Op rows for events named by per-event hlo_op / hlo_module / program_id stats (GPU kernels, CPU thunks).

    Events with no HLO op (memcpys, TensorFlow kernels) are named by their
    framework op (the ``level 0`` stat), else by the kernel name. ``kernels`` (GPU streams): keep each
    row's kernel (its metadata id, ``extra["kernel"]``) and, for kernels run inside a CUDA graph, the
    graph launch they belong to (``extra["graph_launch"]``, -1 outside graphs). ``keep``:
    the rows to take (all by default); ``last_use``: nothing reads ``ev``
    after this (its stat columns are dropped once read). Each column is
    freed once used and taken without a copy where it is the whole line:
    a line of millions of kernels is the peak of a GPU trace's read.
    """
    rows = None if keep is None else np.flatnonzero(keep)

    def sel(column: np.ndarray) -> np.ndarray:
        return column if rows is None else column[rows]

    start, dur = sel(ev.start), sel(ev.duration)
    # Text stats stay codes into distinct strings: no Python object per event.
    ops = _Vocab()
    op = sel(ev.text_codes("hlo_op", ops)[0])
    unnamed = op < 0
    if unnamed.any():
        fw_codes, fw_strings = ev.text_codes("level 0")
        framework = ops.take(sel(fw_codes), [f.split("#", 1)[0] for f in fw_strings])
        md = view.md_index(sel(ev.mid))
        kernel_names = [m.name for m in view.md_list] + [""]
        kernel = ops.take(np.where(md >= 0, md, len(kernel_names) - 1), kernel_names)
        op = np.where(unnamed, np.where(framework >= 0, framework, kernel), op)
        del fw_codes, framework, md, kernel
    del unnamed
    op_names = ops.categorical(op)                      # small codes now, the int64 ones freed
    del op
    modules = _Vocab()
    module = sel(ev.text_codes("hlo_module", modules)[0])
    module[module < 0] = modules.code("")
    module_names = modules.categorical(module)
    del module
    pid, has_pid = ev.ints("program_id")
    pid[~has_pid] = -1                                  # a column of its own: -1 where unknown, in place
    program_id = sel(pid)
    del pid, has_pid
    run_id = sel(ev.ints("run_id")[0]) if ev.has_stat("run_id") else None
    kernel_id = sel(ev.mid) if kernels else None   # the metadata id: a kernel's identity, no lookup
    graph_launch = None
    if kernels and ev.has_stat(CUDA_GRAPH_STAT):
        in_graph = sel(ev.ints(CUDA_GRAPH_STAT)[1])
        launch, has_launch = ev.ints(GRAPH_LAUNCH_STAT)
        graph_launch = np.where(in_graph, np.where(sel(has_launch), sel(launch), 0), -1)
    if last_use:
        ev.release()
    n = start.size
    chunk = _Chunk(
        # Kernels on a GPU stream never nest: one that starts before the previous ends (programmatic dependent
        # launch) overlaps it, and each keeps its whole time as its own, as XProf counts it.
        device=device, line=line_name, start=start, duration=dur,
        self_ps=dur.copy() if kernels else self_times(start, dur),
        op=op_names, module=module_names,
        category=pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), [""]),
        program_id=program_id, flops=unreported(n), bytes_=unreported(n),
    )
    if run_id is not None:
        chunk.extra["run_id"] = run_id
    if kernel_id is not None:
        chunk.extra["kernel"] = kernel_id
    if graph_launch is not None:
        chunk.extra["graph_launch"] = graph_launch
    return chunk


def _device_order(device: str) -> tuple[str, int]:
    """Sort "host/CPU:10" after "host/CPU:9"."""
    name, _, ordinal = device.rpartition(":")
    return (name, int(ordinal)) if ordinal.isdigit() else (device, -1)


END_MARKER_PREFIX = "end: "


def _async_op_ends(view: _Plane, md_names: list[str], lines: list[_Events]) -> tuple[np.ndarray, np.ndarray]:
    """(flow id, end time) of every `end: <op>` marker, sorted by flow id.

    XLA:CPU hands much of an op's work (dots, partitioned loop fusions) to a
    thread pool: the op's event covers only the launch, and a marker event
    named `end: <op>` on whichever thread finished the work closes it. The op
    event's `_p` flow stat equals the marker's `_c`.
    """
    is_end = np.array([n.startswith(END_MARKER_PREFIX) for n in md_names] + [False], dtype=bool)
    ids, ends = [], []
    for ev in lines:
        marker = is_end[view.md_index(ev.mid)]
        if not marker.any():
            continue
        flow, has_flow = ev.ints("_c")
        rows = marker & has_flow
        ids.append(flow[rows])
        ends.append(ev.start[rows] + ev.duration[rows])
    if not ids:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    flow_ids, end_times = np.concatenate(ids), np.concatenate(ends)
    order = np.argsort(flow_ids, kind="stable")
    return flow_ids[order], end_times[order]


def _extension_to_end_marker(ev: _Events, op_ends: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Per event, how far its `end:` marker lies past the event's own end (0 when none)."""
    extension = np.zeros(len(ev), dtype=np.int64)
    if op_ends is None or op_ends[0].size == 0:
        return extension
    flow_ids, end_times = op_ends
    parent, has_parent = ev.ints("_p")
    pos = np.minimum(np.searchsorted(flow_ids, parent), flow_ids.size - 1)
    found = has_parent & (flow_ids[pos] == parent)
    own_end = ev.start + ev.duration
    extension[found] = np.maximum(end_times[pos[found]] - own_end[found], 0)
    return extension


# ------------------------------------------------------------------------- reader


def read_xplane(path: str | Path, host: str | None = None, fast: bool | None = None) -> TraceData:
    """Read one XSpace file into a TraceData (tables for one host)."""
    path = Path(path)
    host = host or host_of(path)
    space = load_xspace(path, fast=fast)
    try:
        return _Reader(space, host, str(path)).read()
    finally:
        close = getattr(space, "close", None)  # a mapped file (parsers/xspace/mapped.py): unmapped now
        if close is not None:
            close()


class _Reader:
    def __init__(self, space, host: str, path: str) -> None:
        self.space, self.host, self.path = space, host, path
        self.warnings: list[str] = [f"{path}: trace error: {e}" for e in space.errors]
        self.warnings += [f"{path}: trace warning: {w}" for w in space.warnings]
        self.chunks: list[_Chunk] = []
        self.devices: list[Device] = []
        self.host_chunks: list[dict] = []
        self.step_rows: list[dict[str, np.ndarray]] = []  # blocks of step rows (see _step_block)
        self.module_execs: dict[str, tuple] = {}  # device -> (start, end, names, pids) from XLA Modules
        self.dropped: dict[str, int] = {"events": 0, "device_times": 0}  # impossible times (see _Events)
        self.kernels = GpuKernelRows(path)

    def read(self) -> TraceData:
        planes = list(self.space.planes)
        events_per_plane = {p.name: sum(len(line.events) for line in p.lines) for p in planes}
        if not any(events_per_plane.values()):
            raise TraceError(f"{self.path}: the trace holds no events (empty profile)")
        device_planes = [(p, m) for p in planes if (m := _DEVICE_PLANE.match(p.name))]
        hlo_protos, environment = self._metadata(planes)
        self.kernels.hlo_protos = hlo_protos
        for plane, m in sorted(device_planes, key=lambda pm: (pm[1][1], int(pm[1][2]))):
            self._device_plane(plane, m[1], m[2])
        self.warnings += self.kernels.notes()
        device_has_ops = bool(self.chunks)
        host_plane = next((p for p in planes if p.name == HOST_PLANE), None)
        annotations = None
        if host_plane is not None:
            annotations = self._host_plane(host_plane, cpu_ops=not device_has_ops)
        # The raw events are no longer needed: drop them before the tables are built (peak memory).
        device_names = [(p.name, m[1], m[2]) for p, m in device_planes if m]
        self.space = plane = None
        del planes, host_plane, device_planes
        ops = self._ops_frame()
        ops, steps = self._assign_steps(ops, annotations)
        if self.dropped["events"]:
            self.warnings.append(f"{self.path}: dropped {self.dropped['events']} event(s) with negative or "
                                 "overflowing times (corrupt trace?)")
        if self.dropped["device_times"]:
            self.warnings.append(f"{self.path}: ignored {self.dropped['device_times']} negative or overflowing "
                                 "device-clock time(s); those ops are timed by their event")
        if ops.empty:
            self.warnings.append(f"{self.path}: no device op events in this trace")
        idle = [f"{self.host}/{kind}:{ordinal}" for name, kind, ordinal in device_names if not events_per_plane[name]]
        if idle:
            self.warnings.append(f"{self.path}: no events on {len(idle)} device(s): {', '.join(idle)}")
        skipped = {name for name, _, _ in device_names} | {HOST_PLANE, METADATA_PLANE, TASK_ENV_PLANE}
        unknown_planes = sorted(n for n, count in events_per_plane.items() if count and n not in skipped)
        if unknown_planes:
            self.warnings.append(f"{self.path}: planes not analyzed: {', '.join(unknown_planes)}")
        return TraceData(host=self.host, ops=ops, host_events=self._host_frame(), steps=steps,
                         devices=self.devices, hlo_protos=hlo_protos, environment=environment,
                         warnings=self.warnings)

    # --- device planes

    def _device_plane(self, plane, kind: str, ordinal: str) -> None:
        view = _Plane(plane)
        dev = _device(view, self.host, kind, ordinal)
        self.devices.append(dev)
        lines = {line.name: line for line in plane.lines if len(line.events)}
        if kind == "TPU":
            modules: dict[int, str] = {}
            mod_exec = None
            if _TPU_MODULES_LINE in lines:
                modules, mod_exec = _tpu_modules(view, self._events(view, lines[_TPU_MODULES_LINE]))
                self.module_execs[dev.id] = mod_exec
            if _TPU_OPS_LINE in lines:
                ev = self._events(view, lines[_TPU_OPS_LINE], ("device_offset_ps", "device_duration_ps"))
                self.chunks.append(_tpu_ops(view, dev.id, ev, _TPU_OPS_LINE, modules, mod_exec))
        else:
            stats = _OP_STATS + (_GRAPH_STATS if CUDA_GRAPH_STAT in view.stat_ids else ())
            kernel_names = [m.name for m in view.md_list]
            for name, line in lines.items():
                if name.startswith(_GPU_STREAM_PREFIX):
                    chunk = _stat_rows(view, dev.id, name, self._events(view, line, stats), last_use=True,
                                       kernels=True)
                    self.kernels.add(chunk, kernel_names, view.md_index)
                    self.chunks.append(chunk)
        if _STEPS_LINE in lines:
            ev = self._events(view, lines[_STEPS_LINE])
            numbers = []  # each metadata name's step number (-1: none), then -1 for unknown metadata
            for m in view.md_list:
                number = _to_int(m.name)
                numbers.append(number if number is not None and 0 <= number < _INT32_MAX else -1)  # int32 column
            step = np.array(numbers + [-1], dtype=np.int64)[view.md_index(ev.mid)]
            unnamed = step < 0
            step[unnamed] = np.flatnonzero(unnamed)  # no number: the event's position on the line
            self.step_rows.append(_step_block(dev.id, step, ev.start, ev.duration, "steps_line"))

    def _events(self, view: _Plane, line, stats: tuple[str, ...] = ()) -> _Events:
        """A line's events, decoding only the named per-event stats."""
        return _Events(view, line, self.path, stats, self.dropped)

    # --- host plane

    def _host_plane(self, plane, cpu_ops: bool):
        """Host events; on a CPU-only trace, events with an hlo_op stat become op rows.

        Returns the step annotations found (StepTraceAnnotation events: a
        ``step_num`` stat) as (start, end, step) arrays, or None.
        """
        view = _Plane(plane)
        ann: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        cpu_device = f"{self.host}/CPU"
        cpu_devices: set[str] = set()
        md_names = [m.name for m in view.md_list]
        stats = _OP_STATS + ("step_num", "device_ordinal", "_p", "_c")
        lines = [(line, self._events(view, line, stats)) for line in plane.lines if len(line.events)]
        op_ends = _async_op_ends(view, md_names, [ev for _, ev in lines]) if cpu_ops else None
        for line, ev in lines:
            keep_host = np.ones(len(ev), dtype=bool)
            if cpu_ops and "hlo_op" in view.stat_ids:
                is_op = ev.text_codes("hlo_op")[0] >= 0
                if is_op.any():
                    # With --xla_force_host_platform_device_count each thunk names
                    # the simulated device it ran for: one device per ordinal.
                    ordinal, has_ordinal = ev.ints("device_ordinal")
                    extension = _extension_to_end_marker(ev, op_ends)
                    groups = [(f"{cpu_device}:{k}", is_op & has_ordinal & (ordinal == k))
                              for k in np.unique(ordinal[is_op & has_ordinal])]
                    if (is_op & ~has_ordinal).any():
                        groups.append((cpu_device, is_op & ~has_ordinal))
                    for device, rows in groups:
                        chunk = _stat_rows(view, device, line.name, ev, keep=rows)
                        chunk.duration = chunk.duration + extension[rows]
                        chunk.self_ps = chunk.self_ps + extension[rows]
                        self.chunks.append(chunk)
                        cpu_devices.add(device)
                    keep_host = ~is_op
            step_num, has_step = ev.ints("step_num")
            has_step &= (step_num >= 0) & (step_num < _INT32_MAX)  # the step column is int32
            if has_step.any():
                ann.append((ev.start[has_step], ev.start[has_step] + ev.duration[has_step], step_num[has_step]))
            self.host_chunks.append(dict(
                thread=line.name, start=ev.start[keep_host], duration=ev.duration[keep_host],
                name=_spread(md_names, view.md_index(ev.mid[keep_host]), ""),
            ))
        plane_stats = view.plane_stats()
        for device in sorted(cpu_devices, key=_device_order):
            self.devices.append(Device(id=device, host=self.host, kind="CPU", stats=plane_stats))
        if not ann:
            return None
        a_start, a_end, a_step = (np.concatenate(x) for x in zip(*ann))
        order = np.argsort(a_start, kind="stable")
        return a_start[order], a_end[order], a_step[order]

    # --- metadata planes

    def _metadata(self, planes) -> tuple[dict[str, bytes], dict[str, str]]:
        protos: dict[str, bytes] = {}
        env: dict[str, str] = {}
        for plane in planes:
            if plane.name not in (METADATA_PLANE, TASK_ENV_PLANE):
                continue
            view = _Plane(plane)
            for name, value in view.plane_stats().items():
                if not isinstance(value, (bytes, bytearray)):
                    env[name] = str(value)
            if plane.name != METADATA_PLANE:
                continue
            for md in view.md_list:
                for s in md.stats:
                    if view.stat_names.get(s.metadata_id) in _HLO_PROTO_STAT and s.WhichOneof("value") == "bytes_value":
                        protos[md.name] = bytes(s.bytes_value)
        return protos, env

    # --- tables

    def _ops_frame(self) -> pd.DataFrame:
        self.chunks = [c for c in self.chunks if c.start.size]  # lines whose events were all dropped
        if not self.chunks:
            return empty_frame(OP_COLUMNS)
        from pandas.api.types import union_categoricals

        sizes = [c.start.size for c in self.chunks]
        frame = pd.DataFrame({
            "host": pd.Categorical.from_codes(np.zeros(sum(sizes), dtype=np.int8), [self.host]),
            "device": _repeat_cat([c.device for c in self.chunks], sizes),
            "line": _repeat_cat([c.line for c in self.chunks], sizes),
            "module": union_categoricals([c.module for c in self.chunks]),
            "program_id": _joined([c.program_id for c in self.chunks], np.int64),
            "op": union_categoricals([c.op for c in self.chunks]),
            "category": union_categoricals([c.category for c in self.chunks]),
            "start_ps": _joined([c.start for c in self.chunks], np.int64),
            "duration_ps": _joined([c.duration for c in self.chunks], np.int64),
            "self_ps": _joined([c.self_ps for c in self.chunks], np.int64),
            "step": np.full(sum(sizes), -1, dtype=np.int32),
            "trace_flops": _joined([c.flops for c in self.chunks], np.float64),
            "trace_bytes": _joined([c.bytes_ for c in self.chunks], np.float64),
            "executions": _joined([c.extra.get("executions", np.ones(c.start.size, dtype=np.int8))
                                   for c in self.chunks], np.int8),
        }, copy=False)  # columns as they are: no copy into 2-D blocks
        with_runs = any("run_id" in c.extra for c in self.chunks)  # none: every run id is 0
        self._run_ids = np.concatenate([c.extra.get("run_id", np.zeros(c.start.size, dtype=np.int64))
                                        for c in self.chunks]) if with_runs else None
        return as_declared(frame, OP_COLUMNS)

    def _host_frame(self) -> pd.DataFrame:
        chunks = [c for c in self.host_chunks if c["start"].size]
        if not chunks:
            return empty_frame(HOST_EVENT_COLUMNS)
        from pandas.api.types import union_categoricals

        sizes = [c["start"].size for c in chunks]
        frame = pd.DataFrame({
            "host": pd.Categorical.from_codes(np.zeros(sum(sizes), dtype=np.int8), [self.host]),
            "thread": _repeat_cat([c["thread"] for c in chunks], sizes),
            "name": union_categoricals([c["name"] for c in chunks]),
            "start_ps": _joined([c["start"] for c in chunks], np.int64),
            "duration_ps": _joined([c["duration"] for c in chunks], np.int64),
        }, copy=False)
        return as_declared(frame, HOST_EVENT_COLUMNS)

    def _assign_steps(self, ops: pd.DataFrame, annotations) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Steps: a Steps line, else host StepTraceAnnotations, else executions of the main module."""
        rows = list(self.step_rows)
        if not rows and annotations is not None and not ops.empty:
            a_start, a_end, a_step = annotations
            rows = [_step_block(dev, a_step, a_start, a_end - a_start, "host_annotation")
                    for dev in ops["device"].cat.categories]
        if not rows and not ops.empty:
            rows = self._module_steps(ops)
        rows = [r for r in rows if r["step"].size]
        if not rows:
            if not ops.empty:
                self.warnings.append(f"{self.path}: no steps found (no Steps line, step annotation "
                                     "or repeated module execution); ops have step -1")
            return ops, empty_frame(STEP_COLUMNS)
        steps = pd.DataFrame({name: np.concatenate([r[name] for r in rows]) for name in rows[0]})
        steps = steps.sort_values(["device", "start_ps"], kind="stable").reset_index(drop=True)
        steps = as_declared(steps, STEP_COLUMNS)
        if not ops.empty:
            ops["step"] = _step_of(ops, steps, windows_to_next=(steps["source"] == "host_annotation").any())
        return ops, steps

    def _module_steps(self, ops: pd.DataFrame) -> list[dict[str, np.ndarray]]:
        """Each execution of the module with the most device time is a step."""
        if not self.module_execs and self._run_ids is None:
            return []  # no module executions and no run ids: nothing to cut steps from (no pass over the rows)
        timed = ops[ops["module"] != ""]
        if timed.empty:
            return []
        main = timed.groupby("module", observed=True)["duration_ps"].sum().idxmax()
        rows: list[dict[str, np.ndarray]] = []
        for dev, (m_start, m_end, m_names, _pids) in self.module_execs.items():
            sel = np.flatnonzero(np.asarray(m_names, dtype=object) == main)
            if sel.size:
                rows.append(_step_block(dev, np.arange(sel.size), m_start[sel], m_end[sel] - m_start[sel], "module"))
        if rows:
            return rows
        # No module execution events (GPU, CPU): an execution is a run_id, else nothing.
        if self._run_ids is None:
            return []
        mask = (ops["module"] == main).to_numpy() & (self._run_ids != 0)
        if not mask.any():
            return []
        sub = pd.DataFrame({"device": ops["device"].to_numpy()[mask], "run": self._run_ids[mask],
                            "start": ops["start_ps"].to_numpy()[mask],
                            "end": (ops["start_ps"] + ops["duration_ps"]).to_numpy()[mask]})
        runs = sub.groupby(["device", "run"], observed=True).agg(start=("start", "min"), end=("end", "max"))
        runs = runs.reset_index().sort_values(["device", "start"])
        runs["step"] = runs.groupby("device", observed=True).cumcount()
        start = runs["start"].to_numpy(dtype=np.int64)
        return [{"device": np.asarray(runs["device"], dtype=object), "step": runs["step"].to_numpy(dtype=np.int64),
                 "start_ps": start, "duration_ps": runs["end"].to_numpy(dtype=np.int64) - start,
                 "source": np.full(len(runs), "module", dtype=object)}]


def _step_block(device: str, step: np.ndarray, start: np.ndarray, duration: np.ndarray,
                source: str) -> dict[str, np.ndarray]:
    """Step rows of one device, as the columns of the steps table (before its dtypes)."""
    n = len(step)
    return {"device": np.full(n, device, dtype=object), "step": np.asarray(step, dtype=np.int64),
            "start_ps": np.asarray(start, dtype=np.int64), "duration_ps": np.asarray(duration, dtype=np.int64),
            "source": np.full(n, source, dtype=object)}


def unreported(n: int) -> np.ndarray:
    """A float column of n NaN (a figure the trace does not report: GPU and CPU rows' flops and bytes) that
    holds no memory: one value seen n times, read-only. A Profile's own op table gets writable copies
    (trace.read); a table only reduced (``analyze``) never holds the 16 bytes per row of its two columns."""
    return np.broadcast_to(np.float64(np.nan), (n,))


def is_unreported(a: np.ndarray) -> bool:
    """Whether `a` is an :func:`unreported` column."""
    return a.ndim == 1 and a.strides == (0,) and a.dtype == np.float64 and (a.size == 0 or bool(np.isnan(a[0])))


def _joined(arrays: list[np.ndarray], dtype) -> np.ndarray:
    """The arrays end to end, as `dtype`: an array of its own (no view of another), so a table can hold it
    without a copy; unreported columns stay one (no memory)."""
    if dtype == np.float64 and all(is_unreported(a) for a in arrays):
        return unreported(sum(a.size for a in arrays))
    if len(arrays) == 1:
        a = arrays[0]
        own = a.dtype == dtype and a.flags.owndata and a.flags.c_contiguous and a.flags.writeable
        return a if own else a.astype(dtype, copy=True)
    return np.concatenate(arrays).astype(dtype, copy=False)


def _repeat_cat(values: list, sizes: list[int]) -> pd.Categorical:
    """Per-row labels of chunks: a chunk's one label (a str) repeated over its rows, or its own per-row
    labels (a Categorical: the trace JSON reader puts many lines in one chunk)."""
    if any(isinstance(v, pd.Categorical) for v in values):
        from pandas.api.types import union_categoricals

        return union_categoricals([pd.Categorical.from_codes(v.codes, pd.Index(v.categories, dtype=object))
                                   if isinstance(v, pd.Categorical) else
                                   pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), pd.Index([v], dtype=object))
                                   for v, n in zip(values, sizes)])
    cats = pd.Categorical(values)
    return pd.Categorical.from_codes(np.repeat(cats.codes, sizes), cats.categories)


def _step_of(ops: pd.DataFrame, steps: pd.DataFrame, windows_to_next: bool) -> np.ndarray:
    """Step number of each op by its start time, per device.

    With host annotations a device op may run after its step's annotation
    ended (asynchronous dispatch), so a step's window then reaches to the
    next step's start.
    """
    out = np.full(len(ops), -1, dtype=np.int32)
    codes = ops["device"].cat.codes.to_numpy()
    categories = list(ops["device"].cat.categories)
    start = ops["start_ps"].to_numpy()
    for dev, s in steps.groupby("device", observed=True):
        if dev not in categories:
            continue
        sel = np.flatnonzero(codes == categories.index(dev))
        s_start = s["start_ps"].to_numpy()
        s_end = s_start + s["duration_ps"].to_numpy()
        if windows_to_next:
            s_end = np.append(s_start[1:], np.iinfo(np.int64).max)
        k = np.searchsorted(s_start, start[sel], side="right") - 1
        inside = (k >= 0) & (start[sel] < s_end[np.maximum(k, 0)])
        out[sel[inside]] = s["step"].to_numpy()[k[inside]]
    return out
