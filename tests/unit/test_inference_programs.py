"""traceview.inference: serving programs read from HLO text, module calls from an op table, the roofline.

The HLO here is written by hand in XLA's text syntax for the shapes a serving loop takes that the CPU
sample does not: a paged cache written by scatter, a cache update inside a multi-output fusion, a cache
that is updated but not donated, and a program with no cache at all.
"""

from __future__ import annotations

import pandas as pd
import pytest

from traceview.inference import roofline
from traceview.inference.executions import module_calls
from traceview.inference.programs import read_program
from traceview.parsers.hlo.attributes import input_output_alias
from traceview.parsers.hlo.text import read_hlo_text

PAGED = """HloModule jit_paged_decode, input_output_alias={ {1}: (1, {}, may-alias) }

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  w = s8[256,256]{1,0} parameter(0)
  pages = bf16[512,16,256]{2,1,0} parameter(1)
  tok = s32[8]{0} parameter(2)
  slots = s32[8,1]{1,0} parameter(3)
  x = bf16[8,256]{1,0} convert(tok)
  upd = bf16[8,1,16,256]{3,2,1,0} broadcast(x), dimensions={0,3}
  sc = bf16[512,16,256]{2,1,0} scatter(pages, slots, upd), update_window_dims={1,2,3}, inserted_window_dims={}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
  ROOT t = (bf16[8,256]{1,0}, bf16[512,16,256]{2,1,0}) tuple(x, sc)
}
"""

FUSED = """HloModule jit_step

fused {
  p0 = f32[4,64,8]{2,1,0} parameter(0)
  p1 = f32[4,1,8]{2,1,0} parameter(1)
  p2 = s32[] parameter(2)
  z = s32[] constant(0)
  d = f32[4,64,8]{2,1,0} dynamic-update-slice(p0, p1, z, p2, z)
  n = f32[4,1,8]{2,1,0} negate(p1)
  ROOT r = (f32[4,1,8]{2,1,0}, f32[4,64,8]{2,1,0}) tuple(n, d)
}

ENTRY main {
  cache = f32[4,64,8]{2,1,0} parameter(0)
  new = f32[4,1,8]{2,1,0} parameter(1)
  pos = s32[] parameter(2)
  f = (f32[4,1,8]{2,1,0}, f32[4,64,8]{2,1,0}) fusion(cache, new, pos), kind=kLoop, calls=fused
  out = f32[4,64,8]{2,1,0} get-tuple-element(f), index=1
  b = f32[4,64,8]{2,1,0} bitcast(out)
  ROOT t = (f32[4,64,8]{2,1,0}) tuple(b)
}
"""

PLAIN = """HloModule jit_f, input_output_alias={ {0}: (0, {}, may-alias) }

ENTRY main {
  w = f32[128,128]{1,0} parameter(0)
  c = f32[] constant(1)
  b = f32[128,128]{1,0} broadcast(c), dimensions={}
  ROOT a = f32[128,128]{1,0} add(w, b)
}
"""


def _program(tmp_path, text: str):
    path = tmp_path / "m.txt"
    path.write_text(text)
    return read_program(read_hlo_text(path))


def test_a_paged_cache_written_by_scatter_is_a_cache_with_no_sequence_dim(tmp_path):
    program = _program(tmp_path, PAGED)
    (cache,) = program.caches
    assert (cache.number, cache.aliased, cache.output) == (1, True, 1)
    assert [w.opcode for w in cache.writes] == ["scatter"]
    assert program.paged and program.sequence_dim is None and program.max_sequence_length is None
    # int8 weights are weights, not tokens; the rank-1 s32 input is the tokens (one per sequence)
    assert [p.number for p in program.weights] == [0] and program.weight_bytes == 256 * 256
    assert program.tokens.number == 2 and program.batch == 8 and program.tokens_per_sequence == 1
    assert [p.role for p in program.parameters] == ["weight", "kv_cache", "tokens", "position"]
    assert program.kv_cache_bytes == 512 * 16 * 256 * 2


def test_a_cache_updated_inside_a_multi_output_fusion_and_not_donated(tmp_path):
    program = _program(tmp_path, FUSED)
    (cache,) = program.caches
    assert cache.number == 0 and not cache.aliased and cache.output == 0
    assert [w.update_dims for w in cache.writes] == [(4, 1, 8)]
    # no token input: the tokens per sequence come from the write's size along the sequence dim
    assert program.tokens is None and program.batch is None
    assert program.sequence_dim == 1 and program.tokens_per_sequence == 1 and program.max_sequence_length == 64


def test_a_donated_buffer_that_is_not_written_in_place_is_not_a_cache(tmp_path):
    program = _program(tmp_path, PLAIN)
    assert program.caches == [] and program.weight_bytes == 128 * 128 * 4


def test_input_output_alias_reads_xla_text():
    assert input_output_alias("{ {1}: (19, {}, may-alias), {2}: (20, {}, must-alias) }") == {1: 19, 2: 20}
    assert input_output_alias("{ {}: (0, {}, may-alias) }") == {0: 0}
    assert input_output_alias("") == {} == input_output_alias(None)


def test_module_calls_split_interleaved_threads_at_each_calls_earliest_op():
    # two calls of m; its ops run on two threads, and the thread that starts first differs per call
    rows = []
    for t0, order in [(0, ("a", "b")), (1000, ("b", "a"))]:
        for i, op in enumerate(order):
            rows.append({"module": "m", "program_id": 7, "device": "h/CPU:0", "op": op,
                         "start_ps": (t0 + 10 * i) * 1_000_000, "duration_ps": 100_000_000})
        rows.append({"module": "m", "program_id": 7, "device": "h/CPU:0", "op": "c",
                     "start_ps": (t0 + 300) * 1_000_000, "duration_ps": 50_000_000})
    calls = module_calls(pd.DataFrame(rows))
    assert list(calls["call"]) == [0, 1]
    assert list(calls["start_us"]) == [0.0, 1000.0]
    assert list(calls["time_us"]) == [350.0, 350.0]


def test_the_books_critical_batch_on_tpu_v5e():
    # "How to Scale Your Model" ch. 7: bf16 weights on a v5e, 1.97e14 / 8.1e11 ~ 240
    assert roofline.critical_batch(1.97e14, 8.1e11, 2.0) == pytest.approx(243.2, abs=0.1)
    assert roofline.critical_batch(1.97e14, 8.1e11, 1.0) == pytest.approx(121.6, abs=0.1)   # int8 weights


def test_decode_floor_takes_the_slower_side_and_the_kv_crossover():
    f = roofline.decode_floor(2e9, 1e9, 1e9, 1e14, 1e12)           # 20 us of math, 2 ms of bytes
    assert (f.floor_s, f.bound) == (pytest.approx(2e-3), "memory")
    # 2e9 FLOPs per sequence (20 us) against 1e6 KV bytes per sequence (1 us): the crossover exists
    b = roofline.critical_batch_with_kv(1e9, 2e9, 1e6, 1e14, 1e12)
    assert b == pytest.approx(1e-3 / (2e-5 - 1e-6))
    assert roofline.decode_floor(b * 2e9, 1e9, b * 1e6, 1e14, 1e12).compute_s == pytest.approx(
        roofline.decode_floor(b * 2e9, 1e9, b * 1e6, 1e14, 1e12).memory_s)
    assert roofline.critical_batch_with_kv(1e9, 2e9, 1e8, 1e14, 1e12) is None


def test_without_token_counts_the_program_called_most_is_the_decode_step():
    from traceview.inference.programs import CacheWrite, Parameter, Program
    from traceview.inference.view import InferenceReport, _recognise
    from traceview.parsers.hlo.model import Shape

    def paged(name: str) -> Program:
        pages = Parameter(1, "pages", Shape("bf16", (64, 16, 128)), 64 * 16 * 128 * 2, role="kv_cache",
                          output=0, aliased=True, writes=[CacheWrite("scatter", (8, 16, 128))])
        return Program(name, None, [Parameter(0, "w", Shape("bf16", (128, 128)), 128 * 128 * 2), pages])

    def calls(name: str, starts: list[float]) -> pd.DataFrame:
        return pd.DataFrame({"module": name, "program_id": -1, "device": "d", "call": range(len(starts)),
                             "start_us": starts, "time_us": 1.0})

    report = InferenceReport([], [], None)
    _recognise(report, [(paged("step"), calls("step", [10.0, 20.0, 30.0])), (paged("fill"), calls("fill", [0.0]))])
    assert [(p.phase, p.module) for p in report.phases] == [("prefill", "fill"), ("decode", "step")]
    decode = report.phase("decode")
    assert any("called most often" in line for line in decode.recognised_by)
    assert any("paged or ragged" in line for line in decode.recognised_by)
    assert any("before the first call of the decode step" in line for line in report.phase("prefill").recognised_by)
