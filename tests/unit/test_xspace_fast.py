"""The compiled reader (numba, optional) and the pure numpy reader give identical tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from traceview.parsers.xspace.file import _FAST_MIN_BYTES
from traceview.parsers.xspace.reader import read_xplane
from traceview.parsers.xspace.schema import (
    STAT_BYTES,
    STAT_STR,
    WireError,
    XEvent,
    XSpaceRaw,
    decode_events,
    decode_wide,
)

pytest.importorskip("numba")
from traceview.parsers.native import loader as native_loader  # noqa: E402
from traceview.parsers.xspace import fast as xspace_fast  # noqa: E402


def _trace_files(root):
    return sorted(root.rglob("*.xplane.pb"))


def _same(a, b) -> None:
    for table in ("ops", "host_events", "steps"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table), check_exact=True)
    assert a.devices == b.devices and a.hlo_protos == b.hlo_protos
    assert a.environment == b.environment and a.warnings == b.warnings


def test_every_real_trace_reads_the_same_both_ways(shared_traces, sample_traces):
    files = _trace_files(shared_traces) + _trace_files(sample_traces)
    assert files
    for f in files:
        _same(read_xplane(f, fast=True), read_xplane(f, fast=False))


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv("TRACEVIEW_NO_NUMBA", "1")
    assert not native_loader.enabled()
    monkeypatch.delenv("TRACEVIEW_NO_NUMBA")
    assert native_loader.enabled()


def _region(events: list[bytes], mapped_in: Path | None = None) -> xspace_fast.EventRegion:
    """The events as one line of a parsed space (``mapped_in``: written to a file there, and mapped)."""
    space = XSpaceRaw()
    line = space.planes.add(name="p").lines.add(name="l", timestamp_ns=7)
    for e in events:
        line.events.append(e)
    data = space.SerializeToString()
    if mapped_in is None:
        (fast_line,) = xspace_fast.parse_space(data).planes[0].lines
    else:
        from traceview.parsers.xspace.mapped import map_file

        mapped_in.write_bytes(data)
        mapped = map_file(mapped_in, 0, 1 << 30)
        assert mapped is not None
        (fast_line,) = xspace_fast.parse_space(mapped.map, mapped).planes[0].lines
        assert fast_line.events.pages is mapped
    assert fast_line.name == "l" and fast_line.timestamp_ns == 7
    return fast_line.events


def _wide_equal(a, b) -> None:
    for name in ("metadata_id", "offset_ps", "duration_ps", "stat_ids", "kind", "size"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)
    text = (a.kind == STAT_STR) | (a.kind == STAT_BYTES)
    np.testing.assert_array_equal(a.bits[~text], b.bits[~text])
    # string offsets are into different buffers (the line's bytes, or the events joined): compare the bytes
    for k, i in zip(*np.nonzero(text)):
        sa, sb, n = int(a.bits[k, i]), int(b.bits[k, i]), int(a.size[k, i])
        assert a.buffer[sa:sa + n] == b.buffer[sb:sb + n]


@pytest.mark.parametrize("mapped", [False, True])
@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("wanted", [[2], [1, 3], [3, 1, 2], [], [7]])
def test_wide_columns_equal_on_every_stat_kind(wanted, threads, mapped, monkeypatch, tmp_path):
    """The one-pass compiled decoder (whole, or in parts on several threads; a mapped file's line in pieces of
    a few events, each piece's pages dropped once decoded) and the pure one agree, repeated and id-less stats
    included."""
    monkeypatch.setattr(xspace_fast, "_PIECE_EVENTS", 7)
    monkeypatch.setattr(xspace_fast, "_SPLIT_EVENTS", 10 if threads > 1 else 10**9)
    monkeypatch.setattr(native_loader, "_cores", lambda: threads)
    rng = np.random.default_rng(2)
    events = []
    for i in range(400):
        e = XEvent(metadata_id=int(rng.integers(0, 2**40)), offset_ps=i * 1000, duration_ps=int(rng.integers(0, 99)))
        for sid in rng.integers(0, 4, size=int(rng.integers(0, 5))):  # 0: a stat without a metadata id
            s = e.stats.add(metadata_id=int(sid))
            kind = int(rng.integers(0, 7))
            if kind == 0:
                s.double_value = float(rng.normal())
            elif kind == 1:
                s.uint64_value = 2**63 + int(rng.integers(0, 99))
            elif kind == 2:
                s.int64_value = -int(rng.integers(0, 2**40))
            elif kind == 3:
                s.str_value = "op." + "x" * int(rng.integers(0, 200))
            elif kind == 4:
                s.bytes_value = bytes(rng.integers(0, 256, size=5, dtype=np.uint8))
            elif kind == 5:
                s.ref_value = int(rng.integers(0, 9))
        raw = e.SerializeToString()
        if i % 7 == 0:  # a stat whose id comes after its value (still read, by its last id)
            raw += bytes([0x22, 4, 0x20, 5, 0x08, 2])
        events.append(raw)
    ids = np.array(wanted, dtype=np.int64)
    fast = decode_wide(_region(events, tmp_path / "line.xplane.pb" if mapped else None), ids)
    pure = decode_wide(events, ids)
    _wide_equal(fast, pure)
    if 2 in wanted:  # every event has a stat 2 in its last position only when i % 7 == 0
        k = wanted.index(2)
        assert (fast.kind[k, ::7] == 4).all() and (fast.bits[k, ::7] == 5).all()


@pytest.mark.parametrize("ways", [2, 3, 7])
def test_a_line_splits_into_equal_runs_at_event_boundaries(ways, monkeypatch):
    monkeypatch.setattr(xspace_fast, "_SPLIT_EVENTS", 10)
    monkeypatch.setattr(native_loader, "_cores", lambda: ways)
    events = [XEvent(metadata_id=i + 1, offset_ps=i, duration_ps=1).SerializeToString() for i in range(100)]
    region = _region(events)
    parts = region._parts(native_loader.kernels())
    assert [p[3] for p in parts] == [100 * (i + 1) // ways - 100 * i // ways for i in range(ways)]
    assert [p[2] for p in parts] == [100 * i // ways for i in range(ways)]
    assert parts[0][0] == 0 and parts[-1][1] == region.buf.size
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))      # contiguous byte ranges
    for start, _, first, _ in parts[1:]:                              # each starts on its first event's tag
        assert region.buf[start] == 0x22
        assert bytes(region.buf[start + 2:start + 2 + len(events[first])]) == events[first]


def test_malformed_events_raise_wire_error_both_ways(monkeypatch, tmp_path):
    from tests.unit.test_wire_bounds import MALFORMED

    monkeypatch.setattr(xspace_fast, "_PIECE_EVENTS", 1)   # a mapped line: the bad event in a piece of its own
    good = XEvent(metadata_id=1, offset_ps=10, duration_ps=5).SerializeToString()
    for case, data in MALFORMED.items():
        with pytest.raises(WireError):
            decode_events([good, data])
        with pytest.raises(WireError):
            decode_wide(_region([good, data]), np.array([1], dtype=np.int64))
        with pytest.raises(WireError):
            decode_wide(_region([good, data, good], tmp_path / "bad.xplane.pb"), np.array([1], dtype=np.int64))
        with pytest.raises(WireError):
            decode_wide([good, data], np.array([1], dtype=np.int64))
        del case



def test_distinct_strings_equal_one_by_one_decoding():
    from traceview.parsers.xspace.events import _decoded

    words = [b"fusion.1", b"", b"\xc3\xa9t\xc3\xa9", b"bad \xff utf8", b"fusion.1" * 40, b"fusion.2"]
    rng = np.random.default_rng(3)
    picks = rng.integers(0, len(words), size=5000)
    buffer = b"".join(words[i] for i in picks)
    lengths = np.array([len(words[i]) for i in picks], dtype=np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    got = xspace_fast.distinct_slices(buffer, starts, ends)
    want = [w.decode("utf-8", "replace") for w in (words[i] for i in picks)]
    assert got is not None
    inverse, texts = got
    assert len(texts) == len(set(words)) and [texts[i] for i in inverse] == want
    assert _decoded(buffer, starts, ends).tolist() == want


def test_fresh_process_loads_kernels_without_numba_target_setup(tmp_path):
    """A new process loads the cached kernels without numba's registries (nor scipy.linalg, nor its array
    implementation: a kernel allocating an array inside made loading it import numba.np.arrayobj, 0.08 s),
    and they decode. (Through numba: the machine code linked without numba is test_xspace_native's.)"""
    import os
    import subprocess
    import sys

    from traceview.parsers.native import kernels as xspace_kernels

    with native_loader.loading():  # the kernels are in numba's cache from here on
        native_loader._call_each(xspace_kernels)
    code = (
        "import sys, numpy as np\n"
        "from traceview.parsers.xspace import fast as xspace_fast\n"
        "from traceview.parsers.native import loader as native_loader\n"
        "assert native_loader.enabled()\n"
        "line = b'\\x12\\x01l\\x22\\x0a\\x08\\x07\\x10\\x05\\x22\\x04\\x08\\x02\\x18\\x09'\n"
        "ev = xspace_fast.RawLine(line).events.decode_wide(np.array([2], dtype=np.int64))\n"
        "assert ev.metadata_id.tolist() == [7] and ev.offset_ps.tolist() == [5]\n"
        "assert ev.kind.tolist() == [[3]] and ev.bits.tolist() == [[9]]\n"
        "print('numba.np.arraymath' in sys.modules, 'scipy.linalg' in sys.modules, 'numba.np.arrayobj' in sys.modules,\n"
        "      'numba' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env=dict(os.environ, TRACEVIEW_NO_NATIVE="1"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "False", "True"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps")
def test_llvm_pages_leave_the_resident_set_once_the_kernels_are_loaded(tmp_path):
    """A fresh process: after loading the kernels, LLVM's read-only library mappings with no page of their
    own hold (almost) nothing resident, its copied-on-write ones are left alone, and the kernels still run."""
    native_loader.warm_up()
    code = (
        "import numpy as np\n"
        "from traceview.parsers.xspace import fast as xspace_fast\n"
        "from traceview.parsers.native import loader as native_loader\n"
        "assert native_loader.enabled()\n"
        "dropped = set(native_loader._read_only_file_pages('libllvmlite'))\n"
        "resident, kept = 0, 0\n"
        "current = None\n"
        "for line in open('/proc/self/smaps'):\n"
        "    head = line.split()[0]\n"
        "    if not head.endswith(':'):\n"
        "        lo, hi = (int(x, 16) for x in head.split('-'))\n"
        "        current = (lo, hi) if 'libllvmlite' in line else None\n"
        "    elif head == 'Rss:' and current is not None:\n"
        "        kb = int(line.split()[1])\n"
        "        if current in dropped: resident += kb\n"
        "        else: kept += kb\n"
        "print(len(dropped), resident, kept)\n"
        "from traceview.parsers.tables.nesting import nested_children\n"
        "print(nested_children(np.array([0, 1]), np.array([3, 2])).tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    counts, children = out.stdout.splitlines()
    mappings, resident_kb, kept_kb = (int(x) for x in counts.split())
    assert mappings >= 2 and resident_kb < 4096       # 65-70 MB before: only pages touched since remain
    assert kept_kb < 8192                              # the written (relro, data) mappings: small, untouched
    assert children == "[1, 0]"


def _parsed_whole(data: bytes) -> xspace_fast.FastSpace:
    from traceview.parsers.xspace.schema import XSpaceLines

    space = XSpaceLines()
    space.ParseFromString(data)
    return xspace_fast._from_message(space)


def _same_space(a: xspace_fast.FastSpace, b: xspace_fast.FastSpace) -> None:
    assert len(a.planes) == len(b.planes)
    for pa, pb in zip(a.planes, b.planes):
        assert pa._plane == pb._plane
        assert [line.events.data for line in pa.lines] == [line.events.data for line in pb.lines]
    assert (a.errors, a.warnings, a.hostnames) == (b.errors, b.warnings, b.hostnames)


def test_outline_gives_what_protobuf_parsing_gives(shared_traces, sample_traces):
    """The compiled outline (lines sliced from the file, the rest parsed by protobuf) against protobuf
    parsing the whole file, on every real trace."""
    files = _trace_files(shared_traces) + _trace_files(sample_traces)
    for f in files:
        data = f.read_bytes()
        if data[:2] == b"\x1f\x8b":
            continue
        assert xspace_fast._outline(np.frombuffer(data, dtype=np.uint8)) is not None, f
        _same_space(xspace_fast.parse_space(data), _parsed_whole(data))


def test_outline_leaves_odd_layouts_to_protobuf():
    """A plane or line field that is not length-delimited, or a group, is not the plain layout: protobuf
    parses the file as it always did (here it keeps them as unknown fields)."""
    space = XSpaceRaw()
    plane = space.planes.add(name="p", id=3)
    plane.lines.add(name="l").events.append(XEvent(metadata_id=1, offset_ps=5).SerializeToString())
    space.hostnames.append("h")
    plain = space.SerializeToString()
    buf = np.frombuffer(plain, dtype=np.uint8)
    outline = xspace_fast._outline(buf)
    assert outline is not None
    assert [(int(r[0]), int(r[1])) for r in outline] == [(-1, 1), (0, 1), (0, 2), (0, 3), (-1, 4)]
    _same_space(xspace_fast.parse_space(plain), _parsed_whole(plain))
    for odd in (plain + b"\x08\x05",          # XSpace field 1 (planes) as a varint
                plain + b"\x0b\x0c",          # an empty group, field 1
                plain + b"\x0a\x02\x18\x01"):  # a plane whose field 3 (lines) is a varint
        assert xspace_fast._outline(np.frombuffer(odd, dtype=np.uint8)) is None
        _same_space(xspace_fast.parse_space(odd), _parsed_whole(odd))


def test_lines_are_views_of_the_file_not_copies():
    """Each line's events point into the file's own bytes: a 100 MB host is not held twice while read."""
    space = XSpaceRaw()
    plane = space.planes.add(name="p")
    for k in range(3):
        plane.lines.add(name=f"l{k}").events.append(XEvent(metadata_id=1, offset_ps=k).SerializeToString())
    data = space.SerializeToString()
    lines = xspace_fast.parse_space(data).planes[0].lines
    assert [line.name for line in lines] == ["l0", "l1", "l2"]
    assert all(isinstance(line.events.data, memoryview) and line.events.data.obj is data for line in lines)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_pool_workers_split_lines_over_their_share_of_the_cores():
    """With --jobs N each worker splits a large line over cores/N threads: N workers each splitting over
    every core would fight for them. In a process of its own: this one may have run JAX, after which
    nothing forks (traceview.runtime.forked.fork_is_safe)."""
    import subprocess
    import sys

    code = (
        "from traceview.parsers.xspace import fast as xspace_fast\n"
        "from traceview.parsers.native import loader as native_loader\n"
        "from traceview.runtime.pool import process_pool\n"
        "native_loader._cores = lambda: 8\n"
        "with process_pool(2, 'fork') as pool:\n"
        "    print(pool.submit(native_loader.split_threads).result())\n"
        "with process_pool(16, 'fork') as pool:\n"
        "    print(pool.submit(native_loader.split_threads).result())\n"
        "print(native_loader.split_threads())\n"
    )
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["4", "1", "8"]        # the reading process itself: every core


def test_a_kernel_not_in_numbas_cache_is_announced_before_it_compiles(tmp_path):
    """The loader calls native_loader.on_compile(True) when numba is about to compile (its cache lacks the
    kernel) and on_compile(False) once loaded; nothing when the kernel comes from the cache: a fresh
    cache folder, then the same again."""
    import os
    import subprocess
    import sys

    pytest.importorskip("numba")
    (tmp_path / "tiny_kernel.py").write_text(
        "from numba import njit\n\n@njit(cache=True)\ndef twice(x):\n    return 2 * x\n")
    code = (
        "from traceview.parsers.xspace import fast as xspace_fast\n"
        "from traceview.parsers.native import loader as native_loader\n"
        "import tiny_kernel\n"
        "calls = []\n"
        "native_loader.on_compile = calls.append\n"
        "with native_loader.loading():\n"
        "    assert tiny_kernel.twice(21) == 42\n"
        "print(calls)\n"
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"), PYTHONPATH=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                           cwd=tmp_path, env=env) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr[-2000:] + runs[1].stderr[-2000:]
    assert [r.stdout.strip() for r in runs] == ["[True, False]", "[]"]


def test_a_small_file_is_read_without_loading_the_compiled_reader(sample_traces):
    """Below the compiled reader's size, nothing loads it (a first use on a machine would compile it for a
    file the numpy decoder reads): a fresh process reads a sample with neither numba nor llvmlite imported."""
    path = sorted(sample_traces.rglob("*.xplane.pb"))[0]
    assert path.stat().st_size < _FAST_MIN_BYTES
    code = ("import sys\nfrom traceview.parsers.xspace.reader import read_xplane\n"
            f"assert len(read_xplane({str(path)!r}).ops)\nprint('numba' in sys.modules, 'llvmlite' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]

