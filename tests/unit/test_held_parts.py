"""The per-host passes run where the parts are held (hostreduce.workers): the same tables as measured here,
from the holder's copies alone; and here again once a merge had to read hosts again.

A stand-in holder keeps copies of the parts (pickled and read back, as a Dask worker holds them) and runs
the passes' functions on them; the caller's parts lose their kept rows and device intervals (as a spilled
part whose file the caller never mapped), so any pass measured here instead would give other figures.
"""

from __future__ import annotations

import functools
import pickle
import random

import numpy as np
import pandas as pd

from tests.unit.test_hostreduce_ops import PAIRS, HostsAgain, profile_of, run_tables
from traceview.advice.view import advice_report
from traceview.analysis.build import build_analysis
from traceview.hostreduce.activity import with_host_threads
from traceview.parsers.profile import HOST_EVENT_COLUMNS, empty_frame
from traceview.render.record import analysis_json

# the kept rows themselves: what the per-chunk measures read (hostreduce.run_ops._kept_rows)
ROW_FIELDS = ("kept_group", "kept_device", "kept_start", "kept_duration", "kept_self", "kept_step", "kept_alone")


class Held:
    """A ``PartWorkers`` in this process: its own copies of the parts; counts the groups it measured. A fold
    adds the groups' results in a shuffled order, cut into runs each added up first (as workers holding
    interleaved hosts and finishing in any order do): the folds' sums must not depend on it."""

    def __init__(self, profile, seed: int = 0) -> None:
        self.parts = [pickle.loads(pickle.dumps(p.ops)) for p in profile.parts]
        self.devices_by_part = [list(p.ops.activity.devices) for p in profile.parts]
        self.groups = 0
        self.folds = 0
        self.random = random.Random(seed)

    def map(self, fn, groups, *shared, fold=None):
        self.groups += len(groups)
        found = [fn(list(g), [self.parts[i] for i in g], *shared) for g in groups]
        if fold is None or not found:
            return found
        self.folds += 1
        self.random.shuffle(found)
        cuts = sorted(self.random.sample(range(1, len(found)), min(3, len(found) - 1)))
        runs = [functools.reduce(fold, found[a:b]) for a, b in zip([0, *cuts], [*cuts, len(found)])]
        return [functools.reduce(fold, runs[::-1])]


def _pod(raw, hosts):
    """One part per host, each host's threads cut where it was read (as a file's reading does)."""
    profile = profile_of(raw, hosts)
    for part in profile.parts:
        part.ops.activity = with_host_threads(part.ops.activity, empty_frame(HOST_EVENT_COLUMNS))
    return profile


def _stripped(profile):
    """The caller's parts without their kept rows and device intervals."""
    for part in profile.parts:
        for name in ROW_FIELDS:
            setattr(part.ops, name, getattr(part.ops, name)[:0])
        for device in part.ops.activity.devices.values():
            device.busy = (device.busy[0][:0], device.busy[1][:0])
    return profile


def _figures(profile) -> tuple[dict, dict]:
    pipeline = build_analysis(profile, target="tpu-v5p")
    idle = advice_report(pipeline).idle
    return analysis_json(pipeline), {"causes": idle.causes, "devices": idle.per_device.to_dict("list"),
                                     "steps": idle.per_step.to_dict("list"), "evidence": idle.evidence}


def test_passes_on_the_held_parts_equal_those_measured_here():
    hosts, raw = run_tables(12, steps=True, overlap=0.2)
    here = _figures(_pod(raw, hosts))
    assert here[0]["ops"] and here[1]["devices"]["device"]
    for seed in range(4):        # the folds' results added in other orders and runs: the same figures
        profile = _pod(raw, hosts)
        held = Held(profile, seed)
        profile.workers = held
        assert _figures(_stripped(profile)) == here
        assert held.groups > 0 and held.folds >= 2    # the busy split and the idle causes fold
    # without the holder the stripped parts measure other figures: the comparison above can fail
    alone = _stripped(_pod(raw, hosts))
    assert _figures(alone) != here


def test_parts_read_again_are_measured_here():
    """A merge that read hosts again keeping more rows (here: async pair members not kept) measures the kept
    rows from the parts read again, not from the holder's copies, which lack them."""
    from traceview.hostreduce.combine import combine

    hosts, raw = run_tables(10, steps=False, overlap=0.0)
    profile = profile_of(raw, hosts, reader=HostsAgain(hosts))
    held = Held(profile)
    profile.workers = held
    run = combine(profile, False, PAIRS)
    assert run.workers is None
    stats = run.stats.assign(collective_kind=np.where(run.stats["op"].isin(["ars", "ard"]), "all-reduce", None))
    found = run.judged_and_exposed(stats, PAIRS)
    assert held.groups == 0
    assert pd.notna(found["judged_time_ps"]).any()
