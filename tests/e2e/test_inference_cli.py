"""`traceview inference PATH`: the JSON contract of DESIGN.md, the table and Markdown, and user errors."""

from __future__ import annotations

import json

from traceview.cli import main

CONTRACT_PHASE = {"phase", "module", "steps", "batch", "tokens_per_step", "step_time_us", "param_bytes",
                  "kv_cache_bytes", "flops", "floor_us", "floor_bound", "efficiency"}
CONTRACT_TOP = {"phases", "critical_batch", "kv_bytes_per_token", "max_sequences", "target", "warnings"}



def test_json_follows_the_contract(serving, capsys):
    assert main(["inference", str(serving), "--target", "v5e", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert CONTRACT_TOP <= set(doc)
    assert [p["phase"] for p in doc["phases"]] == ["prefill", "decode"]
    for phase in doc["phases"]:
        assert CONTRACT_PHASE <= set(phase)
        assert phase["floor_bound"] in ("compute", "memory")
        # unknown is null with a reason, never 0
        assert phase["efficiency"] is None and phase["reasons"]["efficiency"]
    assert doc["target"]["name"] == "tpu-v5e" and doc["target"]["projected"] is True
    assert round(doc["critical_batch"]) == 243


def test_table_and_markdown(serving, capsys):
    assert main(["inference", str(serving)]) == 0
    text = capsys.readouterr().out
    assert "Serving phases" in text and "jit_decode" in text and "Critical batch:" in text
    assert main(["inference", str(serving), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "## Serving phases" in md and "| decode | jit_decode |" in md


def test_an_unknown_target_is_one_line_and_exit_2(serving, capsys):
    assert main(["inference", str(serving), "--target", "tpu-v99"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "tpu-v99" in err


def test_a_missing_path_is_exit_2(tmp_path, capsys):
    assert main(["inference", str(tmp_path / "nothing")]) == 2


def test_analyze_prints_the_inference_section(serving, capsys):
    """analyze reads no op executions (keep_ops=False): the serving calls are found all the same."""
    assert main(["analyze", str(serving), "--target", "tpu-v5e"]) == 0
    text = capsys.readouterr().out
    assert "Inference" in text and "decode jit_decode: 12 steps, batch 4" in text
    assert "Critical batch: 243 sequences" in text
    assert main(["analyze", str(serving), "--format", "markdown"]) == 0
    assert "Inference" in capsys.readouterr().out
