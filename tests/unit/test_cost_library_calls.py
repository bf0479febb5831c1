"""Library calls that XLA and XProf leave at zero FLOPs get real FLOPs from their shapes and configs.

Real instructions from the H100 (MaxText) and A100 (Pax) XLA dumps and the
AMD MI300X / MI355X traces; expected FLOPs are worked out by hand here from
the operand shapes (2*M*N*K), or, for a convolution, asked of XLA itself.
"""

from __future__ import annotations

import numpy as np
import pytest

from traceview.cost import instruction_costs, module_totals
from traceview.parsers.hlo.dump import load_hlo_modules
from traceview.parsers.hlo.proto import parse_hlo_proto
from traceview.parsers.hlo.text import parse_hlo_text


@pytest.fixture(scope="module")
def h100(shared_traces):
    mods, _ = load_hlo_modules(shared_traces / "NVIDIA-JAX-Toolbox" / "maxtext_fsdp4_h100" / "dump")
    return mods[0]


@pytest.fixture(scope="module")
def a100(shared_traces):
    mods, _ = load_hlo_modules(shared_traces / "NVIDIA-JAX-Toolbox" / "pax_fsdp4_a100_proc0" / "dump")
    return mods[0]


def _amd_module(shared_traces, trace: str, key_part: str):
    from traceview.parsers.xspace.reader import read_xplane

    data = read_xplane(shared_traces / "AMD-AGI-TraceLens" / trace)
    for key, blob in data.hlo_protos.items():
        if key_part in key:
            return parse_hlo_proto(blob, key)
    pytest.fail(f"{trace}: no HLO proto named like {key_part!r}")


def _row(df, name):
    rows = df[df["name"] == name]
    assert len(rows) == 1, f"{name}: {len(rows)} rows"
    return rows.iloc[0]


def _operand_dims(module, name):
    for comp in module.computations.values():
        by_name = comp.by_name()
        if name in by_name:
            return [by_name[o].shape.dims for o in by_name[name].operands]
    raise KeyError(name)


@pytest.mark.parametrize("name,lhs,rhs,m,n,k", [
    # bf16[4096,2560] x bf16[2560,1024], contracting lhs 1 / rhs 0 (inside a while body: x3 per step)
    ("custom-call.40.0.peeled_double_buffer", (4096, 2560), (2560, 1024), 4096, 1024, 2560),
    # batched: bf16[16,2048,128] x bf16[16,128,2048], batch 0, contracting lhs 2 / rhs 1
    ("custom-call.41.0.peeled_double_buffer", (16, 2048, 128), (16, 128, 2048), 16 * 2048, 2048, 128),
    # beta=1 GEMM with a C operand: the C accumulation is not a multiply-add
    ("cublas-gemm.2.0.peeled_double_buffer", (4096, 8192), (8192, 2560), 4096, 2560, 8192),
])
def test_h100_cublas_gemm_flops(h100, name, lhs, rhs, m, n, k):
    df = instruction_costs(h100)
    assert tuple(_operand_dims(h100, name)[:2]) == (lhs, rhs)
    row = _row(df, name)
    assert row["flops"] == 2 * m * n * k
    assert row["dtype"] == "bf16" and row["category"] == "custom-call" and not row["unknown"]


def test_a100_cublas_gemm_flops(a100):
    df = instruction_costs(a100)
    # logits GEMM: bf16[8192,50304] x bf16[50304,768]
    assert _operand_dims(a100, "custom-call.345.0") == [(8192, 50304), (50304, 768)]
    assert _row(df, "custom-call.345.0")["flops"] == 2 * 8192 * 768 * 50304
    assert not df[df["opcode"] == "custom-call"]["unknown"].any()


def test_a100_triton_gemm_fusions_count_their_dot(a100):
    """A ``__triton_gemm`` fusion's FLOPs are those of the dot inside, computed by hand from its shapes."""
    df = instruction_costs(a100)
    checked = 0
    for comp in a100.computations.values():
        for inst in comp.instructions:
            if inst.opcode != "fusion" or "__triton_gemm" not in (inst.backend_config or ""):
                continue
            fused = a100.computations[inst.called_computations[0]]
            by_name = fused.by_name()
            dots = [i for i in fused.instructions if i.opcode == "dot"]
            assert len(dots) == 1
            dot = dots[0]
            lhs = by_name[dot.operands[0]].shape.dims
            contracting = [int(x) for x in dot.attributes["lhs_contracting_dims"].strip("{}").split(",")]
            out = 1
            for d in dot.shape.dims:
                out *= d
            k = 1
            for c in contracting:
                k *= lhs[c]
            assert _row(df, inst.name)["flops"] >= 2 * out * k  # plus any elementwise epilogue
            assert _row(df, inst.name)["flops"] <= 2 * out * k + 4 * out
            checked += 1
    assert checked >= 10


def test_h100_address_computation_fusion_carries_its_gemm(h100):
    """cuBLAS calls wrapped in dynamic-slice ("address computation") custom fusions keep their FLOPs."""
    df = instruction_costs(h100)
    fusions = df[(df["opcode"] == "fusion") & (df["name"].str.startswith("address_computation"))]
    assert len(fusions) >= 4
    assert (fusions["flops"] > 0).all()
    assert (fusions["dtype"] == "bf16").all()


def test_h100_loop_multipliers(h100):
    """Rows inside the while loops carry their known trip counts (3 and 2 in this module)."""
    df = instruction_costs(h100)
    assert set(df["multiplier"].unique()) >= {1.0, 3.0, 2.0}
    gemm = _row(df, "custom-call.40.0.peeled_double_buffer")
    assert gemm["flops_per_step"] == gemm["flops"] * gemm["multiplier"]
    totals = module_totals(h100)
    assert totals["flops_per_step"] > totals["flops"]
    assert totals["flops_per_step"] == pytest.approx(df["flops_per_step"].sum(), rel=1e-9)


@pytest.mark.parametrize("program,m,n,k", [("jit_dot(21)", 1024, 1024, 1024), ("jit_dot(49)", 8192, 8192, 4096),
                                            ("jit_dot(79)", 16384, 4096, 1024)])
def test_amd_hipblaslt_gemm(shared_traces, program, m, n, k):
    module = _amd_module(shared_traces, "jax08_gemm/tw003.xplane.pb", program)
    df = instruction_costs(module)
    gemm = df[df["opcode"] == "custom-call"]
    assert len(gemm) == 1 and gemm.iloc[0]["flops"] == 2 * m * n * k


def test_amd_cudnn_conv_matches_xla_convolution(shared_traces):
    """MI300X ``__cudnn$convForward``: the same convolution costed by XLA's own analysis on the CPU."""
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    module = _amd_module(shared_traces, "jax_conv_minimal_08/tw003.xplane.pb", "forward_3d_conv")
    df = instruction_costs(module)
    conv = df[df["opcode"] == "custom-call"].iloc[0]
    assert _operand_dims(module, conv["name"]) == [(1, 16, 32, 60, 104), (5120, 16, 1, 2, 2)]

    # Same window (1x2x2, stride 1x2x2, pad 1 on every side) and extents, in the channels-last f32
    # form the CPU compiles without converts or transposes, so the module's FLOPs are the conv's alone.
    def f(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 2, 2), ((1, 1), (1, 1), (1, 1)),
                                            dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))

    x = jax.ShapeDtypeStruct((1, 32, 60, 104, 16), jnp.float32)
    w = jax.ShapeDtypeStruct((1, 2, 2, 16, 5120), jnp.float32)
    compiled = jax.jit(f).lower(x, w).compile()
    assert compiled.as_text().count(" convolution(") == 1 and " convert(" not in compiled.as_text()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    assert conv["flops"] == pytest.approx(cost["flops"], rel=1e-6)
    assert conv["shape"].startswith("(bf16[1,5120,34,31,53]")


def test_transformer_engine_attention(shared_traces):
    """MI355X Transformer Engine fused attention: B=2, H=16, S=2048, D=128, causal mask."""
    module = _amd_module(shared_traces, "te_fused_attn/934987a2fc2f.xplane.pb", "loss_fn")
    df = instruction_costs(module)
    gemm = 2 * 2 * 16 * 2048 * 2048 * 128          # one attention GEMM
    calls = df[df["opcode"] == "custom-call"]
    fwd = calls[calls["name"].str.startswith("te_fused_attn_forward")]
    bwd = calls[calls["name"].str.startswith("te_fused_attn_backward")]
    assert len(fwd) == 2 and len(bwd) == 2
    assert (fwd["flops"] == 2 * gemm * 0.5).all()     # Q.K^T and P.V, causal half
    assert (bwd["flops"] == 5 * gemm * 0.5).all()
    assert not df["unknown"].any()


_UNKNOWN_CALL = """HloModule m, entry_computation_layout={(f32[8,8]{1,0})->f32[8,8]{1,0}}

ENTRY %main (p: f32[8,8]) -> f32[8,8] {
  %p = f32[8,8]{1,0} parameter(0)
  ROOT %k = f32[8,8]{1,0} custom-call(%p), custom_call_target="my_secret_kernel"
}
"""


def test_unknown_custom_call_gets_lower_bound_bytes_not_flops():
    """A kernel nobody describes must at least read its operand and write its result (issue 12):
    f32[8,8] = 256 B each way. Its FLOPs are not known: NaN (never 0), marked as a lower bound, named
    in a warning; the module, whose only work it is, has no FLOP total (None) and names it."""
    module = parse_hlo_text(_UNKNOWN_CALL)
    df = instruction_costs(module)
    row = _row(df, "k")
    assert not row["unknown"] and row["cost_lower_bound"] and np.isnan(row["flops"])
    totals = module_totals(module)
    assert totals["flops"] is None and totals["flops_per_step"] is None and totals["flops_unknown_ops"] == ["k"]
    assert (row["bytes_read"], row["bytes_written"], row["bytes_accessed"]) == (256, 256, 512)
    assert any("my_secret_kernel" in w and "lower bound" in w and " k" in w for w in df.attrs["warnings"])
    assert any("my_secret_kernel" in w for w in df.attrs["warnings"])
    assert any("my_secret_kernel" in w for w in module_totals(module)["warnings"])


_FMHA = """HloModule fmha, entry_computation_layout={(bf16[2,512,8,64]{3,2,1,0}, bf16[2,512,8,64]{3,2,1,0}, bf16[2,512,8,64]{3,2,1,0})->bf16[2,8,512,64]{3,1,2,0}}

ENTRY %main (q: bf16[2,512,8,64], k: bf16[2,512,8,64], v: bf16[2,512,8,64]) -> bf16[2,8,512,64] {
  %q = bf16[2,512,8,64]{3,2,1,0} parameter(0)
  %k = bf16[2,512,8,64]{3,2,1,0} parameter(1)
  %v = bf16[2,512,8,64]{3,2,1,0} parameter(2)
  %fmha = (bf16[2,8,512,64]{3,1,2,0}, u8[0]{0}) custom-call(%q, %k, %v), custom_call_target="__cudnn$fmhaSoftmax", backend_config={"cudnn_fmha_backend_config":{"fmha_scale":0.125,"dropout_rate":0,"mask_type":"%MASK%","bmm1_dot_dimension_numbers":{"lhs_contracting_dimensions":["3"],"rhs_contracting_dimensions":["3"],"lhs_batch_dimensions":["0","2"],"rhs_batch_dimensions":["0","2"]},"bmm2_dot_dimension_numbers":{"lhs_contracting_dimensions":["3"],"rhs_contracting_dimensions":["1"],"lhs_batch_dimensions":["0","1"],"rhs_batch_dimensions":["0","2"]},"intermediate_tensor_shape":{"element_type":"BF16","dimensions":["2","8","512","512"]}}}
  ROOT %out = bf16[2,8,512,64]{3,1,2,0} get-tuple-element(%fmha), index=0
}
"""


@pytest.mark.parametrize("mask,factor", [("NO_MASK", 1.0), ("CAUSAL", 0.5)])
def test_cudnn_fmha_forward(mask, factor):
    """B=2, H=8, S=512, D=64: Q.K^T and P.V, each 2*B*H*S*S*D FLOPs."""
    df = instruction_costs(parse_hlo_text(_FMHA.replace("%MASK%", mask)))
    row = _row(df, "fmha")
    assert row["flops"] == 2 * (2 * 2 * 8 * 512 * 512 * 64) * factor
    assert row["dtype"] == "bf16" and not row["unknown"]
