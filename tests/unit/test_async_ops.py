"""Async start/done pairing against a brute-force pairing of the same random timeline."""

import numpy as np
import pandas as pd

from traceview.timeline.aggregate import aggregate_ops
from traceview.timeline.async_ops import pair_times


def test_pairing_matches_brute_force():
    rng = np.random.default_rng(1)
    rows = []
    for device in ("d0", "d1"):
        t = 0
        for i in range(200):
            name = ("all-gather-start", "all-gather-done") if i % 2 else ("copy-start", "copy-done")
            start_dur, wait = int(rng.integers(1, 5)), int(rng.integers(0, 50))
            gap = int(rng.integers(1, 100))
            rows.append((device, "m", name[0], t, start_dur))
            rows.append((device, "m", name[1], t + start_dur + gap, wait))
            t += start_dur + gap + wait + int(rng.integers(1, 10))
    raw = pd.DataFrame(rows, columns=["device", "module", "op", "start_ps", "duration_ps"])
    raw = raw.assign(program_id=7, self_ps=raw["duration_ps"]).astype({"device": "category", "op": "category"})
    pairs = pd.DataFrame([("m", "copy-start", "copy-done"), ("m", "all-gather-start", "all-gather-done")],
                         columns=["module", "start", "done"])
    ops, rows = aggregate_ops(raw.assign(category="", trace_flops=np.nan, trace_bytes=np.nan, executions=1))
    got = pair_times(raw, ops, rows, pairs).set_index(ops["op"])

    want: dict[str, list[int]] = {}
    for device, start_name, done_name in [(d, s, e) for d in ("d0", "d1") for _, s, e in pairs.itertuples(index=False)]:
        starts = raw[(raw.device == device) & (raw.op == start_name)].sort_values("start_ps")
        dones = raw[(raw.device == device) & (raw.op == done_name)].sort_values("start_ps")
        for s in starts.itertuples():
            d = next(d for d in dones.itertuples() if d.start_ps >= s.start_ps)
            acc = want.setdefault(start_name, [0, 0])
            acc[0] += d.start_ps + d.duration_ps - s.start_ps
            acc[1] += s.self_ps + d.self_ps
    for name, (in_flight, exposed) in want.items():
        assert got.loc[name, "in_flight_ps"] == in_flight
        assert got.loc[name, "pair_exposed_ps"] == exposed
