"""The local pool of reading processes: how its workers start (fork where it is safe, else a fork server
that preloads the reader) and what each worker sets up (its share of the cores, glibc keeping freed memory)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor


def warn_pool_broke(method: str) -> None:
    """Say why the hosts the pool did not read are read in this process (a warning, once per read)."""
    import warnings

    hint = (" (a script that calls traceview with jobs > 1 after starting JAX runs again in each worker "
            "started by a fork server: put its top level under `if __name__ == \"__main__\":`)"
            if method != "fork" else "")
    warnings.warn(f"the reading pool ({method}) stopped; the remaining hosts are read in this process{hint}",
                  RuntimeWarning, stacklevel=3)


def process_pool(jobs: int, method: str, preload: Sequence[str] = ()) -> ProcessPoolExecutor:
    """A pool of `jobs` reading processes started by `method`, each splitting lines over its share of
    the cores only. ``preload``: what a fork server imports once before it forks the workers (the caller's
    reader and its tables' libraries: each worker then starts with them loaded, as a forked worker does)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context(method)
    if method == "forkserver":
        _preload_server(context, preload)
    return ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_start_worker, initargs=(jobs,))


def _preload_server(context, preload: Sequence[str]) -> None:
    """Add the reader's modules to what the fork server preloads (kept: the caller's own preloads), before
    the server starts; a server already running keeps what it has."""
    from multiprocessing import forkserver

    server = forkserver._forkserver          # noqa: SLF001 - the one server of this process
    if getattr(server, "_forkserver_pid", None) is not None:
        return
    current = list(getattr(server, "_preload_modules", None) or [])
    context.set_forkserver_preload(list(dict.fromkeys(current + ["__main__", *preload])))


def _start_worker(jobs: int) -> None:
    """Pool worker start: one of `jobs` processes, so its reader uses only its share of the cores; and
    a short-lived process of traceview's own, so it keeps the memory it frees (traceview.runtime.malloc)."""
    from traceview.parsers.native import loader as native_loader
    from traceview.runtime.malloc import keep_freed_memory

    native_loader.share_cores(jobs)
    keep_freed_memory()


def start_method() -> str:
    """fork where it is safe: the workers start at once with the reader already imported.

    A process running many threads (the dashboard's Streamlit server) or a
    multithreaded runtime (JAX, TensorFlow, PyTorch: a program that calls the
    API after running its model) forks badly: a lock one of its threads holds
    at the fork stays held in the child, a deadlock waiting to happen. There,
    a fork server, which preloads the reader so its workers start about as fast
    (``runtime.forked.fork_is_safe`` decides; the CLI has at most its
    progress-bar thread and never loads JAX). A fork server imports the main
    script in each worker, as spawn does: a script must keep its top level
    under ``if __name__ == "__main__":``; one that does not breaks the pool,
    and its hosts are then read in this process, with a warning.
    """
    import multiprocessing

    from traceview.runtime.forked import fork_is_safe

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and fork_is_safe():
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"
