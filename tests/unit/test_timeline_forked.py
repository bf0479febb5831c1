"""timeline.forked: per-host work in forked processes gives what one process gives, in order."""

from __future__ import annotations

import os

import pytest

from traceview.timeline import forked


def test_forked_results_come_in_order_from_other_processes():
    if not forked._can_fork():
        pytest.skip("no fork here (not Linux, or threads running)")
    parent = os.getpid()
    got = forked.fork_map(lambda i: (i * i, os.getpid()), 40, 2)
    assert [v for v, _ in got] == [i * i for i in range(40)]
    assert {pid for _, pid in got} - {parent}                   # the work ran in forked processes


def test_one_job_or_one_item_runs_here(monkeypatch):
    parent = os.getpid()
    assert forked.fork_map(lambda i: os.getpid(), 5, 1) == [parent] * 5
    assert forked.fork_map(lambda i: os.getpid(), 1, 4) == [parent]
    monkeypatch.setenv("TRACEVIEW_NO_FORK", "1")
    assert forked.fork_map(lambda i: os.getpid(), 5, 4) == [parent] * 5


def test_an_error_in_a_forked_task_reaches_the_caller():
    if not forked._can_fork():
        pytest.skip("no fork here")

    def task(i: int) -> int:
        if i == 7:
            raise ValueError("host 7")
        return i

    with pytest.raises(ValueError, match="host 7"):
        forked.fork_map(task, 10, 2)
