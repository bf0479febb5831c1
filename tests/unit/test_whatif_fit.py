"""The fixed part of a matmul's work per execution, fitted over one capture's compute-bound ops
(traceview.whatif.fit), on generated op tables: a random fixed part and rate, random FLOPs, random noise and
a few ops that waited for a core; and the host projection that keeps that part as it is."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.unit.test_whatif_host import _base
from traceview.whatif.config import Config
from traceview.whatif.fit import MAX_OPS, MIN_SPREAD, fixed_part
from traceview.whatif.project import project

SEEDS = range(30)


def _table(rng: random.Random, shapes: int, a: float, b: float, noise: float = 0.03,
           waited: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Ops of ``shapes`` FLOPs per execution, each 1.5-4x the last (as blocks of different widths are; each
    shape three to five ops), work = a + b x FLOPs times a noise of +-``noise``; ``waited`` of them lasted
    3-20x as long (their thread waited for a core)."""
    sizes = [rng.uniform(1e6, 1e7)]
    while len(sizes) < shapes:
        sizes.append(sizes[-1] * rng.uniform(1.5, 4))
    flops = np.array([f for f in sizes for _ in range(rng.randint(3, 5))])
    work = (a + b * flops) * np.array([rng.uniform(1 - noise, 1 + noise) for _ in flops])
    for i in rng.sample(range(len(flops)), waited):
        work[i] *= rng.uniform(3, 20)
    return flops, work


@pytest.mark.parametrize("seed", SEEDS)
def test_the_fit_recovers_the_fixed_part_and_the_rate(seed):
    rng = random.Random(seed)
    a, b = rng.uniform(5e-6, 1e-4), rng.uniform(5e-12, 3e-11)     # 5-100 us, 5-30 us per MFLOP
    flops, work = _table(rng, rng.randint(2, 4), a, b, waited=rng.randint(0, 2))
    fit = fixed_part(flops, work)
    assert fit.ops == len(flops)
    assert fit.per_flop == pytest.approx(b, rel=0.15)
    # the intercept's error is the noise of the smallest ops' work, not a share of a
    assert abs(fit.per_execution - a) <= 0.1 * (a + b * flops.min())
    assert 0.0 <= fit.per_execution <= work.min()
    assert f"{fit.ops} compute-bound ops" in fit.how


@pytest.mark.parametrize("seed", SEEDS)
def test_one_flops_per_execution_gets_no_fixed_part(seed):
    """Every op of the same FLOPs (or within MIN_SPREAD of each other): the two parts cannot be told apart."""
    rng = random.Random(seed)
    a, b = rng.uniform(5e-6, 1e-4), rng.uniform(5e-12, 3e-11)
    flops, work = _table(rng, 1, a, b, noise=0.3)
    assert fixed_part(flops, work).per_execution == 0.0
    close = flops * np.array([rng.uniform(1, MIN_SPREAD * 0.99) for _ in flops])
    assert fixed_part(close, a + b * close).per_execution == 0.0
    assert fixed_part(flops[:2] * [1, 4], work[:2]).per_execution == 0.0   # two ops are too few


@pytest.mark.parametrize("seed", SEEDS)
def test_the_fixed_part_is_clamped(seed):
    """A negative intercept is 0; one above the smallest op's work is that work."""
    rng = random.Random(seed)
    b = rng.uniform(5e-12, 3e-11)
    flops = np.array([rng.uniform(1e6, 5e7) for _ in range(rng.randint(4, 12))])
    flops[0], flops[1] = flops.min() / MIN_SPREAD / 2, flops.max() * 2
    assert fixed_part(flops, b * flops - b * flops.min() / 2).per_execution == 0.0     # intercept below 0
    work = b * flops + 1e-4
    work[0] = 1e-5                                                  # this op lasts less than the intercept
    fit = fixed_part(flops, work)
    assert fit.per_execution == pytest.approx(1e-5)


@pytest.mark.parametrize("seed", range(20))
def test_the_fixed_part_stays_as_it_is_in_a_projection(seed):
    """k times the batch on the same mesh: a compute-bound op's fixed part stays, its weight reads stay,
    the rest grows k times; today's configuration is still today's step exactly."""
    from dataclasses import replace

    rng = random.Random(seed)
    base = _base(seed)
    host = base.host
    rows = base.ops[base.ops["bound"] == "compute"]
    fixed = {("main", o): rng.uniform(0, 1.2) * host.work[("main", o)] for o in rows["op"]}
    base.host = replace(host, fixed=fixed)
    same = project(base, Config(dict(base.mesh), base.batch_tokens, None))
    assert same.step_ps == pytest.approx(base.step_ps, rel=1e-9)
    k = rng.choice((0.5, 2.0, 3.0))
    p = {t.what: t for t in project(base, Config(dict(base.mesh), k * base.batch_tokens, None)).terms}
    if rows.empty:
        return
    expected = 0.0
    for op, weight in zip(rows["op"], rows["weight_bytes"]):
        work = host.work[("main", op)]
        still = min(work, fixed[("main", op)])
        read = min(work - still, weight / host.byte_rate)
        expected += still + read + k * (work - still - read)
    today = sum(host.work[("main", o)] for o in rows["op"])
    term = p["compute-bound ops"]
    assert term.time_ps == pytest.approx(term.baseline_ps * expected / today)


@pytest.mark.parametrize("seed", range(3))
def test_thousands_of_ops_are_fitted_from_an_even_sample(seed):
    """A program of more ops than MAX_OPS (hostile or huge: the pairs grow as n^2) is fitted from an even
    sample of them, and the sample still recovers the fixed part and the rate."""
    rng = np.random.default_rng(seed)
    n = MAX_OPS * int(rng.integers(3, 8))
    a, b = rng.uniform(5e-6, 8e-5), rng.uniform(5e-15, 3e-14)
    flops = rng.uniform(1e6, 5e8, n)
    fit = fixed_part(flops, (a + b * flops) * rng.uniform(0.98, 1.02, n))
    assert fit.ops == n
    assert fit.per_execution == pytest.approx(a, rel=0.25) and fit.per_flop == pytest.approx(b, rel=0.05)
