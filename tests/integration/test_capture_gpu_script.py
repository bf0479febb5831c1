"""The NVIDIA capture script (sample_traces/capture_gpu.py) runs, here on the CPU at its --small sizes, and
writes what a GPU session's checks read: a trace, the HLO dump and truth.json per program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import traceview

SCRIPT = Path(__file__).resolve().parents[2] / "sample_traces" / "capture_gpu.py"


@pytest.mark.slow
def test_capture_script_writes_traces_dumps_and_truth(tmp_path):
    pytest.importorskip("jax")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--small", "--only", "generate", "host_bound"],
                   check=True, timeout=600, env=env, capture_output=True)
    for name in ("generate", "host_bound"):
        folder = tmp_path / name
        truth = json.loads((folder / "truth.json").read_text())
        assert truth["program"] == name and truth["platform"] == "cpu"
        assert all(call["us_per_call"] > 0 for call in truth["calls"].values())
        assert any((folder / "hlo").glob("*after_optimizations.txt"))
        analysis = traceview.load(folder)
        assert len(analysis.to_json()["summary"]["steps"]) == 5        # one StepTraceAnnotation per traced call
