"""Timeline: idle time per device (not per CPU thread), in the legend, and readable lane names."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("altair")

from traceview.dashboards.timeline import readable_line_names  # noqa: E402


def test_thread_lines_get_short_numbered_names():
    names = readable_line_names(["tf_XLAEigen/-7425571159577607267", "tf_XLAEigen/1158496414056953684",
                                 "tf_XLAPjRtCpuClient/-8632128684224879843", "Stream #16(Kernel)"])
    assert names == {"tf_XLAEigen/-7425571159577607267": "XLAEigen #1", "tf_XLAEigen/1158496414056953684":
                     "XLAEigen #2", "tf_XLAPjRtCpuClient/-8632128684224879843": "XLAPjRtCpuClient #1",
                     "Stream #16(Kernel)": "Stream #16(Kernel)"}


def _merged_busy(intervals):
    """Hand-written union length of [start, end) intervals."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def test_cpu_sample_idle_is_per_device_and_in_the_legend(sample_traces):
    from traceview.dashboards.data import LoadRequest, load_view
    from traceview.dashboards.timeline import timeline, timeline_chart

    view = load_view(LoadRequest(path=str(sample_traces / "mlp")))
    tl = timeline(view, step=None, limit=5000)
    raw = view.analysis.profile.op_executions()
    leaf = raw[raw["self_ps"] == raw["duration_ps"]]
    starts, ends = leaf["start_ps"].tolist(), (leaf["start_ps"] + leaf["duration_ps"]).tolist()
    lo, hi = min(starts), max(ends)
    idle = (hi - lo) - _merged_busy(list(zip(starts, ends)))
    assert set(tl.idle["lane"]) == {"CPU:0 · idle"}            # one idle lane for the one device
    assert tl.idle_share == {"CPU:0": pytest.approx(idle / (hi - lo), rel=1e-9)}
    assert tl.idle_share["CPU:0"] < 0.1                          # the CPU is mostly busy
    assert not any("/" in lane for lane in tl.bars["lane"])     # no raw thread ids
    assert any(lane.startswith("CPU:0 · XLAEigen #") for lane in tl.bars["lane"])
    spec = json.dumps(timeline_chart(tl).to_dict())
    assert '"idle"' in spec and "bound / idle" in spec
    assert f"CPU:0 {100 * idle / (hi - lo):.1f}%" in tl.note and "idle gaps" in tl.note
