"""The collector's thresholds while a Dask worker reads (traceview.runtime.collector)."""

from __future__ import annotations

import gc
import threading

import pytest

from traceview.runtime.collector import THRESHOLDS, fewer_collections


@pytest.fixture()
def own_thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_fewer_collections_while_blocks_run_then_the_process_own(own_thresholds):
    with fewer_collections():
        assert gc.get_threshold() == THRESHOLDS
        with fewer_collections():
            assert gc.get_threshold() == THRESHOLDS
        assert gc.get_threshold() == THRESHOLDS        # the outer block still runs
    assert gc.get_threshold() == (700, 10, 10)


def test_fewer_collections_keeps_higher_thresholds_and_restores_after_an_error(own_thresholds):
    gc.set_threshold(50_000, 5, 100)
    with pytest.raises(ValueError), fewer_collections():
        assert gc.get_threshold() == (50_000, THRESHOLDS[1], 100)
        raise ValueError
    assert gc.get_threshold() == (50_000, 5, 100)


def test_fewer_collections_over_threads_ends_with_the_last_block(own_thresholds):
    inside, leave = threading.Barrier(3), threading.Event()
    first_out = threading.Event()
    seen = []

    def block(wait_for: threading.Event | None) -> None:
        with fewer_collections():
            inside.wait()
            if wait_for is not None:
                wait_for.wait()
        if wait_for is None:
            seen.append(gc.get_threshold())      # the other thread's block still runs
            first_out.set()

    threads = [threading.Thread(target=block, args=(None,)), threading.Thread(target=block, args=(leave,))]
    for t in threads:
        t.start()
    inside.wait()
    first_out.wait(10)
    leave.set()
    for t in threads:
        t.join(10)
    assert seen == [THRESHOLDS]
    assert gc.get_threshold() == (700, 10, 10)
