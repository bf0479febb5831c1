"""traceview's per-op FLOPs and bytes against libtpu's own figures in a real TPU v6e trace.

The v6e trace (openxla/xprof test data) carries, for every op on the "XLA Ops"
line, the ``flops`` and ``bytes_accessed`` libtpu computed, and the HLO protos
of its programs in /host:metadata. We cost those protos and compare op by op.
This is a report; the assertion is a sanity floor: these programs hold only
shape-determined ops (elementwise fusions, a broadcast, async copies, an
all-reduce), so nearly all must agree; the floor leaves room for the padding
of TPU tiled layouts, which traceview does not model.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.cost import instruction_costs
from traceview.parsers.hlo.proto import parse_hlo_proto


def _agreement(ours: pd.Series, ref: pd.Series, tol: float) -> pd.Series:
    return (ours - ref).abs() <= tol * np.maximum(ref.abs(), 1.0)


def test_libtpu_per_op_costs(shared_traces, capsys):
    from traceview.parsers.xspace.reader import read_xplane

    data = read_xplane(shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb")
    ref = (data.ops.dropna(subset=["trace_flops"])
           .groupby(["module", "op"], observed=True)[["trace_flops", "trace_bytes"]].first().reset_index())
    assert len(ref) > 0, "the trace carries no libtpu flops"
    ours = pd.concat([instruction_costs(parse_hlo_proto(blob, key)) for key, blob in data.hlo_protos.items()])
    joined = ref.merge(ours, left_on=["module", "op"], right_on=["module", "name"], how="left")
    matched = joined.dropna(subset=["flops"])
    lines = [f"libtpu vs traceview: {len(ref)} distinct ops, {len(matched)} found in the HLO protos"]
    for tol in (0.01, 0.05):
        f_ok = _agreement(matched["flops"], matched["trace_flops"], tol)
        b_ok = _agreement(matched["bytes_accessed"], matched["trace_bytes"], tol)
        lines.append(f"  within {tol:.0%}: flops {f_ok.sum()}/{len(matched)}, bytes {b_ok.sum()}/{len(matched)}")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert len(matched) == len(ref), "ops in the trace that the HLO protos do not name"
    assert _agreement(matched["flops"], matched["trace_flops"], 0.01).mean() >= 0.9
    assert _agreement(matched["bytes_accessed"], matched["trace_bytes"], 0.05).mean() >= 0.9
