"""Where the profiler puts its files, and what they are called.

A host's trace is ``<host>.xplane.pb[.gz]`` or ``<host>.trace.json[.gz]``
(``perfetto_trace.json[.gz]`` names no host); the HLO protos some profiler
versions write beside it are ``*.hlo_proto.pb``; an XLA dump folder lies in the
run folder or in the folder above ``plugins/``. Kept apart from
:mod:`traceview.parsers.discover` (which finds runs and reads their capture
times from the files) so that the readers can name a host without importing
discovery.
"""

from __future__ import annotations

from pathlib import Path

from traceview.parsers import remote

XPLANE_SUFFIXES = (".xplane.pb", ".xplane.pb.gz")
JSON_SUFFIXES = (".trace.json", ".trace.json.gz")
PERFETTO_NAMES = ("perfetto_trace.json", "perfetto_trace.json.gz")
TRACE_SUFFIXES = XPLANE_SUFFIXES + JSON_SUFFIXES
HLO_PROTO_SUFFIX = ".hlo_proto.pb"


def is_trace_file(path: Path) -> bool:
    """An xplane or a trace-event JSON file, by its name."""
    return path.name.endswith(TRACE_SUFFIXES) or path.name in PERFETTO_NAMES


def is_xplane_file(path: Path) -> bool:
    return path.name.endswith(XPLANE_SUFFIXES)


def host_of(path: Path) -> str:
    """``<host>.xplane.pb[.gz]``, ``<host>.trace.json[.gz]`` -> ``<host>``; ``perfetto_trace.json.gz`` ->
    ``perfetto_trace`` (the file does not name its host)."""
    name = path.name
    if name in PERFETTO_NAMES:
        return "perfetto_trace"
    for suffix in TRACE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def path_text(path: str | Path) -> str:
    """A path as the user would write it: a URL keeps its ``//`` (parsers/remote.py)."""
    return remote.url_of(path) or str(path)


DUMP_DIR_NAMES = ("hlo", "xla_dump", "dump", "hlo_dump")


def find_dump_dir(trace_path: str | Path) -> Path | None:
    """An HLO dump folder beside a trace: in PATH itself or in the folder above `plugins/`. Behind a URL,
    a local copy of it (parsers/remote.py)."""
    url = remote.url_of(trace_path)
    if url is not None:
        return _remote_dump_dir(url)
    path = Path(trace_path)
    candidates = [path] if path.is_dir() else []
    for parent in [path, *path.parents]:
        if parent.name == "plugins":
            candidates.append(parent.parent)
            break
    for base in candidates:
        for name in DUMP_DIR_NAMES:
            if (base / name).is_dir():
                return base / name
    return None


def _remote_dump_dir(url: str) -> Path | None:
    import posixpath

    head, _, rest = url.partition("://")
    parts = rest.rstrip("/").split("/")
    bases = [url.rstrip("/")]
    if "plugins" in parts:
        bases.append(f"{head}://{'/'.join(parts[:len(parts) - 1 - parts[::-1].index('plugins')])}")
    for base in bases:
        for name in DUMP_DIR_NAMES:
            candidate = posixpath.join(base, name)
            if remote.is_dir(candidate):
                return remote.local_copy_of_dir(candidate)
    return None
