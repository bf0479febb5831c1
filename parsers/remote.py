"""Log dirs in object storage: ``gs://``, ``s3://`` and any other fsspec URL as PATH.

A URL is read through fsspec (``pip install 'traceview[remote]'`` brings
fsspec, gcsfs and s3fs); everything above the reading sees the files as if
they were local: discovery lists the objects under the URL
(:func:`list_files`), each host file is read with the same bound as a local
one (:func:`read_bytes`), and the parsed-table cache keys an object by the
identity its filesystem gives (:func:`identity`: etag, generation or checksum,
else modification time and size), so an unchanged object is never read twice.

``pathlib.Path`` folds the ``//`` of a URL (``gs://b/x`` becomes ``gs:/b/x``);
:func:`url_of` recognises both spellings, so a URL may travel as a Path.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from traceview.errors import UserError

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+):/+(.*)$", re.S)
_LOCAL_SCHEMES = {"file", "local"}
MAX_LISTED = 200_000       # objects listed under one URL at most
DUMP_LIMIT = 2 << 30       # bytes of an XLA dump folder copied from a URL at most
_IDENTITY_KEYS = ("etag", "ETag", "generation", "md5Hash", "crc32c", "checksum", "version_id", "VersionId",
                  "mtime", "LastModified", "updated", "last_modified", "created", "size", "Size")


def url_of(path: str | os.PathLike | None) -> str | None:
    """The fsspec URL `path` names (a ``scheme://`` form, or the one ``Path`` folded); None for a local path."""
    if path is None:
        return None
    text = os.fspath(path)
    m = _SCHEME.match(text)
    if m is None or os.path.exists(text):
        return None
    scheme, rest = m[1].lower(), m[2]
    if scheme in _LOCAL_SCHEMES:
        return f"{scheme}:///{rest}"
    return f"{scheme}://{rest}"


def _fs(url: str):
    """(filesystem, path in it) of a URL; a UserError naming what to install when fsspec or the scheme's
    implementation is missing."""
    try:
        import fsspec
    except ImportError:
        raise UserError(f"{url}: reading a URL needs fsspec: pip install 'traceview[remote]'") from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise UserError(f"{url}: no filesystem for this URL ({exc}); pip install 'traceview[remote]'") from None
    except (ValueError, OSError) as exc:
        raise UserError(f"{url}: cannot open ({exc})") from None


def _url(fs, path: str) -> str:
    """The URL of a path fsspec listed (its protocol prefixed back)."""
    return fs.unstrip_protocol(path)


def list_files(url: str) -> list[tuple[str, int]]:
    """(URL, size) of every object under `url` (or the object itself), sorted; UserError when there is none."""
    fs, root = _fs(url)
    try:
        if fs.isfile(root):
            return [(_url(fs, root), int(fs.size(root) or 0))]
        if not fs.isdir(root):
            raise UserError(f"{url}: no such file or directory")
        found = fs.find(root, detail=True)
    except UserError:
        raise
    except (OSError, ValueError) as exc:
        raise UserError(f"{url}: cannot list ({exc})") from None
    if len(found) > MAX_LISTED:
        raise UserError(f"{url}: more than {MAX_LISTED} objects below it; give a run's folder")
    return sorted((_url(fs, p), int(info.get("size") or 0)) for p, info in found.items()
                  if info.get("type", "file") == "file")


def read_bytes(url: str, limit: int, error: type[UserError] = UserError, what: str = "file") -> bytes:
    """At most ``limit + 1`` bytes of the object (the caller judges the bound), or `error` naming it."""
    fs, path = _fs(url)
    try:
        with fs.open(path, "rb") as fh:
            return fh.read(limit + 1)
    except FileNotFoundError:
        raise error(f"{url}: no such file") from None
    except (OSError, ValueError) as exc:
        raise error(f"{url}: cannot read {what} ({exc})") from None


def size(url: str) -> int:
    fs, path = _fs(url)
    try:
        return int(fs.size(path) or 0)
    except (OSError, ValueError):
        return 0


def identity(url: str) -> list | None:
    """What says the object changed: the fields of its listing that do (etag, generation, checksum, mtime,
    size), as JSON-able values; None when it cannot be looked up."""
    try:
        fs, path = _fs(url)
        info = fs.info(path)
    except (UserError, OSError, ValueError):
        return None
    fields = [[k, str(info[k])] for k in _IDENTITY_KEYS if info.get(k) is not None]
    return fields or None


def modified(url: str) -> float | None:
    """When the object was last written (seconds since the epoch), as its filesystem reports it
    (``mtime``, ``LastModified``, ``updated``, ``created``: numbers, datetimes or ISO text); None if unknown."""
    from datetime import datetime

    try:
        fs, path = _fs(url)
        info = fs.info(path)
    except (UserError, OSError, ValueError):
        return None
    for key in ("mtime", "LastModified", "updated", "last_modified", "created"):
        value = info.get(key)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def is_dir(url: str) -> bool:
    try:
        fs, path = _fs(url)
        return bool(fs.isdir(path))
    except (UserError, OSError, ValueError):
        return False


def local_copy_of_dir(url: str) -> Path:
    """A local copy of the folder at `url` (an XLA dump: the HLO readers take local folders), made once per
    content: it lives under the temporary folder, named by the objects' identities. At most DUMP_LIMIT bytes."""
    files = list_files(url)
    if sum(n for _, n in files) > DUMP_LIMIT:
        raise UserError(f"{url}: dump folder larger than {DUMP_LIMIT >> 30} GiB: refusing to copy it")
    key = hashlib.sha256(json.dumps([url, [(u, identity(u)) for u, _ in files]]).encode()).hexdigest()[:24]
    dest = Path(tempfile.gettempdir()) / f"traceview-remote-{os.getuid()}" / key
    if dest.is_dir():
        return dest
    partial = dest.with_name(dest.name + f".{os.getpid()}.partial")
    prefix = url.rstrip("/") + "/"
    for file_url, _ in files:
        relative = file_url[len(prefix):] if file_url.startswith(prefix) else Path(file_url).name
        if not relative or ".." in Path(relative).parts:
            continue
        target = partial / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(read_bytes(file_url, DUMP_LIMIT))
    partial.mkdir(parents=True, exist_ok=True)
    try:
        partial.rename(dest)
    except OSError:  # another process made it meanwhile
        pass
    return dest if dest.is_dir() else partial
