"""Reading HLO files from disk: bytes, decompressed (gzip, xz, bzip2, zstd: by magic bytes) with a bound."""

from __future__ import annotations

from pathlib import Path

from traceview.errors import HloError
from traceview.parsers.compressed import read_limited


def read_bytes(path: Path) -> bytes:
    """A file's bytes, decompressed when compressed, never more than a protobuf message can hold (2 GiB)."""
    return read_limited(path, error=HloError, what="HLO file")
