"""Find the trace files a user's PATH means.

PATH may be a TensorBoard-style log dir (anything above ``plugins/profile/<run>/``),
one run dir, or one trace file. A run is a folder holding one ``<host>.xplane.pb``
per host; when PATH holds several runs the newest is used unless one is named.
The profiler also writes per-module ``*.hlo_proto.pb`` files next to the
xplanes on some versions: their paths come with the run.

Trace-event JSON is a trace too (:mod:`traceview.parsers.trace_json.reader`):
``<host>.trace.json[.gz]`` (what the profiler tools export and repositories
commit) and ``perfetto_trace.json[.gz]`` (what JAX writes beside the xplane with
``create_perfetto_trace=True``). A folder holding xplanes is read from them
(they have everything the JSON has, and more); a folder of JSON files only is
read from those, ``<host>.trace.json`` preferred over ``perfetto_trace.json``
(JAX writes both, with the same events). What the files are called: :mod:`traceview.parsers.layout`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from traceview.errors import UserError
from traceview.parsers import remote
from traceview.parsers.layout import (
    HLO_PROTO_SUFFIX,
    PERFETTO_NAMES,
    host_of,
    is_trace_file,
    is_xplane_file,
    path_text,
)

_RUN_TIMESTAMP = re.compile(r"^(\d{4})_(\d{2})_(\d{2})_(\d{2})_(\d{2})_(\d{2})")


@dataclass
class Run:
    """One profiling session: a folder of per-host xplane files."""

    name: str
    path: Path
    files: list[Path]                      # one per host, sorted
    hlo_proto_files: list[Path] = field(default_factory=list)
    _cached_time: tuple[datetime, str] | None = field(default=None, init=False, repr=False, compare=False)
    skipped: list[Path] = field(default_factory=list)  # named like a trace but no regular file (dir, FIFO, dangling link)
    among: int = field(default=1, compare=False)  # how many runs PATH held when find_run picked this one

    @property
    def warnings(self) -> list[str]:
        """One per skipped name: a host whose trace file is not a regular file is missing from the run."""
        return [f"{f}: named like a trace file but {kind_of(f)}; skipped" for f in self.skipped]

    @property
    def format(self) -> str:
        """"xplane" or "trace-json": what the run's files are."""
        return "xplane" if all(is_xplane_file(f) for f in self.files) else "trace-json"

    @property
    def hosts(self) -> list[str]:
        return [host_of(f) for f in self.files]

    @property
    def total_bytes(self) -> int:
        return sum(_size(f) for f in self.files)

    @property
    def time(self) -> datetime:
        """When the run was taken (see :attr:`time_source`), in UTC."""
        return self._time()[0]

    @property
    def time_source(self) -> str:
        """Where :attr:`time` comes from: "trace" (the profiler's start time), "run name" or "file time"."""
        return self._time()[1]

    def _time(self) -> tuple[datetime, str]:
        """The earliest profiler start time recorded in the run's files; else the run folder's
        timestamp name (as the profiler writes it); else the newest file's mtime (which a copy or a
        clone resets, so it only orders runs when nothing better exists)."""
        if self._cached_time is None:
            from traceview.parsers.xspace.file import file_capture_time  # numpy/protobuf: not for `--help`

            starts = [t for t in (file_capture_time(f) for f in self.files if is_xplane_file(f)) if t is not None]
            m = _RUN_TIMESTAMP.match(self.name)
            named = None
            if m:
                try:
                    year, month, day, hour, minute, second = (int(g) for g in m.groups())
                    named = datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc)
                except ValueError:
                    named = None
            if starts:
                self._cached_time = (min(starts), "trace")
            elif named is not None:
                self._cached_time = (named, "run name")
            else:
                mtime = max(_mtime(f) for f in self.files)
                self._cached_time = (datetime.fromtimestamp(mtime, tz=timezone.utc), "file time")
        return self._cached_time

    def summary(self) -> dict:
        """What `traceview runs PATH` shows for the run."""
        return {"name": self.name, "path": path_text(self.path), "format": self.format, "hosts": self.hosts,
                "files": [path_text(f) for f in self.files], "total_bytes": self.total_bytes,
                "captured": self.time.isoformat(), "captured_from": self.time_source}


def _size(path: Path) -> int:
    url = remote.url_of(path)
    return remote.size(url) if url is not None else path.stat().st_size


def _mtime(path: Path) -> float:
    url = remote.url_of(path)
    if url is None:
        return path.stat().st_mtime
    return remote.modified(url) or 0.0


def list_runs(path: str | Path) -> list[Run]:
    """Every run under PATH, oldest first. Raises UserError when PATH has no trace."""
    url = remote.url_of(path)
    if url is not None:
        return _remote_runs(url)
    root = Path(path).expanduser()
    if not root.exists():
        raise UserError(f"{root}: no such file or directory")
    if not root.is_file() and not root.is_dir():
        raise UserError(f"{root}: {kind_of(root)}: give a trace file or a folder")
    if root.is_file():
        if not is_trace_file(root):
            raise UserError(f"{root}: not a trace file (expected a *.xplane.pb[.gz], *.trace.json[.gz] or "
                            "perfetto_trace.json[.gz] file)")
        return [Run(name=root.parent.name, path=root.parent, files=[root],
                    hlo_proto_files=_hlo_protos(root.parent))]
    by_dir: dict[Path, list[Path]] = {}
    odd: dict[Path, list[Path]] = {}
    for f in root.rglob("*"):
        if is_trace_file(f):
            (by_dir if f.is_file() else odd).setdefault(f.parent, []).append(f)
    if not by_dir:
        found = f" ({len(sum(odd.values(), []))} named so are not regular files)" if odd else ""
        raise UserError(f"{root}: no profiler trace found (no *.xplane.pb or trace JSON file in it or "
                        f"below it{found})")
    runs = [Run(name=d.name, path=d, files=preferred_files(files), hlo_proto_files=_hlo_protos(d),
                skipped=sorted(odd.get(d, [])))
            for d, files in by_dir.items()]
    _disambiguate(runs, root)
    if len(runs) == 1:
        return runs  # nothing to order: the capture times (one read per host file) are not needed
    return sorted(runs, key=lambda r: (r.time, r.name))


def _remote_runs(url: str) -> list[Run]:
    """list_runs of an fsspec URL: the objects below it grouped by folder, as for a local log dir."""
    import posixpath

    objects = [u for u, _ in remote.list_files(url)]
    by_dir: dict[str, list[Path]] = {}
    protos: dict[str, list[Path]] = {}
    for u in objects:
        folder, name = posixpath.split(u)
        if is_trace_file(Path(name)):
            by_dir.setdefault(folder, []).append(Path(u))
        elif name.endswith(HLO_PROTO_SUFFIX):
            protos.setdefault(folder, []).append(Path(u))
    if not by_dir:
        if len(objects) == 1 and objects[0].rstrip("/") == url.rstrip("/"):
            raise UserError(f"{url}: not a trace file (expected a *.xplane.pb[.gz], *.trace.json[.gz] or "
                            "perfetto_trace.json[.gz] file)")
        raise UserError(f"{url}: no profiler trace found (no *.xplane.pb or trace JSON file in it or below it)")
    runs = [Run(name=posixpath.basename(folder), path=Path(folder), files=preferred_files(files),
                hlo_proto_files=sorted(protos.get(folder, [])))
            for folder, files in by_dir.items()]
    seen: dict[str, int] = {}
    for r in runs:
        seen[r.name] = seen.get(r.name, 0) + 1
    for r in runs:
        if seen[r.name] > 1:
            r.name = path_text(r.path)
    if len(runs) == 1:
        return runs
    return sorted(runs, key=lambda r: (r.time, r.name))


def preferred_files(files: list[Path]) -> list[Path]:
    """One format per run, sorted: the xplanes when there are any, else ``<host>.trace.json`` files, else
    the Perfetto JSON (see the module doc)."""
    xplanes = [f for f in files if is_xplane_file(f)]
    if xplanes:
        return sorted(xplanes)
    hosts = [f for f in files if f.name not in PERFETTO_NAMES]
    return sorted(hosts or files)


def find_run(path: str | Path, run: str | None = None) -> Run:
    """The run PATH means: the named one, else the newest."""
    runs = list_runs(path)
    if run is None:
        runs[-1].among = len(runs)
        return runs[-1]
    for r in runs:
        if run in (r.name, str(r.path)):
            return r
    names = ", ".join(r.name for r in runs)
    raise UserError(f"{path}: no run named {run!r} (runs: {names})")


def kind_of(path: Path) -> str:
    """What a path that is not a regular file is, in words (for the messages refusing one: reading a FIFO
    waits for a writer, a device never ends)."""
    if path.is_symlink() and not path.exists():
        return "a dangling symbolic link"
    if path.is_dir():
        return "a directory"
    if path.is_fifo():
        return "a FIFO"
    if path.is_socket():
        return "a socket"
    if path.is_block_device() or path.is_char_device():
        return "a device"
    return "not a regular file"


def _hlo_protos(folder: Path) -> list[Path]:
    return sorted(f for f in folder.glob(f"*{HLO_PROTO_SUFFIX}") if f.is_file())


def _disambiguate(runs: list[Run], root: Path) -> None:
    """Runs with the same folder name (several log dirs) are named by their path below PATH."""
    seen: dict[str, int] = {}
    for r in runs:
        seen[r.name] = seen.get(r.name, 0) + 1
    for r in runs:
        if seen[r.name] > 1:
            try:
                r.name = str(r.path.relative_to(root))
            except ValueError:
                r.name = str(r.path)
