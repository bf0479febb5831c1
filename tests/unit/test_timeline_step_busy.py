"""The vectorized per-(step, device) split equals busy_by_label run on each group by hand,
also when the steps are so long that the shifted time axis must be taken in chunks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceview.timeline.devices import busy_by_label, step_busy_by_label


def _by_hand(raw: pd.DataFrame, labels: np.ndarray, steps: pd.DataFrame, n_labels: int) -> pd.DataFrame:
    rows = []
    for step, start, time in zip(steps["step"], steps["start_ps"], steps["time_ps"]):
        lo, hi = int(start), int(start + time)
        parts, count = np.zeros(n_labels), 0
        for device in sorted(set(raw["device"])):
            on = ((raw["step"] == step) & (raw["device"] == device)).to_numpy()
            if not on.any():
                continue
            s = np.clip(raw["start_ps"].to_numpy()[on], lo, hi)
            e = np.clip((raw["start_ps"] + raw["duration_ps"]).to_numpy()[on], lo, hi)
            parts += busy_by_label(s, e, labels[on], n_labels)
            count += 1
        if count:
            rows.append([step, count, *(parts / count)])
    return pd.DataFrame(rows, columns=["step", "active_devices", *range(n_labels)])


@pytest.mark.parametrize("scale", [1, 10 ** 15])
def test_matches_per_group_split(scale):
    rng = np.random.default_rng(7)
    for _ in range(40):
        n, n_steps = int(rng.integers(1, 200)), int(rng.integers(1, 5))
        steps = pd.DataFrame({"step": np.arange(n_steps) * 3, "start_ps": np.arange(n_steps) * 1000 * scale,
                              "time_ps": rng.integers(1, 1500, n_steps) * scale})
        raw = pd.DataFrame({"start_ps": rng.integers(-50, n_steps * 1000 + 50, n) * scale,
                            "duration_ps": rng.integers(0, 300, n) * scale,
                            "device": rng.choice(["d0", "d1", "d2"], n),
                            "step": rng.choice([*steps["step"], 1], n)})   # step 1 has no window: ignored
        labels = rng.integers(-1, 4, n)
        got = step_busy_by_label(raw, labels, 4, steps).astype(float).reset_index(drop=True)
        want = _by_hand(raw, labels, steps, 4).astype(float).reset_index(drop=True)
        if want.empty:
            assert got.empty
        else:
            pd.testing.assert_frame_equal(got, want, check_dtype=False)
