"""The kernels' machine code kept on disk and linked with llvmlite alone (parsers/native/linker.py)."""

from __future__ import annotations

import hashlib
import os
import random
import struct
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba")
from traceview.parsers.native import kernels as xspace_kernels  # noqa: E402
from traceview.parsers.native import linker as xspace_native  # noqa: E402
from traceview.parsers.native import loader as native_loader
from traceview.parsers.xspace.reader import read_xplane  # noqa: E402

pytestmark = pytest.mark.skipif(not xspace_native.supported(), reason="ELF object files: Linux x86-64 / aarch64")

# One line holding one event (metadata id 7, offset 5) with stat 2 = 9.
_LINE = b"\x12\x01l\x22\x0a\x08\x07\x10\x05\x22\x04\x08\x02\x18\x09"
_DECODE = (
    "import sys, numpy as np\n"
    "from traceview.parsers.xspace import fast as xspace_fast\n"
    "from traceview.parsers.native import loader as native_loader\n"
    f"ev = xspace_fast.RawLine({_LINE!r}).events.decode_wide(np.array([2], dtype=np.int64))\n"
    "assert ev.metadata_id.tolist() == [7] and ev.offset_ps.tolist() == [5] and ev.bits.tolist() == [[9]]\n"
    "print(type(native_loader.kernels()).__name__, 'numba' in sys.modules)\n"
)


def _run(code: str, cache, **env) -> subprocess.CompletedProcess:
    environment = dict(os.environ, NUMBA_CACHE_DIR=str(cache), **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=environment)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A cache folder where a first process built the file (numba compiled the wrappers)."""
    cache = tmp_path_factory.mktemp("numba-cache")
    first = _run(_DECODE, cache)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.split() == ["NativeKernels", "True"]     # built with numba, used at once
    return cache


def _native_file(cache):
    files = list(cache.glob("kernels.*.native"))
    assert len(files) == 1
    return files[0]


def test_a_later_process_links_the_kernels_without_importing_numba(built):
    _native_file(built)
    later = _run(_DECODE, built)
    assert later.returncode == 0, later.stderr[-3000:]
    assert later.stdout.split() == ["NativeKernels", "False"]


def test_switched_off_the_kernels_run_through_numba(built):
    off = _run(_DECODE, built, TRACEVIEW_NO_NATIVE="1")
    assert off.returncode == 0, off.stderr[-3000:]
    assert off.stdout.split() == ["module", "True"]


@pytest.mark.parametrize("damage", ["truncated", "flipped", "empty", "magic", "huge header", "not json",
                                    "unknown symbol"])
def test_a_damaged_file_is_not_run_and_is_built_again(built, tmp_path, damage):
    """Anything off in the file: the kernels come through numba, and the file is written again whole."""
    good = _native_file(built).read_bytes()
    cache = tmp_path / "cache"
    cache.mkdir()
    target = cache / _native_file(built).name
    start = len(xspace_native._MAGIC) + 4
    size, = struct.unpack_from("<I", good, len(xspace_native._MAGIC))
    bad = {
        "truncated": good[:-100],
        "flipped": good[:-1] + bytes([good[-1] ^ 0xFF]),
        "empty": b"",
        "magic": b"X" + good[1:],
        "huge header": good[:len(xspace_native._MAGIC)] + struct.pack("<I", 1 << 30) + good[start:],
        "not json": good[:start] + b"{" * size + good[start + size:],
        # A whole file whose object needs a symbol no one gives: linking it would end the process (LLVM aborts).
        "unknown symbol": _unknown_symbol(good),
    }[damage]
    assert xspace_native._parse(bad) is None or damage == "unknown symbol"
    target.write_bytes(bad)
    again = _run(_DECODE, cache)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.split() == ["NativeKernels", "True"]     # rebuilt (numba imported), not linked
    assert target.read_bytes() != bad and xspace_native._parse(target.read_bytes()) is not None


def _unknown_symbol(good: bytes) -> bytes:
    """The file with numba_unpickle renamed in its object's string table, and its checksum made to match."""
    header, obj = xspace_native._parse(good)
    obj = obj.replace(b"numba_unpickle\0", b"numba_unpicklx\0")
    assert "numba_unpicklx" in xspace_native.undefined_symbols(obj)
    header["sha256"] = hashlib.sha256(obj).hexdigest()
    return xspace_native._MAGIC + xspace_native._encode(header) + obj


def test_the_file_names_what_the_code_depends_on(monkeypatch):
    name = xspace_native._file_name()
    monkeypatch.setenv("NUMBA_CPU_NAME", "generic")
    assert xspace_native._file_name() != name
    monkeypatch.delenv("NUMBA_CPU_NAME")
    monkeypatch.setitem(xspace_native.KERNELS, "line_head", (("u1:1", "n", "i8:1"), "int"))
    assert xspace_native._file_name() != name


def test_nowhere_to_write_nothing_is_compiled(monkeypatch, tmp_path):
    """No folder takes the file: the wrappers are not compiled at all (each process would compile them)."""
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setattr(xspace_native, "_folders", lambda: [blocked / "below-a-file"])
    compiled = []
    monkeypatch.setattr(xspace_native, "_compile", lambda *a: compiled.append(a))
    assert xspace_native.build(xspace_kernels) is None and not compiled


def test_the_file_lands_under_traceviews_cache_root(tmp_path, monkeypatch):
    """With TRACEVIEW_CACHE_DIR set (and no numba cache folder), the kernels are written under its root and
    linked from there; the install's folders are still looked in after it."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path / "cache"))
    folders = xspace_native._folders()
    assert folders[0] == tmp_path / "cache" / "kernels" and len(folders) == 3
    assert xspace_native.build(xspace_kernels) is not None
    (written,) = (tmp_path / "cache" / "kernels").glob("kernels.*.native")
    assert written.name == xspace_native._file_name()
    monkeypatch.setattr(xspace_native, "_folders", lambda: [written.parent])
    assert xspace_native.load() is not None


def test_native_kernels_give_numbas_results(tmp_path, monkeypatch):
    """Each kernel, called natively and through numba's dispatcher, on the same inputs."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    native = xspace_native.build(xspace_kernels)
    assert native is not None
    rng = np.random.default_rng(7)
    data = np.frombuffer(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes() + b"abcabc" * 50, dtype=np.uint8)
    starts = np.sort(rng.integers(0, data.size - 8, 300)).astype(np.int64)
    ends = starts + rng.integers(0, 8, 300)
    for k in (native, xspace_kernels):
        assert k.slice_hashes(data, starts, ends, np.empty(300, np.uint64)).tolist() == \
            xspace_kernels.slice_hashes(data, starts, ends, np.empty(300, np.uint64)).tolist()
    assert native.slices_equal(data, starts, ends, starts, ends) is True
    assert native.slices_equal(data, starts[1:], ends[1:], starts[:-1], ends[:-1]) == \
        xspace_kernels.slices_equal(data, starts[1:], ends[1:], starts[:-1], ends[:-1])
    line = np.frombuffer(_LINE, dtype=np.uint8)
    for buf in (line, data):
        assert native.line_head(buf, buf.size, np.zeros(10, np.int64)).tolist() == \
            xspace_kernels.line_head(buf, buf.size, np.zeros(10, np.int64)).tolist()
        assert native.space_outline(buf, buf.size, np.zeros((0, 5), np.int64)) == \
            xspace_kernels.space_outline(buf, buf.size, np.zeros((0, 5), np.int64))
        assert native.event_position(buf, buf.size, 0) == xspace_kernels.event_position(buf, buf.size, 0)
    s = np.sort(rng.integers(0, 1000, 500)).astype(np.int64)
    d = rng.integers(0, 300, 500).astype(np.int64)
    order = np.lexsort((-d, s))
    s, d = s[order], d[order]
    got = [np.empty(500, np.int64) for _ in range(3)]
    want = [np.empty(500, np.int64) for _ in range(3)]
    assert native.self_times_in_order(s, d, *got) == xspace_kernels.self_times_in_order(s, d, *want)
    assert got[0].tolist() == want[0].tolist()
    got_children, want_children = np.zeros(500, np.int64), np.zeros(500, np.int64)
    native.nested_children(s, s + d, np.sort(s + d), got_children, np.full(500, -1, np.int64))
    xspace_kernels.nested_children(s, s + d, np.sort(s + d), want_children, np.full(500, -1, np.int64))
    assert got_children.tolist() == want_children.tolist() and got_children.any()
    with pytest.raises(TypeError):  # a column of another type would be read as the wrong numbers
        native.nested_children(s.astype(np.int32), s, s, s, s)
    with pytest.raises(TypeError):  # a strided view would be read as if contiguous
        native.nested_children(s[::2], s[::2], s[::2], s[::2], s[::2])


def test_every_real_trace_reads_the_same_natively_and_through_numba(shared_traces, sample_traces, monkeypatch):
    files = sorted(shared_traces.rglob("*.xplane.pb")) + sorted(sample_traces.rglob("*.xplane.pb"))
    assert files
    native_loader.kernels.cache_clear()
    assert isinstance(native_loader.kernels(), xspace_native.NativeKernels)
    native = [read_xplane(f, fast=True) for f in files]
    monkeypatch.setenv("TRACEVIEW_NO_NATIVE", "1")
    native_loader.kernels.cache_clear()
    try:
        assert native_loader.kernels() is xspace_kernels
        for f, got in zip(files, native):
            want = read_xplane(f, fast=True)
            for table in ("ops", "host_events", "steps"):
                assert getattr(got, table).equals(getattr(want, table)), (f, table)
    finally:
        native_loader.kernels.cache_clear()


def test_the_stub_ends_the_process_with_exit_code_3():
    """What numba's runtime symbols are mapped to: should a kernel ever call one, the process ends (exit 3,
    a bug) instead of running on with a kernel half done."""
    code = ("import ctypes\nfrom traceview.parsers.native import linker as xspace_native\n"
            "ctypes.CFUNCTYPE(None)(ctypes.cast(xspace_native._STUB, ctypes.c_void_p).value)()\nprint('ran on')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3 and "ran on" not in out.stdout
    assert "internal error" in out.stderr


def test_undefined_symbols_of_hostile_bytes_is_a_value_error_or_a_list():
    """The ELF reader on garbage and on every one-byte change of a real object's header and tables."""
    obj = xspace_native._object_code({name: xspace_native._compile(xspace_kernels, name, *spec)
                                      for name, spec in list(xspace_native.KERNELS.items())[:2]})
    assert "NRT_MemInfo_call_dtor" in xspace_native.undefined_symbols(obj)
    rng = random.Random(3)
    for _ in range(2000):
        data = bytearray(obj)
        for _ in range(rng.randint(1, 4)):
            at = rng.choice([rng.randrange(64), rng.randrange(len(data))])
            data[at] = rng.randrange(256)
        try:
            names = xspace_native.undefined_symbols(bytes(data[:rng.choice([len(data), rng.randrange(len(data))])]))
        except ValueError:
            continue
        assert all(isinstance(n, str) for n in names)
    for garbage in (b"", b"\x7fELF", b"\x7fELF\x02\x01" + b"\xff" * 100, bytes(200)):
        with pytest.raises(ValueError):
            xspace_native.undefined_symbols(garbage)


def test_parse_of_hostile_files_is_none_or_a_checked_header(built):
    good = _native_file(built).read_bytes()
    assert xspace_native._parse(good) is not None
    rng = random.Random(5)
    for _ in range(3000):
        data = bytearray(good[:rng.choice([len(good), rng.randrange(len(good) + 1)])])
        for _ in range(rng.randint(0, 3)):
            if data:
                data[rng.randrange(min(len(data), 400))] = rng.randrange(256)
        parsed = xspace_native._parse(bytes(data))
        if parsed is not None:
            header, obj = parsed
            assert set(header["symbols"]) == set(xspace_native.KERNELS)
            assert hashlib.sha256(obj).hexdigest() == header["sha256"]
