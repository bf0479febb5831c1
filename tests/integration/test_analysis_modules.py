"""Only the HLO modules a trace's ops ran in are decoded for the analysis; the others on demand.

A JAX trace carries every module the program compiled (initialisation, RNG, small
jits), most of which never ran while the profiler was on. The analysis joins op
costs with the modules that ran only; `PipelineResult.hlo.every` / `.every_costs` still give
every module (parallelism, graph, the dashboard's op detail), converted on first use.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import traceview.analysis.build as pipeline
from traceview.analysis.build import apply_target, build_analysis
from traceview.analysis.modules import Executed, cost_table, profile_modules
from traceview.hardware.database import get_chip, load_hardware
from traceview.parsers.hlo import proto as hlo_proto
from traceview.render.record import analysis_json
from traceview.trace.read import load_profile


@pytest.fixture
def transformer(sample_traces):
    return load_profile(sample_traces / "transformer")


def _counting(monkeypatch) -> list[str]:
    decoded: list[str] = []
    parse = hlo_proto.parse_hlo_proto

    def counted(data, file=None):
        decoded.append(file or "")
        return parse(data, file)

    monkeypatch.setattr(hlo_proto, "parse_hlo_proto", counted)
    return decoded


def test_only_the_modules_that_ran_are_decoded_until_all_are_asked_for(transformer, monkeypatch):
    ran_names = set(transformer.op_executions()["module"].astype(str))
    assert len(transformer.hlo_protos) > len(ran_names)      # the sample compiled more than it profiled
    every, _ = profile_modules(transformer)                   # the reference: every module
    decoded = _counting(monkeypatch)
    analysis = build_analysis(transformer)
    assert len(decoded) == sum(hlo_proto.proto_key(k)[0] in ran_names for k in transformer.hlo_protos)
    assert {m.name for m in analysis.hlo.ran} == ran_names
    assert set(analysis.hlo.ran_costs["module"]) == ran_names

    assert [m.name for m in analysis.hlo.every] == [m.name for m in every]       # all of them, in order
    assert len(decoded) == len(transformer.hlo_protos)             # each converted once: the ran ones reused
    assert all(any(m is r for m in analysis.hlo.every) for r in analysis.hlo.ran)
    pd.testing.assert_frame_equal(analysis.hlo.every_costs, cost_table(every)[0])
    retargeted = apply_target(analysis, get_chip("tpu-v5p", load_hardware()))
    assert retargeted.hlo is analysis.hlo and retargeted.hlo.every is analysis.hlo.every   # found once for every copy
    assert len(decoded) == len(transformer.hlo_protos)


def test_the_analysis_equals_the_one_built_from_every_module(transformer, monkeypatch):
    filtered = analysis_json(build_analysis(transformer, target="h100"))
    monkeypatch.setattr(pipeline, "executed_modules", lambda profile: None)
    every = build_analysis(transformer, target="h100")
    assert every.hlo.every_from is None and len(every.hlo.ran) == len(transformer.hlo_protos)
    assert analysis_json(every) == filtered


def test_ops_that_match_no_module_fall_back_to_every_module(transformer, monkeypatch):
    monkeypatch.setattr(pipeline, "executed_modules",
                        lambda profile: Executed(program_ids=frozenset({12345}), names=frozenset({"never_ran"})))
    analysis = build_analysis(transformer)
    assert analysis.hlo.every_from is None
    assert len(analysis.hlo.ran) == len(transformer.hlo_protos)
    assert analysis.ops["has_cost"].any()


def test_a_module_is_kept_by_program_id_when_its_name_differs():
    ran = Executed(program_ids=frozenset({-2}), names=frozenset({"jit_step"}))
    assert ran.holds("jit_step", None)
    assert ran.holds("renamed", 2**64 - 2)         # uint64 program id, held as int64 bits
    assert not ran.holds("renamed", 7)
    assert not ran.holds("other", None)


def test_a_dumped_module_the_trace_carries_is_not_read(transformer, monkeypatch):
    """The transformer sample's hlo/ dump holds jit_train_step, which the trace carries (and wins)."""
    from traceview.parsers.hlo import dump as hlo_dump

    dumped = [f.name for f in (Path(transformer.source.path) / "hlo").iterdir()]
    assert any("jit_train_step" in name for name in dumped)
    read = []
    real = hlo_dump.read_hlo_file
    monkeypatch.setattr(hlo_dump, "read_hlo_file", lambda p: read.append(p) or real(p))
    analysis = build_analysis(transformer)
    assert analysis.ops["has_cost"].any()
    assert [m.name for m in analysis.hlo.every].count("jit_train_step") == 1
    assert read == []
