"""K/V found by data flow (traceview.parallelism.kvflow) in hand-written HLO: an unrolled ring read by a fused
attention kernel (no loop, no dot), the K half of a stacked K/V buffer, and permutes that no attention reads."""

from __future__ import annotations

from traceview.parallelism.diagnose import DiagnoseInputs, diagnose
from traceview.parsers.hlo.text import parse_hlo_text

PAIRS = "source_target_pairs={{0,1},{1,2},{2,3},{3,0}}"

UNROLLED_INTO_KERNEL = f"""HloModule unrolled_kernel, num_partitions=4

ENTRY %main (q: bf16[1,128,8,64], k: bf16[1,128,2,64], v: bf16[1,128,2,64]) -> bf16[1,128,8,64] {{
  %q = bf16[1,128,8,64]{{3,2,1,0}} parameter(0)
  %k = bf16[1,128,2,64]{{3,2,1,0}} parameter(1)
  %v = bf16[1,128,2,64]{{3,2,1,0}} parameter(2)
  %o0 = (bf16[1,128,8,64]{{3,2,1,0}}, u8[0]{{0}}) custom-call(%q, %k, %v), custom_call_target="__cudnn$fmhaSoftmax"
  %k1 = bf16[1,128,2,64]{{3,2,1,0}} collective-permute(%k), channel_id=1, {PAIRS}
  %v1 = bf16[1,128,2,64]{{3,2,1,0}} collective-permute(%v), channel_id=2, {PAIRS}
  %o1 = (bf16[1,128,8,64]{{3,2,1,0}}, u8[0]{{0}}) custom-call(%q, %k1, %v1), custom_call_target="__cudnn$fmhaSoftmax"
  %k2 = bf16[1,128,2,64]{{3,2,1,0}} collective-permute(%k1), channel_id=3, {PAIRS}
  %v2 = bf16[1,128,2,64]{{3,2,1,0}} collective-permute(%v1), channel_id=4, {PAIRS}
  %o2 = (bf16[1,128,8,64]{{3,2,1,0}}, u8[0]{{0}}) custom-call(%q, %k2, %v2), custom_call_target="__cudnn$fmhaSoftmax"
  ROOT %out = bf16[1,128,8,64]{{3,2,1,0}} get-tuple-element(%o2), index=0
}}
"""

STACKED_INTO_DOT = f"""HloModule stacked_dot, num_partitions=4

ENTRY %main (q: f32[2,4,32,16], kv: f32[2,2,32,4,16]) -> f32[2,4,32,32] {{
  %q = f32[2,4,32,16]{{3,2,1,0}} parameter(0)
  %kv = f32[2,2,32,4,16]{{4,3,2,1,0}} parameter(1)
  %kv1 = f32[2,2,32,4,16]{{4,3,2,1,0}} collective-permute(%kv), channel_id=1, {PAIRS}
  %ks = f32[1,2,32,4,16]{{4,3,2,1,0}} slice(%kv1), slice={{[0:1], [0:2], [0:32], [0:4], [0:16]}}
  %k = f32[2,32,4,16]{{3,2,1,0}} bitcast(%ks)
  %kt = f32[2,4,32,16]{{3,2,1,0}} transpose(%k), dimensions={{0,2,1,3}}
  ROOT %s = f32[2,4,32,32]{{3,2,1,0}} dot(%q, %kt), lhs_batch_dims={{0,1}}, lhs_contracting_dims={{3}}, rhs_batch_dims={{0,1}}, rhs_contracting_dims={{3}}
}}
"""


def test_an_unrolled_ring_read_by_a_fused_kernel_is_context_parallel():
    report = diagnose(DiagnoseInputs([parse_hlo_text(UNROLLED_INTO_KERNEL)]))
    assert [c.pattern for c in report.collectives] == ["K/V ring pass"] * 4
    (axis,) = report.axes
    assert [r.role for r in axis.roles] == ["context"] and axis.pipeline is None
    shape = axis.context.attention
    # [batch, sequence, heads, head dim]: 128 queries, head dim 64, 8 query heads on 2 K/V heads
    assert (shape.seq_per_chip, shape.head_dim, shape.heads_per_kv_head) == (128, 64, 4)
    # two chains (K and V) of two hops; one hop moves a K and a V block of 1 x 128 x 2 x 64 bf16
    assert axis.context.passes == 2 and axis.context.bytes_per_pass == 2 * 128 * 2 * 64 * 2
    assert any("fused attention kernel" in line for line in axis.roles[0].evidence)


def test_the_k_half_of_a_stacked_buffer_read_by_a_dot():
    report = diagnose(DiagnoseInputs([parse_hlo_text(STACKED_INTO_DOT)]))
    (axis,) = report.axes
    assert axis.role.role == "context"
    shape = axis.context.attention
    # the K half [2, 32, 4, 16] of the stacked buffer, 4 heads each side: H/H_kv = 1
    assert (shape.seq_per_chip, shape.head_dim, shape.heads_per_kv_head) == (32, 16, 1)


def test_a_permute_no_attention_reads_gets_no_role():
    text = UNROLLED_INTO_KERNEL.replace('custom_call_target="__cudnn$fmhaSoftmax"', 'custom_call_target="__cublas$gemm"')
    report = diagnose(DiagnoseInputs([parse_hlo_text(text)]))
    assert all(c.pattern == "point-to-point" for c in report.collectives)
    assert all(not a.roles for a in report.axes)
