"""Writer processes for the history store's tests (SQLite and PostgreSQL alike)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def env() -> dict:
    """The environment of a writer process: this checkout importable."""
    return {**os.environ, "PYTHONPATH": str(REPO)}


# A writer process: records `count` runs of the trace under labels PREFIX-0.. (the trace read once).
WRITER = r'''
import sys, time
from pathlib import Path
import traceview
from traceview.history.record import run_from_analysis
from traceview.history.store import open_store
db, trace, prefix, count, go = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5])
result = traceview.load(trace).pipeline
records = [run_from_analysis(result, f"{prefix}-{i}", trace_path=trace) for i in range(count)]
while not go.exists():          # both writers start adding at the same moment
    time.sleep(0.01)
for record in records:
    with open_store(db, create=True) as store:
        store.add(record)
'''

# A writer killed inside its transaction: three runs stored, then the fourth stops after its run and
# metric rows are written and before the transaction ends.
KILLED = r'''
import sys, time
from pathlib import Path
import traceview
import traceview.history.store as store_module
from traceview.history.record import run_from_analysis
db, trace, marker = sys.argv[1], sys.argv[2], Path(sys.argv[3])
result = traceview.load(trace).pipeline
with store_module.open_store(db, create=True) as store:
    for i in range(3):
        store.add(run_from_analysis(result, f"kept-{i}"))
    def stall(run_id, ops):
        marker.write_text(str(run_id))
        time.sleep(600)
    store_module._op_rows = stall
    store.add(run_from_analysis(result, "killed"))
'''
