"""Reading HLO files from disk: bytes, decompressed when the name ends in ``.xz`` or ``.gz``."""

from __future__ import annotations

import gzip
import lzma
from pathlib import Path

from traceview.errors import HloError


def read_bytes(path: Path) -> bytes:
    """A file's bytes, decompressed when it ends in ``.xz`` or ``.gz``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise HloError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        if path.suffix == ".xz":
            return lzma.decompress(data)
        if path.suffix == ".gz":
            return gzip.decompress(data)
    except (lzma.LZMAError, OSError, EOFError) as exc:
        raise HloError(f"{path}: corrupt {path.suffix} compressed file ({exc})") from None
    return data
