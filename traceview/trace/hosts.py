"""Read a run's host files: one after another, in a local process pool, or on a Dask cluster.

Each host file is read where the work runs and comes back as its TraceData:
the tables the analysis needs (categorical columns, no raw events), so what
travels and what the parent holds grows with the ops, not with the files.
A failure reading one host never stops the others: it comes back as a
HostResult with the error text, and the caller turns it into a warning.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from traceview.errors import UserError
from traceview.parsers.tables.trace_data import TraceData
from traceview.parsers.xspace.file import _FAST_MIN_BYTES, _FAST_WARM_MIN_BYTES

if TYPE_CHECKING:
    import pandas as pd

    from traceview.hostreduce.host_ops import OpsPart
    from traceview.hostreduce.part import HostPart
    from traceview.hostreduce.spill import Layout, RowSpill
    from traceview.trace.dask_parts import DaskParts

DASK_ENV = "TRACEVIEW_DASK"
JOBS_ENV = "TRACEVIEW_JOBS"


@dataclass
class HostResult:
    """What reading one host file gave: its tables, or why not."""

    path: str
    data: TraceData | None = None   # its tables (``ops`` empty unless kept: the part has what the analysis reads)
    error: str | None = None        # one line naming the file
    internal: bool = False          # a bug in traceview, not a bad file
    part: HostPart | None = None    # the host reduced (hostreduce.part), with its allocators' peaks when asked for
    allocator: pd.DataFrame | None = None   # the events themselves, only where the caller stores them
    spilled: Layout | None = None   # where the part's large arrays were written (hostreduce.spill), if they were


def read_host(path: str, keep_ops: bool = True, store: bool = False, background: bool = False,
              allocator: bool = False, spill_path: str | None = None, send_allocator: bool = False) -> HostResult:
    """Read one host file and reduce its op table; every failure is caught and described (this runs in
    workers). ``store``: put the tables (and allocator events) in the table cache (``background``: by a
    writer thread);
    ``keep_ops``: send the op table back too (else only its reduction travels); ``allocator``: read its
    allocator events too and reduce them to their peaks (for the memory view: where the host is read, not
    again in the parent; ``send_allocator``: the events travel too, for a caller that stores them);
    ``spill_path``: write the part's large arrays there (hostreduce.spill), the parent maps them."""
    from traceview.cache import tables as table_cache
    from traceview.errors import TraceError
    from traceview.parsers.trace_file import read_trace_file

    try:
        data = read_trace_file(path)
        if store:
            table_cache.put(path, data, background=background)
        result = reduced(HostResult(path, data=data), keep_ops)
        del data        # the tables the reduction dropped are freed before the allocator events are read
        if spill_path is not None and result.part is not None:
            from traceview.hostreduce.spill import write_part

            try:
                result.spilled = write_part(result.part.ops, spill_path)
            except OSError:              # a full or read-only disk: the arrays travel as before
                result.spilled = None
        if allocator:
            events = allocator_events(path)
            if events is not None and result.part is not None:
                from traceview.hostreduce.memory_peaks import host_peaks

                if store:
                    table_cache.put_allocator(path, events, background=background)
                result.part.memory = host_peaks(events)
                result.allocator = events if send_allocator else None
        return result
    except TraceError as exc:
        return HostResult(path, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - one host's bug must not lose the other hosts
        return HostResult(path, error=f"{path}: internal error while reading ({type(exc).__name__}: {exc})",
                          internal=True)


def allocator_events(path: str) -> pd.DataFrame | None:
    """The file's allocator events; None where they cannot be read here (the memory view then reads the
    file itself and reports what is wrong, as it would have)."""
    from pathlib import Path

    from traceview.parsers.layout import is_xplane_file
    from traceview.parsers.xspace.allocator_events import read_allocator_events

    try:
        return read_allocator_events(Path(path)) if is_xplane_file(Path(path)) else None
    except Exception:  # noqa: BLE001 - the memory view reads it again and says why
        return None


def reduced(result: HostResult, keep_ops: bool) -> HostResult:
    """The result with its host reduced to its part (hostreduce.part: the one reduction every way of reading
    runs), and its op, host-event and reduced step tables dropped unless ``keep_ops``."""
    if result.data is not None and result.part is None:
        from traceview.hostreduce.part import reduce_host

        data = result.data
        result.part = reduce_host(data.ops, data.host_events, data.steps, file=result.path)
    if result.data is not None and not keep_ops and (len(result.data.ops) or len(result.data.host_events)
                                                     or len(result.data.steps)):
        from traceview.parsers.profile import HOST_EVENT_COLUMNS, OP_COLUMNS, STEP_COLUMNS, empty_frame

        # no view keeps the rows alive; the host's threads are cut already (its activity's ``hosts``), its
        # step table reduced (its activity's ``step_times``; kept where it could not be)
        steps = result.data.steps if result.part is None or result.part.ops.activity.step_times is None \
            else empty_frame(STEP_COLUMNS)
        result.data = dataclasses.replace(result.data, ops=empty_frame(OP_COLUMNS),
                                          host_events=empty_frame(HOST_EVENT_COLUMNS), steps=steps)
    return result


def default_jobs() -> int:
    env = os.environ.get(JOBS_ENV)
    if env:
        return parse_jobs(env, JOBS_ENV)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def parse_jobs(value: str | int, what: str = "--jobs") -> int:
    try:
        jobs = int(value)
    except (TypeError, ValueError):
        raise UserError(f"{what} {value!r}: not a whole number of processes") from None
    if jobs < 1:
        raise UserError(f"{what} {value}: at least 1 process")
    return jobs


def read_hosts(paths: Sequence[str], jobs: int | None = None, dask: str | None = None,
               progress: Callable[[int], None] | None = None, keep_ops: bool = True,
               store: bool = False, allocator: bool = False, spill: RowSpill | None = None,
               while_reading: Sequence[str] = (),
               arrive: Callable[[HostResult], None] | None = None,
               hold: Callable[[DaskParts], None] | None = None) -> list[HostResult]:
    """Results in the order of `paths`, each with its op table reduced (and kept too with `keep_ops`);
    `store`: put the tables read in the table cache. `dask`: a scheduler address (or a Client);
    else `jobs` local processes. ``allocator``: each host's allocator events read where it is read.
    ``spill``: each part's kept rows moved to this file as its host comes in (hostreduce.spill).
    ``while_reading``: modules to import once the hosts are handed to other processes (while this one
    would only wait). ``arrive``: called with each result as it comes in, before its arrays are spilled.
    ``hold``: on Dask, each host's part is also left on the worker that read it, and ``hold`` gets their
    holder (trace.dask_parts: the analysis' per-host passes then run there; the client stays open)."""
    if not paths:
        return []
    arrived = _arrival(progress, spill, arrive)
    if dask:
        from traceview.runtime.malloc import gathering

        gathering()       # this process now only gathers what the workers read
        results = _read_dask(paths, dask, arrived, keep_ops=keep_ops or store, allocator=allocator, spill=spill,
                             send_allocator=store, while_reading=while_reading, hold=hold)
        if store:
            from traceview.cache import tables as table_cache

            for r in results:       # the workers may not see this machine's cache: stored here
                if r.data is not None:
                    table_cache.put(r.path, r.data, background=True)
                if r.allocator is not None:
                    table_cache.put_allocator(r.path, r.allocator, background=True)
                    r.allocator = None
        return [reduced(r, keep_ops) for r in results]
    jobs = default_jobs() if jobs is None else jobs
    if jobs <= 1 or len(paths) == 1:
        _warm_reader_for(paths)
        out = []
        for p in paths:
            out.append(read_host(p, keep_ops, store, background=True, allocator=allocator))
            arrived(out[-1])
        return out
    return _read_pool(paths, min(jobs, len(paths)), arrived, keep_ops, store, allocator, spill, while_reading)


def _import_all(modules: Sequence[str]) -> None:
    """Import ``modules`` (the caller's analysis), any that fails left for the analysis to report."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the analysis imports it again and says what is wrong
            pass


def _arrival(progress: Callable[[int], None] | None, spill: RowSpill | None,
             arrive: Callable[[HostResult], None] | None = None) -> Callable[[HostResult], None]:
    """What happens as each host's result comes in: ``arrive`` (the caller's fold of it into the run), its
    large arrays spilled and, with them, its allocators' packed peak details (read by the memory view only),
    the progress advanced."""
    held = _HeldOnce()
    details = None
    if spill is not None:          # a pod's analysis: its allocators' details wait on disk (memory_peaks)
        from traceview.hostreduce.memory_peaks import DetailStore

        details = DetailStore()

    def arrived(result: HostResult) -> None:
        if result.data is not None:
            result.data = held.tables(result.data)
        if details is not None and result.part is not None and result.part.memory is not None:
            details.keep(result.part.memory)
        if result.spilled is not None and result.part is not None:
            from traceview.hostreduce.spill import adopt, release

            adopt(result.part.ops, result.spilled)
            if arrive is not None:
                arrive(result)
                release(result.part.ops.kept_start)     # the pages the fold read leave the process again
        else:
            if arrive is not None:
                arrive(result)
            if spill is not None and result.part is not None:
                spill.keep(result.part.ops)
        if progress is not None:
            progress(1)
    return arrived


class _HeldOnce:
    """What every host of a pod sends alike, held once by the reading until it ends: each host's emptied
    tables (the reduction keeps none of their rows) replaced by one empty table of the same columns, and an
    HLO proto equal to one an earlier host sent by that one (a pod's hosts ran the same programs). The
    values are the same; a run's thousands of copies were about 70 kB per host in the caller."""

    def __init__(self) -> None:
        self.empty: dict[str, pd.DataFrame] = {}
        self.protos: dict[str, bytes] = {}

    def tables(self, data: TraceData) -> TraceData:
        shared: dict = {}
        for name in ("ops", "host_events", "steps"):
            frame = getattr(data, name)
            if len(frame) == 0:
                first = self.empty.setdefault(name, frame)
                if first.columns.equals(frame.columns) and first.dtypes.equals(frame.dtypes):
                    shared[name] = first
        protos = {key: self._proto(key, value) for key, value in data.hlo_protos.items()}
        return dataclasses.replace(data, hlo_protos=protos, **shared)

    def _proto(self, key: str, value: bytes) -> bytes:
        first = self.protos.setdefault(key, value)
        return first if first == value else value


def _read_pool(paths: Sequence[str], jobs: int, arrived: Callable[[HostResult], None], keep_ops: bool, store: bool,
               allocator: bool, spill: RowSpill | None = None, while_reading: Sequence[str] = ()) -> list[HostResult]:
    from concurrent.futures import as_completed

    from traceview.runtime.pool import process_pool, start_method, warn_pool_broke

    method = start_method()
    cache = sys.modules.get("traceview.cache.tables")
    if method == "fork" and cache is not None:
        cache.flush()  # no writer thread running while the workers are forked
    if method == "fork":
        _warm_reader_for(paths)  # the forked workers inherit the compiled reader
    from concurrent.futures.process import BrokenProcessPool

    results: list[HostResult | None] = [None] * len(paths)
    read_args = lambda i: (paths[i], keep_ops, store, False, allocator,  # noqa: E731
                           spill.path_for(i) if spill is not None else None)
    broken: list[int] = []
    with process_pool(jobs, method, preload=_SERVER_PRELOAD) as pool:
        futures = {pool.submit(read_host, *read_args(i)): i for i in range(len(paths))}
        _import_all(while_reading)
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                result = fut.result()
            except BrokenProcessPool:
                broken.append(i)
                continue
            except Exception as exc:  # noqa: BLE001 - a worker that died (memory, signal)
                result = HostResult(paths[i], error=f"{paths[i]}: the reading process failed "
                                                    f"({type(exc).__name__}: {exc})", internal=True)
            arrived(result)
            results[i] = result
    if broken:
        warn_pool_broke(method)
    for i in sorted(broken):   # read here, one after another: the same tables, only slower
        result = read_host(*read_args(i))
        arrived(result)
        results[i] = result
    return [r for r in results if r is not None]


# What a fork server imports once, before it forks the pool's workers: the reader and its tables' libraries
# (a worker importing them itself takes about a second; docs/scale.md).
_SERVER_PRELOAD = ["traceview.trace.hosts", "traceview.parsers.xspace.reader"]


def _warm_reader_for(paths: Sequence[str]) -> None:
    """Load the compiled reader when the run's files together are large enough to repay it (several
    hosts of a few MB each: once loaded, it reads them all, one after another or in forked workers)."""
    if len(paths) > 1 and sum(_size(p) for p in paths) >= _FAST_MIN_BYTES:
        from traceview.parsers.native import loader as native_loader

        native_loader.warm_up()


def _size(path: str) -> int:
    from traceview.errors import UserError
    from traceview.parsers import remote

    try:
        url = remote.url_of(path)
        return remote.size(url) if url is not None else os.path.getsize(path)
    except (OSError, UserError):
        return 0


def _read_dask(paths: Sequence[str], address, arrived: Callable[[HostResult], None], keep_ops: bool,
               allocator: bool = False, spill: RowSpill | None = None, send_allocator: bool = False,
               while_reading: Sequence[str] = (), hold: Callable[[DaskParts], None] | None = None
               ) -> list[HostResult]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise UserError("--dask needs dask.distributed: pip install 'traceview[dask]'") from None
    own = not isinstance(address, Client)
    try:
        client = Client(address, timeout="20s") if own else address
    except (OSError, TimeoutError, ValueError) as exc:
        raise UserError(f"--dask {address}: cannot reach the scheduler ({exc})") from None
    try:
        # Workers may run elsewhere: they get absolute paths, and URLs as they are, read on the workers through
        # fsspec (the results keep the caller's spelling).
        # A worker that sees the spill folder (this machine, or a shared file system) writes its hosts' large
        # arrays there itself; the others send them back.
        spill_paths = [spill.path_for(i) if spill is not None else None for i in range(len(paths))]
        futures = client.map(_read_on_dask_worker if hold is None else _read_and_hold,
                             [_for_worker(p) for p in paths], spill_paths,
                             keep_ops=keep_ops, allocator=allocator, send_allocator=send_allocator,
                             readers=_readers_by_machine(client),
                             spill_token=spill.token if spill is not None else None, pure=False)
        held = None
        pairs: list = []             # the read tasks' futures, where their pairs are split
        if hold is not None:       # each pair's part stays on its worker, its result comes here; the pair goes
            from traceview.trace.dask_parts import first, second

            pairs = futures
            held = client.map(second, pairs, pure=False)
            futures = client.map(first, pairs, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        _import_all(while_reading)
        results: list[HostResult | None] = [None] * len(paths)
        for fut in as_completed(futures):
            i = index[fut.key]
            try:
                result = _as_given(fut.result(), paths[i])
            except Exception as exc:  # noqa: BLE001 - the worker died or could not run the task
                result = HostResult(paths[i], error=f"{paths[i]}: the Dask task failed "
                                                    f"({type(exc).__name__}: {exc})", internal=True)
            # the worker lets the result go now (and the pair, once its part is split off), not when this
            # process's collector frees the futures (they are in cycles with as_completed's callbacks)
            fut.release()
            if pairs:
                pairs[i].release()
            arrived(result)
            results[i] = result
        if held is not None and hold is not None:
            from traceview.trace.dask_parts import DaskParts

            hold(DaskParts(client, dict(zip(paths, held)), own))
            own = False            # the holder closes it once the analysis lets it go
        return [r for r in results if r is not None]
    finally:
        if own:
            client.close()


def _for_worker(path: str) -> str:
    """A host file's name as a worker elsewhere can open it: a URL as it is, a local path made absolute."""
    from traceview.parsers.remote import url_of

    url = url_of(path)
    return url if url is not None else os.path.abspath(path)


def _readers_by_machine(client) -> dict[str, int]:
    """How many host files each machine of the cluster may read at once: its workers' threads, summed."""
    readers: dict[str, int] = {}
    try:
        for worker in client.scheduler_info().get("workers", {}).values():
            readers[worker["host"]] = readers.get(worker["host"], 0) + int(worker["nthreads"])
    except (KeyError, TypeError, ValueError):
        return {}
    return readers


def _read_on_dask_worker(path: str, spill_path: str | None, keep_ops: bool, readers: dict[str, int],
                         allocator: bool = False, spill_token: str | None = None,
                         send_allocator: bool = False) -> HostResult:
    """read_host in a Dask worker thread, with the compiled reader loaded, splitting lines over its share
    of the machine's cores only: every thread of every worker on that machine may be reading a host at
    once (a worker that joined later counts its own threads)."""
    from distributed import get_worker
    from distributed.comm import get_address_host

    from traceview.parsers.native import loader as native_loader

    worker = get_worker()
    try:
        machine = get_address_host(worker.address)
    except ValueError:  # an address form without a host
        machine = None
    native_loader.share_cores(readers.get(machine or "") or getattr(worker.state, "nthreads", 1))
    if _size(path) >= _FAST_WARM_MIN_BYTES:
        # A worker reads host after host, as a pool's worker does: load the compiled reader once (a pool's
        # workers inherit it from the parent), or every host of a few MB would go through the numpy path.
        native_loader.warm_up()
    from traceview.hostreduce.spill import sees_folder
    from traceview.runtime.collector import fewer_collections
    from traceview.runtime.malloc import freed_memory_kept

    seen = spill_path is not None and spill_token is not None and sees_folder(spill_path, spill_token)
    # fewer page faults and collections while it reads; the worker's own settings after
    with freed_memory_kept(), fewer_collections():
        return read_host(path, keep_ops, allocator=allocator, spill_path=spill_path if seen else None,
                         send_allocator=send_allocator)


def _read_and_hold(path: str, spill_path: str | None, keep_ops: bool, readers: dict[str, int],
                   allocator: bool = False, spill_token: str | None = None,
                   send_allocator: bool = False) -> tuple[HostResult, OpsPart | None]:
    """:func:`_read_on_dask_worker`, and the worker's own copy of the part with its arrays, held there for
    the analysis' passes (trace.dask_parts): the arrays it wrote to the spill folder mapped here too (the
    caller maps and unlinks the file), else the part itself; without the host's step spans summed up,
    which the caller folds as the host arrives and no pass reads (a third of a pod host's part)."""
    result = _read_on_dask_worker(path, spill_path, keep_ops, readers, allocator=allocator,
                                  spill_token=spill_token, send_allocator=send_allocator)
    if result.part is None:
        return result, None
    ops = result.part.ops
    ops = dataclasses.replace(ops, activity=dataclasses.replace(ops.activity, span_summary=None))
    if result.spilled is None:
        return result, ops
    import copy

    from traceview.hostreduce.spill import adopt

    return result, adopt(copy.deepcopy(ops), result.spilled, unlink=False)


def _as_given(result: HostResult, path: str) -> HostResult:
    """A result read by absolute path, naming the file as the caller spelled it (output equals a local read)."""
    absolute = result.path
    result.path = path
    if result.part is not None:
        result.part.file = path
    if absolute != path:
        if result.error:
            result.error = result.error.replace(absolute, path)
        if result.data is not None:
            result.data.warnings = [w.replace(absolute, path) for w in result.data.warnings]
    return result
