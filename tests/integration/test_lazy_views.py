"""Each view of ``traceview.Analysis`` is built when first asked for, and builds only what it reads: the op
table reads no allocator event and diagnoses no mesh; the memory view reads the allocator events; the
advice reads the mesh and memory views; each view is kept."""

from __future__ import annotations

import importlib

import pytest

import traceview
from traceview.trace.read import ReadOptions

ALLOCATOR_EVENTS = "traceview.parsers.xspace.allocator_events"
# one process reads (the spies count calls in this one), no table cache (nothing read where it is stored)
SERIAL = ReadOptions(jobs=1, cache=False)


class Spy:
    """Wraps a module's function and counts its calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: str, name: str):
        self.calls = 0
        target = importlib.import_module(module)
        original = getattr(target, name)

        def counted(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(target, name, counted)


@pytest.fixture()
def spies(monkeypatch):
    return (Spy(monkeypatch, ALLOCATOR_EVENTS, "read_allocator_events"),
            Spy(monkeypatch, "traceview.parallelism.diagnose", "diagnose"))


@pytest.mark.parametrize("sample", ["sharded", "pipeline_mpmd"])     # collectives; a program per stage
def test_ops_reads_no_allocator_events_and_diagnoses_no_mesh(sample_traces, spies, sample):
    allocator, diagnose = spies
    analysis = traceview.load(sample_traces / sample, target="tpu-v5p", read_options=SERIAL)
    assert allocator.calls == 0 and diagnose.calls == 0          # loading reads neither
    assert not analysis.ops.empty and not analysis.devices.empty and not analysis.steps.empty
    assert (allocator.calls, diagnose.calls) == (0, 0)
    analysis.scope_tree()
    assert (allocator.calls, diagnose.calls) == (0, 0)
    analysis.memory()
    assert allocator.calls >= 1 and diagnose.calls == 0          # the memory view reads the allocator events
    read = allocator.calls
    analysis.memory()
    assert allocator.calls == read                               # and is kept
    analysis.advice()                                            # weighs the mesh: diagnosed once
    assert diagnose.calls == 1 and analysis.mesh() is not None
    analysis.to_json()
    assert diagnose.calls == 1 and allocator.calls == read


def test_a_run_without_collectives_is_never_diagnosed_for_the_mesh(sample_traces, spies):
    _, diagnose = spies
    analysis = traceview.load(sample_traces / "mlp", read_options=SERIAL)
    assert analysis.mesh() is None and analysis.advice() is not None
    assert diagnose.calls == 0
    analysis.parallelism()                                       # asked for: diagnosed
    assert diagnose.calls == 1


def test_to_json_is_a_fresh_record_each_call(sample_traces):
    analysis = traceview.load(sample_traces / "mlp")
    first = analysis.to_json()
    first["ops"][0]["name"] = "changed"
    first["summary"]["devices"].clear()
    second = analysis.to_json()
    assert second["ops"][0]["name"] != "changed" and second["summary"]["devices"]
    assert second == analysis.to_json()


@pytest.mark.parametrize("sample", ["mlp", "serving", "sharded"])
def test_summary_is_the_json_summary_without_the_op_rows(sample_traces, sample, monkeypatch):
    """The headline numbers equal the analyze JSON's ``summary`` field for field, built without a row per op."""
    import traceview.render.record as record

    analysis = traceview.load(sample_traces / sample, read_options=SERIAL)
    expected = traceview.Summary.from_record(analysis.to_json()["summary"])
    calls = []
    monkeypatch.setattr(record, "op_rows", lambda ops: calls.append(len(ops)) or [])
    assert analysis.summary == expected
    assert calls == []
