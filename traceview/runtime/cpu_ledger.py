"""Where a run's CPU went in this process: before the last host's result arrived, after it, and how much of
"after" was items of the forked passes (work more processes share) rather than serial work.

Amdahl's law bounds a pod's speed-up by the share of its work that only one process can do: here, what the
parent does once the last host's tables are in (merging the parts, the glue between the passes, the
report), less the items of the passes it runs itself (``runtime.forked``; forked children run the others).
``TRACEVIEW_CPU_LEDGER=FILE`` makes the ``traceview`` program write these figures to FILE as JSON just
before it exits (``benchmarks/bench_scale.py`` reads them); unset, nothing is written and the cost is two
clock reads per run.
"""

from __future__ import annotations

import json
import os
import time

LEDGER_ENV = "TRACEVIEW_CPU_LEDGER"

_read_end: tuple[float, float, float] | None = None    # (process CPU, wall, items CPU) when the reading ended


def reading_ended() -> None:
    """Mark the moment the last host's result is in (the latest call counts: a command may read twice)."""
    global _read_end
    from traceview.runtime.forked import items_cpu

    _read_end = (time.process_time(), time.perf_counter(), items_cpu())


def figures() -> dict[str, float] | None:
    """This process's CPU after the reading (``after_cpu``), of which forked-pass items (``items_cpu``) and
    the serial rest (``serial_cpu``); ``read_cpu``: before; None when no reading ended here."""
    if _read_end is None:
        return None
    from traceview.runtime.forked import items_cpu

    cpu, wall, items = time.process_time(), time.perf_counter(), items_cpu()
    after, in_items = cpu - _read_end[0], items - _read_end[2]
    return {"read_cpu": _read_end[0], "after_cpu": after, "items_cpu": in_items, "serial_cpu": after - in_items,
            "after_wall": wall - _read_end[1]}


def write_if_asked() -> None:
    """Write :func:`figures` to the file ``TRACEVIEW_CPU_LEDGER`` names (nothing when it is unset)."""
    target = os.environ.get(LEDGER_ENV)
    found = figures()
    if not target or found is None:
        return
    try:
        with open(target, "w", encoding="utf-8") as out:
            json.dump(found, out)
    except OSError:          # a measurement aid: never the command's failure
        pass
