"""An SPMD pipeline's bubble measured from its loop's ticks (traceview.parallelism.spmd_bubble), on synthetic
executions whose tick times are known: stage s computes on nothing in its first s and last p - 1 - s ticks."""

from __future__ import annotations

import pandas as pd
import pytest

from traceview.parallelism.spmd_bubble import device_number, measure_spmd

US = 1_000_000


def _ticks(p: int, n: int, runs: int, tick_us) -> pd.DataFrame:
    """Device d (stage d) runs ``runs`` runs of an n-tick loop; tick k lasts tick_us(d, k), two body ops each."""
    rows = []
    for d in range(p):
        t = 0.0
        for _ in range(runs):
            for k in range(n):
                length = tick_us(d, k)
                for i, op in enumerate(("fusion.1", "collective-permute.2")):
                    rows.append({"device": f"host/CPU:{d}", "module": "jit_step", "op": op,
                                 "start_ps": int((t + i * length / 2) * US), "duration_ps": int(length / 2 * US)})
                t += length
            t += 100.0                        # between runs
    return pd.DataFrame(rows)


@pytest.mark.parametrize("p, n", [(2, 5), (4, 9)])
def test_equal_ticks_give_the_formula(p, n):
    found = measure_spmd(_ticks(p, n, 2, lambda d, k: 10.0), "jit_step", {"fusion.1", "collective-permute.2"}, n,
                         p, lambda dev: device_number(dev))
    assert found is not None and found.runs == 2
    assert found.bubble_fraction == pytest.approx((p - 1) / n)
    assert found.tick_us == pytest.approx(10.0)


def test_unequal_ticks_by_hand():
    p, n = 4, 9                                # m = 6: stage s works on ticks s .. s + 5
    found = measure_spmd(_ticks(p, n, 1, lambda d, k: 10.0 + k), "jit_step", {"fusion.1", "collective-permute.2"},
                         n, p, lambda dev: device_number(dev))
    total = sum(10.0 + k for k in range(n))
    hand = {s: sum(10.0 + k for k in range(n) if k < s or k > s + n - p) / total for s in range(p)}
    assert found is not None
    assert found.per_stage == pytest.approx(hand)
    assert found.bubble_fraction == pytest.approx(sum(hand.values()) / p)


def test_no_whole_runs_no_measure():
    table = _ticks(2, 5, 1, lambda d, k: 10.0)
    assert measure_spmd(table, "jit_step", {"fusion.1", "collective-permute.2"}, 4, 2, device_number) is None
    assert measure_spmd(table, "jit_other", {"fusion.1"}, 5, 2, device_number) is None
