"""The Model tab's icicle (dashboards/model.py): names from a trace are shown as text, the tree's shape kept."""

from __future__ import annotations

import pandas as pd
import pytest


def test_the_icicle_shows_hostile_names_as_text():
    pytest.importorskip("plotly")
    from traceview.dashboards.model import icicle

    nodes = pd.DataFrame({"path": [("f",), ("f", "<a href='x'>x</a>")], "name": ["f", "<a href='x'>x</a>"],
                          "total_us": [2.0, 1.0], "self_us": [1.0, 1.0], "gain_us": [0.5, 0.2],
                          "wall_gain_us": [0.25, 0.1],
                          "efficiency": [0.5, 0.5], "forward_us": [0, 0], "backward_us": [0, 0], "other_us": [2, 1],
                          "ops": [2, 1], "compute_us": [2.0, 1.0], "memory_us": [0, 0], "communication_us": [0, 0],
                          "unknown_us": [0, 0]})
    trace = icicle(nodes, judged=True).data[0]
    assert "<" not in "".join(trace.labels) and "<a" not in "".join(trace.customdata)
    assert list(trace.parents) == ["", "f"]
