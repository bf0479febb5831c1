"""A part's large arrays written to a spill file and mapped back: the same values, and a layout written by
another version's slots (a stale Dask worker) refused by name instead of misplacing arrays."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tests.unit.test_hostreduce_ops import run_tables
from tests.unit.test_timeline_step_parts import host_steps
from traceview.errors import UserError
from traceview.hostreduce.host_ops import reduce_ops
from traceview.hostreduce.spill import KEPT_FIELDS, adopt, spilled, write_part
from traceview.timeline.step_parts import reduce_steps


def _part(seed: int):
    rng = np.random.default_rng(seed)
    hosts, _ = run_tables(seed, steps=True, overlap=0.3)
    part = reduce_ops(hosts[0])
    part.activity.step_times = reduce_steps(host_steps(rng, "h0", 2, 12))
    return part


@pytest.mark.parametrize("seed", [1, 2])
def test_spilled_arrays_map_back_equal(tmp_path, seed):
    part = _part(seed)
    before = copy.deepcopy(part)
    layout = write_part(part, str(tmp_path / "p.rows"))
    assert layout is not None and part.kept_start.size == 0          # the part travels small
    adopt(part, layout)
    for name in KEPT_FIELDS:
        np.testing.assert_array_equal(getattr(part, name), getattr(before, name))
    np.testing.assert_array_equal(part.activity.step_times.total, before.activity.step_times.total)
    assert spilled(part.activity.step_times.first) and not spilled(before.activity.step_times.first)


def test_a_layout_of_other_slots_is_refused(tmp_path):
    written = _part(3)
    other = copy.deepcopy(written)
    layout = write_part(written, str(tmp_path / "p.rows"))
    other.activity.step_times = None                                   # a version that spills no step table
    with pytest.raises(UserError, match="another traceview"):
        adopt(other, layout)
