"""A pod's hosts read into one run: what every host sends alike (emptied tables, the same HLO protos) is held
once by the reading (trace.hosts._HeldOnce), the values unchanged; what differs stays each host's own."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.parsers.profile import HOST_EVENT_COLUMNS, OP_COLUMNS, STEP_COLUMNS, empty_frame
from traceview.parsers.tables.trace_data import TraceData
from traceview.trace.hosts import HostResult, _arrival


def _host(name: str, protos: dict[str, bytes], steps: pd.DataFrame | None = None) -> TraceData:
    return TraceData(host=name, ops=empty_frame(OP_COLUMNS), host_events=empty_frame(HOST_EVENT_COLUMNS),
                     steps=empty_frame(STEP_COLUMNS) if steps is None else steps, devices=[], hlo_protos=protos)


def test_hosts_alike_are_held_once_and_their_differences_kept():
    rng = np.random.default_rng(7)
    programs = {f"jit_step({k})": rng.bytes(2000) for k in range(3)}
    other = rng.bytes(2000)
    steps = pd.DataFrame({"step": np.arange(3, dtype=np.int32)})
    hosts = [_host(f"h{i}", {k: bytes(v) for k, v in programs.items()}) for i in range(6)]   # equal, not the same
    hosts.append(_host("odd", {"jit_step(0)": other, "jit_eval(9)": b"eval"}, steps=steps))
    received = [HostResult(f"/logs/{d.host}.xplane.pb", data=d) for d in hosts]
    arrived = _arrival(None, None)
    for result in received:
        arrived(result)
    kept = [r.data for r in received]
    for name in ("ops", "host_events"):
        assert len({id(getattr(d, name)) for d in kept}) == 1          # one empty table for all
        assert getattr(kept[0], name).dtypes.equals(empty_frame(OP_COLUMNS if name == "ops" else HOST_EVENT_COLUMNS).dtypes)
    assert kept[-1].steps is steps                                     # a table with rows stays the host's
    for key in programs:
        assert len({id(d.hlo_protos[key]) for d in kept[:-1]}) == 1    # each program held once ...
        assert all(d.hlo_protos[key] == programs[key] for d in kept[:-1])  # ... with its bytes
    assert kept[-1].hlo_protos == {"jit_step(0)": other, "jit_eval(9)": b"eval"}   # a different one kept
    assert [d.host for d in kept] == [d.host for d in hosts]
