"""The front door: the views an `Analysis` gives a notebook are what the CLI prints.

`traceview.load(PATH).memory()` and `.parallelism()` rendered as JSON equal
`traceview memory|parallelism PATH --format json`, and `.hlo()` holds the modules
`traceview hlo PATH --format json` costs (the CLI reads them on its own path), on the
project's samples and on a real TPU trace.
"""

from __future__ import annotations

import json

import pytest

import traceview
from traceview.cli import main
from traceview.render.memory import memory_json
from traceview.render.parallelism import parallelism_json

SAMPLES = ("mlp", "fsdp", "tensor_parallel")
REAL = "openxla-xprof/tpu_inference_2.xplane.pb"   # allocator events and a 3-axis mesh


def _cli_json(capsys, *args) -> dict:
    assert main([*map(str, args), "--format", "json", "--no-cache"]) == 0
    return json.loads(capsys.readouterr().out)


def _through_json(record: dict) -> dict:
    """The record as the CLI's JSON text reads back (tuples become lists, keys stay in order)."""
    return json.loads(json.dumps(record))


@pytest.fixture(scope="module", params=[*SAMPLES, "real"])
def trace_path(request, sample_traces, shared_traces):
    return shared_traces / REAL if request.param == "real" else sample_traces / request.param


@pytest.fixture(scope="module")
def loaded(trace_path) -> traceview.Analysis:
    return traceview.load(trace_path)


def test_memory_equals_the_cli_json(loaded, trace_path, capsys):
    assert _through_json(memory_json(loaded.memory())) == _cli_json(capsys, "memory", trace_path)


def test_parallelism_equals_the_cli_json(loaded, trace_path, capsys):
    assert _through_json(parallelism_json(loaded.parallelism())) == _cli_json(capsys, "parallelism", trace_path)


def test_hlo_holds_the_modules_the_cli_costs(loaded, trace_path, capsys):
    assert _through_json(loaded.hlo().to_json())["modules"] == _cli_json(capsys, "hlo", trace_path)["modules"]


def test_the_tables_hold_what_the_json_holds(loaded):
    """The public tables are built from the pipeline's tables, not read back from the JSON: the same values."""
    import pandas as pd

    record = loaded.to_json()
    pd.testing.assert_frame_equal(loaded.ops, pd.DataFrame.from_records(record["ops"], columns=list(loaded.ops.columns)))
    pd.testing.assert_frame_equal(loaded.devices, pd.DataFrame.from_records(record["devices"]))
    report = loaded.hlo()
    modules = [{k: v for k, v in m.items() if k not in ("instructions", "flops_unknown_ops")}
               | {"instructions": len(m["instructions"])} for m in report.to_json()["modules"]]
    pd.testing.assert_frame_equal(report.modules, pd.DataFrame.from_records(modules, columns=list(report.modules.columns)))


def test_the_views_are_built_once(loaded):
    assert loaded.memory() is loaded.memory() and loaded.parallelism() is loaded.parallelism()


def test_the_real_trace_has_what_the_views_report(shared_traces, capsys):
    """The real trace is not empty for either view, so the equalities above compare something."""
    memory = _cli_json(capsys, "memory", shared_traces / REAL)
    mesh = _cli_json(capsys, "parallelism", shared_traces / REAL)
    assert memory["memories"] and all(m["peak_bytes"] > 0 for m in memory["memories"])
    assert len(mesh["axes"]) == 3 and mesh["mesh"]["device_count"] == 8
