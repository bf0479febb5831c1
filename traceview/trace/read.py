"""PATH -> Profile: discover the run, read every host's file, merge the tables."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import numpy as np
import pandas as pd

from traceview.errors import TraceError, UserError
from traceview.hostreduce.arrivals import Arrivals
from traceview.hostreduce.host_ops import KeepRows, OpsPart
from traceview.hostreduce.part import HostPart
from traceview.hostreduce.profile import KeptExecutions, Profile
from traceview.hostreduce.reader import TablesReader
from traceview.hostreduce.step_times import step_times_of
from traceview.parsers.compressed import read_limited
from traceview.parsers.discover import find_run
from traceview.parsers.layout import host_of, is_trace_file, path_text
from traceview.parsers.profile import HOST_EVENT_COLUMNS, OP_COLUMNS, STEP_COLUMNS, Source, empty_frame
from traceview.parsers.remote import url_of
from traceview.parsers.tables.columns import is_unreported
from traceview.parsers.tables.trace_data import TraceData
from traceview.parsers.trace_file import read_trace_file
from traceview.runtime import cpu_ledger
from traceview.trace.hosts import DASK_ENV, HostResult, allocator_events, default_jobs, read_hosts, reduced

if TYPE_CHECKING:
    from traceview.hostreduce.memory_peaks import HostPeaks, RuntimePeak
    from traceview.trace.dask_parts import DaskParts


@dataclass
class ReadOptions:
    """How host files are read. None: the environment decides (TRACEVIEW_NO_CACHE, TRACEVIEW_JOBS,
    TRACEVIEW_DASK), else the defaults (cache on, one process per core, no Dask)."""

    cache: bool | None = None
    jobs: int | None = None
    dask: str | None = None
    keep_ops: bool = True       # False: Profile.ops stays empty, the analysis reads the hosts' reductions
    allocator_events: bool = False   # True: each host's allocator events are read where it is read
    # modules the caller's analysis will import: imported while other processes read the hosts (this one
    # waits then), not after the last host is in, where every second is serial
    while_reading: tuple[str, ...] = ()


_defaults = ReadOptions()


@contextmanager
def read_options(options: ReadOptions):
    """Within the block, load_profile calls that pass no options use these (the CLI's flags)."""
    global _defaults
    saved, _defaults = _defaults, options
    try:
        yield
    finally:
        _defaults = saved


def load_profile(path: str | Path, run: str | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 options: ReadOptions | None = None) -> Profile:
    """Read the run PATH means (the newest, or the one named `run`) into one Profile.

    Every host file of the run is read (from the table cache when it holds
    the file as it is now; else in parallel: see ReadOptions); rows keep
    their host and the hosts keep the order of the files. Any failure on
    one host among several (an unreadable file, or an internal error) becomes
    a warning naming that host and file; if every file fails, the first error
    is raised (a UserError naming the file). `progress(done, total)` is
    called after each file.
    """
    opts = options or _defaults
    use_cache = opts.cache if opts.cache is not None else not os.environ.get("TRACEVIEW_NO_CACHE")
    dask = opts.dask if opts.dask is not None else os.environ.get(DASK_ENV) or None
    found = find_run(path, run)
    files = [path_text(f) for f in found.files]   # a URL keeps its // (parsers/remote.py)
    total = len(files)
    done = 0

    def advance(k: int) -> None:
        nonlocal done
        done += k
        if progress is not None:
            progress(done, total)

    fold = Arrivals()          # what the run keeps of each host, folded as it arrives

    def arrive(result: HostResult) -> None:
        if result.part is not None:
            fold.add(result.part)

    held: list[DaskParts] = []       # on Dask: the parts left on the workers that read them
    results = _read_host_files(files, opts, use_cache, dask, advance, arrive, held.append)
    cpu_ledger.reading_ended()
    tables: list[TraceData] = []
    parts: list[HostPart] = []
    warnings: list[str] = list(found.warnings)   # names like trace files that are not regular files
    if found.among > 1:   # every command's output then names the run it read
        warnings.insert(0, f"{path} holds {found.among} runs: read the newest, {found.name} (--run NAME reads "
                           "another; `traceview runs PATH` lists them)")
    failures: list[HostResult] = []
    ok_files: list[str] = []
    for f in files:
        r = results[f]
        if r.data is not None and r.part is not None:
            tables.append(r.data)
            parts.append(r.part)
            ok_files.append(f)
        else:
            failures.append(r)
            warnings.append(f"skipped host {host_of(Path(f))}: {r.error}")
    if not tables:
        _raise_none_read(found.path, failures, total)
    for table in tables:
        warnings += table.warnings
    hlo_protos = _hlo_protos(tables, found.hlo_proto_files, warnings)
    environment: dict[str, str] = {}
    for table in tables:
        for k, v in table.environment.items():
            environment.setdefault(k, v)
    # hosts.reduced emptied each host's tables unless keep_ops
    kept = KeptExecutions(_concat([t.ops for t in tables], OP_COLUMNS),
                          _concat([t.host_events for t in tables], HOST_EVENT_COLUMNS)) if opts.keep_ops else None
    steps = _concat([t.steps for t in tables], STEP_COLUMNS)
    return Profile(
        source=Source(path=str(path), run=found.name, hosts=[t.host for t in tables], files=ok_files),
        devices=[d for t in tables for d in t.devices],
        parts=parts,
        reader=FilesReader(ok_files, use_cache, kept),
        steps=steps,
        step_times=step_times_of(parts, steps, fold.steps),
        span_fold=fold.spans,
        kept=kept,
        hlo_protos=hlo_protos,
        environment=environment,
        warnings=warnings,
        jobs=_analysis_jobs(opts, len(tables)),
        workers=held[0].for_files(ok_files, parts) if held and len(parts) > 1 else None,
    )


class FilesReader:
    """A run's host files read again (``traceview.hostreduce.reader.HostReader``): from the tables the
    reading kept when it kept them, else from the files (through the table cache if the reading used it;
    each table read once, if ever)."""

    def __init__(self, files: list[str], use_cache: bool, kept: KeptExecutions | None) -> None:
        self.files = files
        self.use_cache = use_cache
        self.kept = TablesReader(kept.ops, kept.host_events) if kept is not None else None
        self._read: dict[str, pd.DataFrame] = {}     # the tables read again, by name

    def reduce_again(self, parts: Sequence[OpsPart], keep: Mapping[int, KeepRows]) -> dict[int, OpsPart]:
        if self.kept is not None:
            return self.kept.reduce_again(parts, keep)
        from traceview.hostreduce.host_ops import reduce_ops

        return {i: reduce_ops(read_trace_file(self.files[i]).ops, k) for i, k in keep.items()}

    def op_executions(self) -> pd.DataFrame:
        return self.kept.op_executions() if self.kept is not None else self._again("ops")

    def host_events(self) -> pd.DataFrame:
        return self.kept.host_events() if self.kept is not None else self._again("host_events")

    def _again(self, table: str) -> pd.DataFrame:
        if table not in self._read:
            self._read[table] = _read_table(self.files, self.use_cache, table)
        return self._read[table]

    def host_peaks(self, index: int) -> HostPeaks | None:
        from traceview.hostreduce.memory_peaks import host_peaks
        from traceview.parsers.layout import is_xplane_file
        from traceview.parsers.xspace.allocator_events import read_allocator_events

        path = Path(self.files[index])
        return host_peaks(read_allocator_events(path)) if is_xplane_file(path) else None


def _analysis_jobs(opts: ReadOptions, hosts: int) -> int:
    """Processes the run's analysis may use per host: as many as read it (a Dask cluster's reads: this
    machine's cores), one for a single host."""
    if hosts < 2:
        return 1
    return opts.jobs if opts.jobs is not None and not opts.dask else default_jobs()


def _read_host_files(files: list[str], opts: ReadOptions, use_cache: bool, dask: str | None,
                     advance: Callable[[int], None], arrive: Callable[[HostResult], None],
                     hold: Callable[[DaskParts], None] | None = None) -> dict[str, HostResult]:
    """Each host file's tables: from the table cache where it holds the file as it is now, else read
    (and stored in the cache where they are read, a pool's workers, or by a writer thread while the
    analysis goes on)."""
    from traceview.cache import tables as table_cache

    results: dict[str, HostResult] = {}
    spill = _row_spill(files, opts)
    if use_cache:
        for f in files:
            data = table_cache.get(f)
            if data is not None:
                result = reduced(HostResult(f, data=data), opts.keep_ops)
                if opts.allocator_events and result.part is not None:
                    events = _cached_allocator_events(f)
                    if events is not None:
                        from traceview.hostreduce.memory_peaks import host_peaks

                        result.part.memory = host_peaks(events)
                results[f] = result
                arrive(result)
                if spill is not None and result.part is not None:
                    spill.keep(result.part.ops)
                advance(1)
    missed = [f for f in files if f not in results]
    try:
        for r in read_hosts(missed, jobs=opts.jobs, dask=dask, progress=advance, keep_ops=opts.keep_ops, arrive=arrive,
                            store=use_cache, allocator=opts.allocator_events, spill=spill,
                            while_reading=opts.while_reading, hold=hold):
            results[r.path] = r
    finally:
        if spill is not None:
            spill.close()          # every file mapped is unlinked already: only a failed host's remains
    return results


def _row_spill(files: list[str], opts: ReadOptions):
    """Where a pod's kept rows wait (hostreduce.spill): a run of several hosts whose op tables are not kept
    (``analyze``; the API and the dashboard keep every op execution in memory anyway). None: in memory."""
    if opts.keep_ops or len(files) < 2 or os.environ.get("TRACEVIEW_NO_SPILL"):
        return None
    from traceview.hostreduce.spill import RowSpill

    try:
        return RowSpill()
    except OSError:          # no writable temporary folder: the arrays stay in memory
        return None


def _cached_allocator_events(path: str) -> pd.DataFrame | None:
    """A cached host's allocator events: from their own cache entry, else read from its file now (and
    stored there); None for a file that has none to read (a JSON trace) or cannot be read (the memory view
    then reads it itself and says why)."""
    from traceview.cache import tables as table_cache

    found = table_cache.get_allocator(path)
    if found is None:
        found = allocator_events(path)
        if found is not None:
            table_cache.put_allocator(path, found, background=True)
    return found


def _raise_none_read(path: str | Path, failures: list[HostResult], total: int) -> NoReturn:
    """No host file could be read: the one file's error, or a UserError naming the first."""
    first = failures[0]
    if total == 1 and first.internal:
        # One file and a bug: read it again here so the real traceback shows.
        read_trace_file(first.path)
    if len(failures) == 1:
        raise TraceError(first.error or f"{first.path}: unreadable")
    raise UserError(f"{path}: none of the {total} trace files could be read (first: {first.error})")


def _hlo_protos(parts: list[TraceData], proto_files: list[Path], warnings: list[str]) -> dict[str, bytes]:
    """The run's HLO protos by key: the hosts' (the first host holding a key wins), then the
    per-module files written beside the xplanes ("<module>(<program id>).hlo_proto.pb")."""
    hlo_protos: dict[str, bytes] = {}
    for part in parts:
        for k, v in part.hlo_protos.items():
            hlo_protos.setdefault(k, v)
    for f in proto_files:
        key = f.name[: -len(".hlo_proto.pb")]
        if key not in hlo_protos:
            try:
                hlo_protos[key] = read_limited(f, error=TraceError, what="HLO proto file")
            except UserError as exc:
                warnings.append(f"skipped {exc}")
    return hlo_protos


def _concat(frames: list[pd.DataFrame], columns: dict[str, str]) -> pd.DataFrame:
    """Concatenate per-host tables; categoricals get the union of their categories."""
    frames = [f for f in frames if not f.empty]
    if not frames:
        return empty_frame(columns)
    if len(frames) == 1:
        return _writable(frames[0])
    from pandas.api.types import union_categoricals

    out = {}
    for name, dtype in columns.items():
        if dtype == "category":
            out[name] = union_categoricals([f[name] for f in frames])
        else:
            out[name] = np.concatenate([f[name].to_numpy() for f in frames]).astype(dtype, copy=False)
    return pd.DataFrame(out, copy=False)  # columns as they are: no copy into 2-D blocks


def _writable(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with a column of its own for each unreported column of the reader (one NaN seen on every row,
    read-only: parsers.tables.columns.unreported), so that the Profile's tables can be changed in place."""
    fixed = {name: frame[name].to_numpy().copy() for name in frame.columns
             if frame[name].dtype == np.float64 and is_unreported(frame[name].to_numpy())}
    if not fixed:
        return frame
    out = frame.copy(deep=False)
    for name, values in fixed.items():
        out[name] = values
    return out


def is_trace_path(path: Path) -> bool:
    """Whether ``path`` is a trace file or a folder holding one (rather than HLO or a JSON baseline); a URL
    is read as a log dir."""
    if url_of(path) is not None:
        return True
    if path.is_file():
        return is_trace_file(path)
    return path.is_dir() and any(is_trace_file(p) for pattern in ("*.xplane.pb*", "*.json*")
                                 for p in path.rglob(pattern))


def runtime_memory(profile: Profile) -> tuple[list[RuntimePeak], int | None]:
    """The runtime peak of every allocator in the profile's ``*.xplane.pb`` files (JSON traces have none), in
    the order one table of all their events gives, and the time of their first allocator event: each file's
    as reduced where its host was read, the others' read now (``profile.jobs`` processes)."""
    from traceview.hostreduce.memory_peaks import merged_peaks, runtime_peaks
    from traceview.parsers.layout import is_xplane_file
    from traceview.parsers.xspace.allocator_events import read_allocator_events
    from traceview.runtime.forked import fork_map

    given = [i for i, f in enumerate(profile.source.files) if is_xplane_file(Path(f))]
    missing = [i for i in given if profile.parts[i].memory is None]
    found = iter(fork_map(lambda k: profile.reader.host_peaks(missing[k]), len(missing), profile.jobs))
    parts = [m if (m := profile.parts[i].memory) is not None else next(found) for i in given]
    firsts = [p.first_ps for p in parts if p.first_ps is not None]
    first = min(firsts) if firsts else None
    peaks = merged_peaks(parts)
    if peaks is None:       # two files of one host: its allocators measured over all their events at once
        frames = [f for f in (read_allocator_events(Path(profile.source.files[i])) for i in given) if not f.empty]
        peaks = runtime_peaks(pd.concat(frames, ignore_index=True), jobs=profile.jobs)
    return peaks, first


def _read_table(files: list[str], use_cache: bool, table: str) -> pd.DataFrame:
    """One table (``ops`` or ``host_events``) of every file, read again (from the table cache if it may)."""
    frames = []
    for f in files:
        data = None
        if use_cache:
            from traceview.cache import tables as tablecache

            data = tablecache.get(f)
        frames.append(getattr(data if data is not None else read_trace_file(f), table))
    return _concat(frames, OP_COLUMNS if table == "ops" else HOST_EVENT_COLUMNS)
