"""Per-device time that adds up: busy + idle = span per device, bound parts = busy, step parts <= step.

Small synthetic frames, every figure worked out by hand in the comments.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceview.timeline.devices import busy_by_label, device_busy_by_label, device_time, step_busy_by_label

# labels: 0 compute, 1 memory, 2 communication, 3 unknown; -1 = no label (counts as unknown)
RAW = pd.DataFrame({
    "device": ["A", "A", "A", "B", "B"],
    "start_ps": [0, 5, 20, 0, 2],
    "duration_ps": [10, 10, 10, 4, 4],
    "self_ps": [10, 10, 10, 4, 4],
    "step": [0, 0, 1, 0, 0],
})
LABELS = np.array([0, 2, 1, -1, 1])


def test_busy_idle_span_per_device():
    table = device_time(RAW).set_index("device")
    # A: ops [0,10) [5,15) [20,30): span 30, union [0,15)+[20,30) = 25, idle 5; self-time sum 30
    assert table.loc["A", ["span_ps", "busy_ps", "idle_ps", "op_time_ps"]].tolist() == [30, 25, 5, 30]
    # B: ops [0,4) [2,6): span 6, union 6, idle 0; self-time sum 8 (overlap counted twice)
    assert table.loc["B", ["span_ps", "busy_ps", "idle_ps", "op_time_ps"]].tolist() == [6, 6, 0, 8]
    assert (table["busy_ps"] + table["idle_ps"] == table["span_ps"]).all()


def test_bound_parts_add_up_to_busy_and_overlap_goes_to_the_first_bound():
    parts = device_busy_by_label(RAW, LABELS, 4)
    # A: compute [0,10) = 10; communication [5,15) minus the compute overlap = 5; memory [20,30) = 10
    assert parts["A"].tolist() == [10, 10, 5, 0]
    # B: memory [2,6) = 4; the unlabelled [0,4) keeps only [0,2) = 2, as unknown
    assert parts["B"].tolist() == [0, 4, 0, 2]
    assert busy_by_label(np.array([0]), np.array([7]), np.array([3]), 4).tolist() == [0, 0, 0, 7]


def test_step_parts_are_per_device_and_never_exceed_the_step():
    steps = pd.DataFrame({"step": [0, 1], "start_ps": [0, 20], "time_ps": [12, 10]})
    table = step_busy_by_label(RAW, LABELS, 4, steps).set_index("step")
    # step 0, window [0,12): A compute 10, communication [10,12) = 2; B memory 4, unknown 2;
    # mean over the 2 devices: compute 5, memory 2, communication 1, unknown 1 (sum 9 <= 12)
    assert table.loc[0, "active_devices"] == 2
    assert table.loc[0, [0, 1, 2, 3]].tolist() == pytest.approx([5, 2, 1, 1])
    # step 1, window [20,30): only A, memory 10
    assert table.loc[1, "active_devices"] == 1 and table.loc[1, [0, 1, 2, 3]].tolist() == [0, 10, 0, 0]
    for step, row in table.iterrows():
        assert row[[0, 1, 2, 3]].sum() <= steps.set_index("step").loc[step, "time_ps"]
