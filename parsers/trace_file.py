"""Read one trace file, whichever format its name says: an XSpace (``*.xplane.pb[.gz]``) or trace-event JSON."""

from __future__ import annotations

from pathlib import Path

from traceview.parsers.layout import is_xplane_file
from traceview.parsers.tables.trace_data import TraceData


def read_trace_file(path: str | Path, host: str | None = None) -> TraceData:
    """The tables of one host's trace file (see :func:`traceview.parsers.layout.is_trace_file`)."""
    if is_xplane_file(Path(path)):
        from traceview.parsers.xspace.reader import read_xplane

        return read_xplane(path, host=host)
    from traceview.parsers.trace_json.reader import read_trace_json

    return read_trace_json(path, host=host)
