"""On-disk cache of a command's finished output: a second run on unchanged inputs only copies bytes.

An entry holds what the command wrote through ``write_output`` (its output
texts), what it wrote to stderr (warnings) and its exit code, under a key the
caller computes (traceview.commands.runner: version, source fingerprint,
options, the identity of every input file). Entries live in
``<cache dir>/results/`` (traceview.cache.store), one file each::

    MAGIC | header length (8 bytes, little-endian) | header (JSON) | payload

The header names the full key, the exit code, the byte lengths of the texts
and of stderr, and the payload's SHA-256: a truncated, corrupt or foreign
entry, or one for another key, is a miss (and removed), never an error. So
are a read-only or missing folder and a full disk. Sizes are checked before
anything is read, and the oldest entries go when the folder passes
``TRACEVIEW_CACHE_MAX_MB``. Only the standard library is imported: a hit
never loads numpy or pandas.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from traceview.cache.store import max_bytes, remove, store, touch
from traceview.cache_root import cache_root

FORMAT = 1
MAGIC = b"traceview-out\x00\x01\n"
_SUFFIX = ".out"
MAX_ENTRY_BYTES = 512 << 20   # larger outputs are not stored (a CSV of every op of a pod can be large)
MAX_HEADER_BYTES = 64 << 10
MAX_TEXTS = 64                # a command writes its output once or a few times


@dataclass
class Entry:
    """What a command produced: `texts` in the order written, `stderr`, `exit_code`."""

    texts: list[str]
    stderr: str
    exit_code: int


def results_dir() -> Path:
    return cache_root() / "results"


def entry_path(key: str) -> Path:
    return results_dir() / (key[:32] + _SUFFIX)


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def get(key: str) -> Entry | None:
    """The entry stored under `key` (a hex digest), or None."""
    path = entry_path(key)
    try:
        # Non-blocking: a FIFO put where an entry should be must not hang the command.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(fd, "rb") as handle:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES + MAX_HEADER_BYTES:
                raise ValueError("not an entry")
            blob = handle.read(st.st_size + 1)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        remove(path)
        return None
    entry = _decode(blob, key)
    if entry is None:  # corrupt, truncated or foreign: a miss, and the next store replaces it
        remove(path)
        return None
    touch(path)
    return entry


def _decode(blob: bytes, key: str) -> Entry | None:
    start = len(MAGIC) + 8
    if len(blob) < start or not blob.startswith(MAGIC):
        return None
    header_len = int.from_bytes(blob[len(MAGIC):start], "little")
    if header_len > MAX_HEADER_BYTES or len(blob) < start + header_len:
        return None
    try:
        header = json.loads(blob[start:start + header_len])
    except (ValueError, RecursionError):
        return None
    if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("key") != key:
        return None
    lengths, exit_code, digest = header.get("lengths"), header.get("exit_code"), header.get("sha256")
    if not (isinstance(lengths, list) and 1 <= len(lengths) <= MAX_TEXTS + 1
            and all(type(n) is int and n >= 0 for n in lengths)
            and type(exit_code) is int and 0 <= exit_code <= 255 and isinstance(digest, str)):
        return None
    payload = blob[start + header_len:]
    if len(payload) != sum(lengths) or hashlib.sha256(payload).hexdigest() != digest:
        return None
    parts, offset = [], 0
    try:
        for n in lengths:
            parts.append(payload[offset:offset + n].decode("utf-8", "surrogatepass"))
            offset += n
    except UnicodeDecodeError:
        return None
    return Entry(texts=parts[:-1], stderr=parts[-1], exit_code=exit_code)


def put(key: str, entry: Entry) -> bool:
    """Store `entry` under `key`; False (nothing stored) when it is too large or the folder is unusable."""
    if len(entry.texts) > MAX_TEXTS or not 0 <= entry.exit_code <= 255:
        return False
    texts = [*entry.texts, entry.stderr]
    limit = min(MAX_ENTRY_BYTES, max_bytes())
    if sum(len(t) for t in texts) > limit:  # before encoding: a UTF-8 text has at least a byte per character
        return False
    try:
        parts = [_encode(t) for t in texts]
    except UnicodeEncodeError:
        return False
    if sum(len(p) for p in parts) > limit:
        return False
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    header = json.dumps({"format": FORMAT, "key": key, "exit_code": entry.exit_code,
                         "lengths": [len(p) for p in parts], "sha256": digest.hexdigest()}).encode()
    def write(handle) -> None:
        handle.write(MAGIC + len(header).to_bytes(8, "little") + header)
        for part in parts:
            handle.write(part)

    return store(entry_path(key), _SUFFIX, write)
