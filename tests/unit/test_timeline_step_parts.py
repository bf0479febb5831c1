"""A run's step times merged from each host's reduced step table equal one pass over the joined table."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from traceview.parsers.profile import STEP_COLUMNS
from traceview.timeline.aggregate import run_step_times, step_times
from traceview.timeline.step_parts import StepFold, exact_means, merged_step_times, reduce_steps


def host_steps(rng: np.random.Generator, host: str, devices: int, steps: int, shared: str | None = None) -> pd.DataFrame:
    """A host's step table: a row per (step, device) it saw, some steps missing, some rows with no device,
    a device of another host's name when ``shared``."""
    rows = []
    names = [f"{host}/TPU:{k}" for k in range(devices)] + ([shared] if shared else [])
    for step in rng.choice(np.arange(steps) * 3 + 5, size=int(rng.integers(1, steps + 1)), replace=False):
        for name in names:
            if rng.random() < 0.8:
                start = int(rng.integers(0, 10 ** 9))
                rows.append((None if rng.random() < 0.05 else name, int(step), start, int(rng.integers(0, 10 ** 6))))
    frame = pd.DataFrame(rows, columns=["device", "step", "start_ps", "duration_ps"])
    frame["device"] = pd.Categorical(frame["device"])
    frame["step"] = frame["step"].astype(np.int32)
    frame["source"] = pd.Categorical(["module"] * len(frame))
    return frame[[c for c in STEP_COLUMNS]]


def _joined(tables: list[pd.DataFrame]) -> pd.DataFrame:
    frame = pd.concat(tables, ignore_index=True)
    frame["device"] = frame["device"].astype("category")
    return frame


@pytest.mark.parametrize("seed", range(6))
def test_step_times_merged_from_hosts_equal_one_pass(seed):
    """Random hosts (step counts, devices, missing steps and devices, a device named in two hosts' tables),
    each reduced and pickled as from a worker: the merged table equals step_times of the joined tables (the
    groupby path of a non-integer table included), whatever order the hosts come in."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 7))
    tables = [host_steps(rng, f"h{i}", int(rng.integers(1, 4)), int(rng.integers(1, 30)),
                         shared="h0/TPU:0" if seed % 2 and i else None) for i in range(n)]
    parts = [pickle.loads(pickle.dumps(reduce_steps(t))) for t in tables]
    whole = _joined(tables)
    expected = step_times(whole)
    pd.testing.assert_frame_equal(run_step_times(pd.DataFrame(), parts), expected)
    pd.testing.assert_frame_equal(merged_step_times(parts[::-1]), expected)
    grouped = step_times(whole.astype({"step": "float64"}))    # the groupby path: the same figures
    np.testing.assert_array_equal(grouped["devices"].to_numpy(), expected["devices"].to_numpy())
    np.testing.assert_allclose(grouped["device_mean_ps"].to_numpy(), expected["device_mean_ps"].to_numpy())
    np.testing.assert_array_equal(grouped["time_ps"].to_numpy(), expected["time_ps"].to_numpy())


@pytest.mark.parametrize("seed", range(6))
def test_step_times_folded_host_by_host_in_any_order_equal_one_pass(seed):
    """The hosts' reductions folded one at a time (as a pod's hosts arrive, in any order) give the joined
    tables' step times where no device is in two hosts' tables, and say so where one is."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 7))
    tables = [host_steps(rng, f"h{i}", int(rng.integers(1, 4)), int(rng.integers(1, 30)),
                         shared="h0/TPU:0" if seed % 2 and i else None) for i in range(n)]
    parts = [reduce_steps(t) for t in tables]
    expected = step_times(_joined(tables))
    fold = StepFold()
    for k in rng.permutation(n):
        fold.add(parts[k])
    assert fold.disjoint == (seed % 2 == 0)
    if fold.disjoint:
        pd.testing.assert_frame_equal(fold.table(), expected)
    else:      # the counts of distinct devices need the pairs; everything else is folded
        pd.testing.assert_frame_equal(fold.table().drop(columns="devices"), expected.drop(columns="devices"))


def test_a_host_not_reduced_leaves_the_table_to_decide():
    rng = np.random.default_rng(1)
    table = host_steps(rng, "h0", 2, 5)
    pd.testing.assert_frame_equal(run_step_times(table, [reduce_steps(table), None]), step_times(table))


def test_means_of_sums_past_float64_integers_are_correctly_rounded():
    total = np.array([2 ** 60 + 1, 7, 2 ** 55 + 3], dtype=np.int64)
    count = np.array([3, 2, 1], dtype=np.int64)
    means = exact_means(total, count)
    assert means.tolist() == [(2 ** 60 + 1) / 3, 3.5, float(2 ** 55 + 3)]
