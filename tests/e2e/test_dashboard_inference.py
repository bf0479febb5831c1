"""The dashboard's Inference tab, driven through Streamlit's AppTest, against `traceview inference`'s JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("altair")

from streamlit.testing.v1 import AppTest  # noqa: E402

import traceview.dashboards  # noqa: E402
from traceview.cli import main  # noqa: E402
from traceview.dashboards.config import DashboardConfig, from_env  # noqa: E402
from traceview.dashboards.tabs import TAB_KEY, TABS  # noqa: E402

APP = Path(traceview.dashboards.__file__).resolve().parent / "app.py"


def _open(monkeypatch, path: Path, tab: str) -> AppTest:
    for key in list(from_env().to_env()):
        monkeypatch.delenv(key, raising=False)
    for key, value in DashboardConfig(path=str(path)).to_env().items():
        monkeypatch.setenv(key, value)
    at = AppTest.from_file(str(APP), default_timeout=300)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.sidebar.selectbox(key="target").set_value("tpu-v5e").run()
    at.session_state[TAB_KEY] = tab
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_inference_tab_shows_the_clis_phases(sample_traces, tmp_path, monkeypatch):
    assert "Inference" in TABS
    path = sample_traces / "serving"
    out = tmp_path / "inference.json"
    assert main(["inference", str(path), "--target", "tpu-v5e", "--format", "json", "-o", str(out)]) == 0
    cli = json.loads(out.read_text())
    at = _open(monkeypatch, path, "Inference")
    shown = {m.label: m.value for m in at.metric}
    assert shown["critical batch"] == f"{cli['critical_batch']:,.0f}"
    assert shown["sequences in HBM"] == f"{cli['max_sequences']:,}"
    (phases,) = [d.value for d in at.dataframe if "phase" in d.value.columns]
    assert list(phases["phase"]) == [p["phase"] for p in cli["phases"]]
    assert list(phases["steps"]) == [p["steps"] for p in cli["phases"]]
    assert len(at.get("vega_lite_chart")) == 2      # step times against the floor, batch against critical
