"""The tables read from one host's trace file, whichever reader read it (see
:mod:`traceview.parsers.profile` for the columns)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from traceview.parsers.profile import Device


@dataclass
class TraceData:
    """Everything read from one host's trace file."""

    host: str
    ops: pd.DataFrame
    host_events: pd.DataFrame
    steps: pd.DataFrame
    devices: list[Device]
    hlo_protos: dict[str, bytes] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
