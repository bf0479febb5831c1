"""Per-scope series in the history store: each run records its named scopes' time per step."""

from __future__ import annotations

import numpy as np
import pytest

import traceview

pytest.importorskip("sqlalchemy")


def test_scope_metrics_are_the_scope_tree_per_step(sample_traces):
    from traceview.history.record import run_from_analysis

    analysis = traceview.load(sample_traces / "transformer")
    run = run_from_analysis(analysis.pipeline, label="t0")
    scopes = {name: m for name, m in run.metrics.items() if name.startswith("scope:")}
    tree = analysis.scope_tree()
    nodes = {"/".join(p): t for p, t in zip(tree.nodes["path"], tree.nodes["total_us"])}
    assert "scope:train_step/Transformer/layer_0/attn" in scopes
    for name, metric in scopes.items():
        total = nodes[name.removeprefix("scope:")]
        # per-step values: their sum is the node's total over the traced steps (ops outside steps aside)
        assert metric.samples is not None and len(metric.samples) == run.steps
        assert sum(metric.samples) == pytest.approx(total, rel=0.02)
        assert metric.low <= metric.value <= metric.high
    assert np.isfinite([m.value for m in scopes.values()]).all()
