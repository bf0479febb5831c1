"""The serving rules on generated programs: a generation loop inside one jitted program, and paged KV caches.

tests/support/parallel_programs.py draws the programs at random from a seed (names, batch, prompt, decode
steps, layers, widths; pages, page size, sequences, tokens per step) and runs each 1-3 times under the
profiler on the CPU. The references are the generator's draws and the bytes worked by hand here. The seed is
random per run and printed in every failure; TRACEVIEW_GENERATED_SEED=N replays one.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import traceview

SEED = int(os.environ.get("TRACEVIEW_GENERATED_SEED") or random.SystemRandom().randrange(1 << 30))
GENERATOR = Path(__file__).resolve().parents[1] / "support" / "parallel_programs.py"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, list[dict]]:
    pytest.importorskip("jax")
    out = tmp_path_factory.mktemp("generated_serving")
    proc = subprocess.run([sys.executable, str(GENERATOR), "--seed", str(SEED), "--out", str(out), "--forms",
                           "generation-loop", "paged"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"seed {SEED}: the generator failed:\n{proc.stderr[-3000:]}"
    return out, json.loads((out / "manifest.json").read_text())


def _analysis(generated, form: str, target: str | None = None):
    out, manifest = generated
    facts = next(f for f in manifest if f["form"] == form)
    return facts, traceview.load(out / facts["name"] / "trace", target=target)


def _report(generated, form: str, target: str | None = None):
    facts, analysis = _analysis(generated, form, target)
    return facts, analysis.inference()


def test_a_generation_loop_is_a_prefill_and_a_decode_phase(generated):
    facts, report = _report(generated, "generation-loop")
    where = f"seed {SEED}, {facts}"
    prefill, decode = report.phase("prefill"), report.phase("decode")
    assert prefill is not None and decode is not None, (where, report.warnings)
    assert prefill.module == decode.module == facts["module"], where
    # steps = the loop's trip count x the program's calls; one new token per sequence per step
    assert decode.steps == facts["steps"] * facts["calls"], where
    assert prefill.steps == facts["calls"], where
    assert decode.batch == prefill.batch == facts["batch"], where
    assert decode.tokens_per_sequence == 1 and prefill.tokens_per_sequence == facts["prompt"], where
    assert decode.loop is not None and any("decode loop" in e for e in decode.recognised_by), where
    assert decode.step_time_us > 0 and prefill.step_time_us > 0, where
    # XLA's cost analysis counts a loop body once: the decode step's FLOPs and the prefill's make up the program
    assert decode.flops + prefill.flops == pytest.approx(facts["cost_flops"], rel=1e-6), where
    # the cache [layers, 2, batch, max_len, d] f32: 2 x layers x d x 4 bytes per token
    assert report.kv_bytes_per_token == 2 * facts["layers"] * facts["d"] * 4 == facts["kv_bytes_per_token"], where
    assert decode.program.max_sequence_length == facts["max_len"], where


def test_analyze_reports_the_generation_loop(generated):
    facts, analysis = _analysis(generated, "generation-loop")
    record = analysis.to_json()["inference"]
    phases = {p["phase"]: p for p in record["phases"]}
    assert phases["decode"]["steps"] == facts["steps"] * facts["calls"], f"seed {SEED}, {facts}"
    assert phases["decode"]["loop"] and phases["prefill"]["module"] == facts["module"]


def test_a_paged_cache_gives_bytes_per_token_pages_and_sequences(generated):
    facts, report = _report(generated, "paged", "tpu-v5e")
    where = f"seed {SEED}, {facts}"
    mixed = facts["tokens"] > facts["sequences"]
    phase = report.phase("mixed" if mixed else "decode")
    assert phase is not None, (where, [p.phase for p in report.phases], report.warnings)
    paging = phase.program.paging
    # every layer writes K and V of kv_heads x head_dim f32 per token
    hand = 2 * facts["layers"] * facts["kv_heads"] * facts["head_dim"] * 4
    assert report.kv_bytes_per_token == hand == facts["kv_bytes_per_token"], where
    assert (paging.pages, paging.page_size) == (facts["pages"], facts["page_size"]), where
    assert (paging.sequences, paging.pages_per_sequence) == (facts["sequences"], facts["pages_per_sequence"]), where
    assert phase.tokens_per_step == facts["tokens"] and phase.batch == facts["sequences"], where
    assert phase.steps == facts["calls"], where
    weights = phase.program.weight_bytes
    longest = facts["pages_per_sequence"] * facts["page_size"]
    assert report.max_sequences == int((16e9 - weights) // (hand * longest)), where


def _vllm_like_trace(root: Path, programs: tuple[str, ...], calls: int) -> Path:
    """A TPU trace-event JSON of a server's programs (module and op lines, no HLO), as vLLM's TPU runs write."""
    events: list[dict] = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:TPU:0"}},
                          {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "XLA Modules"}},
                          {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "XLA Ops"}}]
    t = 0.0
    for _ in range(calls):
        for k, name in enumerate(programs):
            events.append({"ph": "X", "pid": 1, "tid": 1, "ts": t, "dur": 90.0, "name": f"{name}({k + 1})"})
            events += [{"ph": "X", "pid": 1, "tid": 2, "ts": t + 1 + 30 * j, "dur": 25.0, "name": f"fusion.{j}",
                        "args": {"program_id": str(k + 1)}} for j in range(3)]
            t += 100.0
    run = root / "plugins" / "profile" / "run"
    run.mkdir(parents=True)
    (run / "host.trace.json").write_text(json.dumps({"displayTimeUnit": "ns", "traceEvents": events}))
    return root


def test_a_trace_without_hlo_names_the_programs_that_ran(tmp_path):
    programs = ("jit_step_fun", "jit_compute_logits_func", "jit_sample")
    analysis = traceview.load(_vllm_like_trace(tmp_path, programs, 4))
    report = analysis.inference()
    assert not report.phases
    text = report.warnings[-1]
    assert "Programs that ran: none" not in text
    assert all(f"{name} (x4 per device)" in text for name in programs), text
    assert "--hlo DIR" in text
    parallel = analysis.parallelism()
    assert any(all(name in w for name in programs) and "--hlo DIR" in w for w in parallel.warnings), \
        parallel.warnings
