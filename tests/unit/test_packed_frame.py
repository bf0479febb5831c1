"""timeline.packed_frame: a table packed to its columns gives the same DataFrame back, also after pickling."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from traceview.timeline.packed_frame import PackedFrame, as_frame


def _frame(rng: np.random.Generator, rows: int) -> pd.DataFrame:
    names = [f"host{rng.integers(1000):03d}/dev:{i}" for i in range(int(rng.integers(1, 6)))]
    return pd.DataFrame({
        "step": rng.integers(-1, 50, rows).astype(np.int32),
        "device": pd.Categorical(rng.choice(names, rows), categories=sorted(set(names))),
        "host": pd.Categorical(rng.choice(["a", "b"], rows), categories=["b", "a"], ordered=True),
        "start": rng.integers(0, 10**15, rows, dtype=np.int64),
        "ratio": rng.random(rows),
    })


@pytest.mark.parametrize("seed", range(6))
def test_the_same_frame_back(seed):
    rng = np.random.default_rng(seed)
    frame = _frame(rng, int(rng.integers(0, 40)))
    packed = PackedFrame.of(frame)
    assert len(packed) == len(frame) and packed.empty == frame.empty
    pd.testing.assert_frame_equal(packed.frame(), frame)
    pd.testing.assert_frame_equal(as_frame(pickle.loads(pickle.dumps(packed))), frame)
    assert as_frame(frame) is frame


def test_no_columns_is_empty():
    assert PackedFrame({}).empty and len(PackedFrame({})) == 0
