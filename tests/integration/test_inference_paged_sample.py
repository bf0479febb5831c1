"""traceview inference on the paged-attention serving sample: a page table, a ragged batch mixing prefill and
decode tokens, and a decode-only step, all worked by hand from the capture's configuration (capture.json)."""

from __future__ import annotations

import json

import pytest

import traceview
from traceview.render.inference import inference_json


@pytest.fixture(scope="module")
def paged(sample_traces):
    root = sample_traces / "paged_serving"
    meta = json.loads((root / "capture.json").read_text())
    return meta, traceview.load(root, target="tpu-v5e").inference()


def test_kv_bytes_per_token_pages_and_sequences_by_hand(paged):
    meta, report = paged
    cfg = meta["config"]
    head_dim = cfg["d_model"] // cfg["heads"]
    # K and V of every layer: kv_heads x head_dim bf16 (2 bytes) per token
    hand = 2 * cfg["layers"] * cfg["kv_heads"] * head_dim * 2
    assert hand == 256 and report.kv_bytes_per_token == hand
    for phase in report.phases:
        paging = phase.program.paging
        assert (paging.pages, paging.page_size) == (cfg["pages"], cfg["page_size"])
        assert (paging.sequences, paging.pages_per_sequence) == (cfg["sequences"], cfg["pages_per_sequence"])
        assert paging.slots == cfg["pages"] * cfg["page_size"]
    # sequences of the longest length the table addresses that fit beside the weights in a v5e's 16 GB
    decode = report.phase("decode")
    longest = cfg["pages_per_sequence"] * cfg["page_size"]
    assert report.max_sequences == int((16e9 - decode.program.weight_bytes) // (hand * longest))


def test_the_ragged_step_mixes_prefill_and_decode_tokens(paged):
    meta, report = paged
    cfg = meta["config"]
    mixed, decode = report.phase("mixed"), report.phase("decode")
    assert mixed is not None and decode is not None
    assert mixed.module == "jit_mixed_step" and decode.module == "jit_decode_step"
    # the mixed step's tokens: the prompts prefilled, one token for every other sequence, padded to the bucket
    prompts = cfg["prompts"]
    assert sum(prompts) + cfg["sequences"] - len(prompts) <= cfg["mixed_tokens"] == mixed.tokens_per_step
    assert len(meta["mixed_batch"]) == sum(prompts) + cfg["sequences"] - len(prompts)
    assert mixed.batch == decode.batch == cfg["sequences"]
    assert decode.tokens_per_step == cfg["sequences"] and decode.tokens_per_sequence == 1
    assert mixed.tokens_per_sequence is None           # the tokens per sequence vary within the step
    assert mixed.steps == meta["calls"].count("mixed") and decode.steps == meta["calls"].count("decode")
    assert any("ragged batch mixing prefill and decode" in e for e in mixed.recognised_by)
    assert any("page table page_table" in e for e in decode.recognised_by)
    record = inference_json(report)
    phase = next(p for p in record["phases"] if p["phase"] == "mixed")
    assert phase["paging"]["mixed"] is True and phase["paging"]["tokens_per_step"] == cfg["mixed_tokens"]
    assert record["kv_bytes_per_token"] == 256
