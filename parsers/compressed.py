"""Reading input files with a bound on what they may expand to: the one place that decompresses.

Every reader goes through :func:`read_limited`: the file is recognised as gzip,
xz, bzip2 or zstd by its magic bytes (never by its name alone) and decompressed
as a stream that stops as soon as the output passes the limit, so a small
"decompression bomb" costs at most the limit in memory, never its full size.

The default limit is what a protobuf message can hold (2 GiB): no real XSpace
or HloProto is larger. HLO text has the same limit (XLA's text form of a
module is a few times its proto, and real dumps stay far below it); callers
may pass a lower one.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from pathlib import Path

from traceview.errors import UserError
from traceview.parsers import remote
from traceview.parsers.remote import url_of

PROTO_LIMIT = 2 << 30  # bytes: the most a protobuf message can hold
TEXT_LIMIT = 2 << 30
_CHUNK = 1 << 20

_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"BZh", "bzip2"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)

_SUFFIXES = {".gz": "gzip", ".xz": "xz", ".bz2": "bzip2", ".zst": "zstd"}


def compression_of(data: bytes) -> str | None:
    """'gzip', 'xz', 'bzip2' or 'zstd' when `data` starts with that format's magic bytes, else None."""
    for magic, name in _MAGIC:
        if data[: len(magic)] == magic:
            return name
    return None


def _limit_error(error: type[UserError], path: object, what: str, limit: int) -> UserError:
    size = f"{limit / (1 << 30):.3g} GiB" if limit >= 1 << 30 else f"{limit / (1 << 20):.3g} MiB"
    why = " (more than a protobuf message can hold)" if limit >= PROTO_LIMIT else ""
    return error(f"{path}: {what} larger than {size}{why}: refusing to read it")


def read_limited(path: str | Path, limit: int | None = None, error: type[UserError] = UserError,
                 what: str = "file") -> bytes:
    """The file's bytes, decompressed when compressed, never more than `limit` bytes.

    Raises `error` (one line naming the file) when the file cannot be read,
    is corrupt or truncated compressed data, or would expand past `limit`.
    """
    limit = PROTO_LIMIT if limit is None else limit  # looked up per call: tests lower it
    url = url_of(path)
    if url is not None:  # an object behind an fsspec URL (parsers/remote.py): the same bound
        data = remote.read_bytes(url, limit, error, what)
        if len(data) > limit:
            raise _limit_error(error, url, what, limit)
        return decompress(data, url, limit, error, what)
    p = Path(path)
    try:
        if not p.is_file():
            raise error(f"{p}: not a regular file" if p.exists() else f"{p}: no such file")
        if p.stat().st_size > limit:
            raise _limit_error(error, p, what, limit)
        with open(p, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise error(f"{p}: cannot read ({exc.strerror or exc})") from None
    named = _SUFFIXES.get(p.suffix.lower())
    if named is not None and data and compression_of(data) != named:
        raise error(f"{p}: corrupt {p.suffix} compressed file (no {named} header)")
    return decompress(data, p, limit, error, what)


def decompress(data: bytes, path: object, limit: int | None = None, error: type[UserError] = UserError,
               what: str = "file") -> bytes:
    """`data` itself, or its decompressed content when it starts with a known magic; at most `limit` bytes."""
    limit = PROTO_LIMIT if limit is None else limit
    kind = compression_of(data)
    if kind is None:
        if len(data) > limit:
            raise _limit_error(error, path, what, limit)
        return data
    try:
        out = _stream(kind, data, limit)
    except _TooLarge:
        raise _limit_error(error, path, f"{what} (decompressed)", limit) from None
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
        raise error(f"{path}: corrupt or truncated {kind} data ({exc})") from None
    if not out:
        raise error(f"{path}: {kind} file holds no data")
    return out


_HEAD_INPUT = 1 << 16  # compressed bytes read for a head: far more than a few KB of text needs


def read_head(path: str | Path, size: int) -> bytes:
    """At most `size` bytes from the start of the file's content, decompressed when compressed; b""
    when it cannot be read. Bounded both ways: at most 64 KiB are read, at most `size` come out."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(_HEAD_INPUT)
    except OSError:
        return b""
    kind = compression_of(raw)
    if kind is None:
        return raw[:size]
    if kind == "zstd":
        try:
            import zstandard
        except ImportError:
            return b""
        try:
            with zstandard.ZstdDecompressor().stream_reader(raw) as reader:
                return reader.read(size)
        except zstandard.ZstdError:
            return b""
    try:
        return _decompressor(kind).decompress(raw, max_length=size)
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError):
        return b""


class _TooLarge(Exception):
    pass


def _stream(kind: str, data: bytes, limit: int) -> bytes:
    if kind == "zstd":
        return _zstd(data, limit)
    parts: list[bytes] = []
    total = 0
    rest = data
    while rest:
        dec = _decompressor(kind)
        chunk_input = rest
        stalled = 0
        while True:
            out = dec.decompress(chunk_input, max_length=min(_CHUNK, limit + 1 - total))
            chunk_input = b""
            total += len(out)
            parts.append(out)
            if total > limit:
                raise _TooLarge
            if _finished(dec):
                break
            if not out:
                stalled += 1
                if _needs_input(dec) or stalled > 2:
                    raise EOFError("compressed stream ends before its end marker")
            else:
                stalled = 0
        rest = _unused(dec)
        if kind != "gzip" or not rest.strip(b"\x00"):
            break  # gzip files may hold several members; trailing zero padding is allowed
    return b"".join(parts)


def _zstd(data: bytes, limit: int) -> bytes:
    try:
        import zstandard
    except ImportError:
        raise ValueError("reading zstd needs the 'zstandard' package (pip install zstandard)") from None
    parts: list[bytes] = []
    total = 0
    try:
        with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
            while True:
                out = reader.read(min(_CHUNK, limit + 1 - total))
                if not out:
                    break
                total += len(out)
                parts.append(out)
                if total > limit:
                    raise _TooLarge
    except zstandard.ZstdError as exc:
        raise ValueError(str(exc)) from None
    return b"".join(parts)


class _Gzip:
    """zlib's gzip decoder with the bz2/lzma decompressor interface."""

    def __init__(self) -> None:
        self._d = zlib.decompressobj(wbits=31)
        self._pending = b""
        self.eof = False
        self.needs_input = True

    def decompress(self, data: bytes, max_length: int) -> bytes:
        buf = self._pending + data
        out = self._d.decompress(buf, max_length)
        self._pending = self._d.unconsumed_tail
        self.eof = self._d.eof
        self.needs_input = not self._pending
        return out

    @property
    def unused_data(self) -> bytes:
        return self._d.unused_data


def _decompressor(kind: str):
    if kind == "gzip":
        return _Gzip()
    if kind == "xz":
        return lzma.LZMADecompressor()
    if kind == "bzip2":
        return bz2.BZ2Decompressor()
    raise AssertionError(kind)


def _finished(dec) -> bool:
    return bool(dec.eof)


def _needs_input(dec) -> bool:
    return bool(getattr(dec, "needs_input", True))


def _unused(dec) -> bytes:
    return bytes(dec.unused_data)
