"""How fast a pool of host readers could go if its workers built no pandas tables (not part of the tests).

    python benchmarks/bench_pool_bound.py RUN_DIR [--jobs 2] [--repeat 3]

RUN_DIR holds many ``*.xplane.pb`` host files (bench_scale.py's 32-host run,
for instance). Each run is a fresh process started the way the ``traceview``
program starts (numpy, the compiled reader and its kernels loaded, malloc
tuned), then:

* ``--jobs 1``: one process reads and decodes every host (``load_xspace`` and
  every line's events through the compiled decoder: no tables), then imports
  pandas and the report modules;
* ``--jobs N``: N forked workers read and decode the hosts while the parent
  imports pandas and the report modules, as a parent whose workers never
  import pandas could.

It prints the seconds from the process's first line to the end. Decoding is
the part of a host read that needs no pandas: what is left of today's read
(building the host's tables, reducing them) is what workers that return numpy
partials would still have to do. docs/scale.md ("Freed memory kept for reuse")
uses these figures.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402 - timed from the first line
import glob  # noqa: E402
import multiprocessing  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402


def decode_host(path: str) -> int:
    """Read one host file and decode every line's events (no stats): the number of events."""
    import numpy as np

    from traceview.parsers.xspace.file import load_xspace
    from traceview.parsers.xspace.schema import decode_wide

    no_stats = np.zeros(0, dtype=np.int64)
    return sum(decode_wide(line.events, no_stats).metadata_id.size
               for plane in load_xspace(path).planes for line in plane.lines if len(line.events))


def import_the_rest() -> None:
    import pandas  # noqa: F401

    import traceview.analysis.build  # noqa: F401
    import traceview.render.analyze  # noqa: F401
    import traceview.trace.read  # noqa: F401


def one_run(run_dir: str, jobs: int) -> None:
    from concurrent.futures import ProcessPoolExecutor

    from traceview.parsers.native import loader as native_loader
    from traceview.runtime.malloc import keep_freed_memory

    keep_freed_memory()
    native_loader.warm_up()
    paths = sorted(glob.glob(os.path.join(run_dir, "**", "*.xplane.pb"), recursive=True))
    if jobs == 1:
        events = sum(decode_host(p) for p in paths)
        import_the_rest()
    else:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = [pool.submit(decode_host, p) for p in paths]
            import_the_rest()
            events = sum(f.result() for f in futures)
    print(f"{time.perf_counter() - T0:.3f} {len(paths)} {events}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)   # a single run, in this process
    args = ap.parse_args()
    if args.one is not None:
        one_run(args.run_dir, args.one)
        return
    times: dict[int, list[float]] = {1: [], args.jobs: []}
    for _ in range(args.repeat):
        for jobs in times:   # alternating, so a busy moment hits both alike
            out = subprocess.run([sys.executable, __file__, args.run_dir, "--one", str(jobs)],
                                 capture_output=True, text=True, check=True).stdout.split()
            times[jobs].append(float(out[0]))
    for jobs, values in times.items():
        print(f"decode only, {jobs} process(es): median {statistics.median(values):.2f} s "
              f"({min(values):.2f}-{max(values):.2f}) over {out[1]} hosts")


if __name__ == "__main__":
    main()
