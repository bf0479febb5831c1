"""FLOPs of library custom calls that XLA's own cost analysis (and XProf) leave at zero.

Recognised calls, FLOPs from operand shapes and the call's backend_config:

* cuBLAS / cuBLASLt / hipBLASLt / rocBLAS GEMMs (``__cublas$gemm``,
  ``__cublas$lt$matmul``, ``__cublas$lt$matmul$f8``, ROCm spellings):
  2 x output elements x contracting extent, from
  ``gemm_backend_config.dot_dimension_numbers`` (as XLA counts a dot).
* cuDNN / MIOpen convolutions (``__cudnn$conv*``): XLA's convolution count,
  with input/filter/output taken from the operands or the result according to
  the direction (forward, backward-input, backward-filter).
* cuDNN fused attention (``__cudnn$fmha*``) and Transformer Engine attention
  (``te_fused_attn_forward/backward*``): the two GEMMs of the forward pass
  (Q.K^T and P.V), five for the backward pass (P recomputed, dV, dP, dQ, dK),
  each 2 x B x H x Sq x Skv x D; Transformer Engine's causal masks halve it.
* Pallas / Mosaic calls (``tpu_custom_call``, Triton / Mosaic GPU kernels)
  whose backend_config carries the author's ``cost_estimate`` (JAX writes
  ``{"custom_call_config": {..., "cost_estimate": {"flops", "transcendentals",
  "bytes_accessed", ...}}}``): FLOPs and bytes as given. XLA itself reports
  nothing for these calls, so traceview deliberately differs from it here.
* Block-scaled dots (``__op$block_scaled_dot``, ``__cudnn$blockScaledDot``):
  2 x output elements x the contracting (last) dimension of lhs.
* Compiler annotations (``AssumeGatherIndicesInBound``, sharding markers):
  no work.

Anything else returns None: the caller marks it unknown.
"""

from __future__ import annotations

import math
import re
from typing import Any

from traceview.cost.flops import conv_flops, dot_flops
from traceview.cost.record import Cost
from traceview.cost.shapes import byte_size, elements, leaves
from traceview.parsers.hlo.model import Instruction, Shape

_GEMM_RE = re.compile(r"^__(cublas|hipblas|rocblas)(lt)?\$", re.I)
_CONV_RE = re.compile(r"^__(cudnn|miopen)\$conv", re.I)
_FMHA_RE = re.compile(r"^__cudnn\$fmha", re.I)
_TE_ATTN_RE = re.compile(r"^te_fused_attn_(forward|backward)", re.I)
# Block-scaled (MX / NVFP4) dots: XLA's composite target and the cuDNN call it is rewritten into.
_BLOCK_SCALED_RE = re.compile(r"^__(op\$block_scaled_dot|cudnn\$blockScaledDot)$")
_MLIR_ATTR_RE = re.compile(r"(\w+)\s*=\s*([^,{}]+)")
# Transformer Engine mask types (NVTE_Mask_Type) under which the kernel skips the masked half.
_TE_CAUSAL_MASKS = {2, 3, 4, 5}
# GEMMs of one attention pass: forward Q.K^T and P.V; flash-attention backward
# recomputes P and runs dV, dP, dQ, dK (the usual "backward = 2.5 x forward").
_ATTN_GEMMS = {False: 2, True: 5}
# Compiler annotations that pass their operand through and emit no work.
_ANNOTATIONS = frozenset({"AssumeGatherIndicesInBound", "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
                          "LayoutConstraint"})


def is_library_call(target: str | None) -> bool:
    """True for the GEMM, convolution and attention calls whose math type is their input's."""
    t = target or ""
    return bool(_GEMM_RE.match(t) or _CONV_RE.match(t) or _FMHA_RE.match(t) or _TE_ATTN_RE.match(t)
                or _BLOCK_SCALED_RE.match(t))


def library_call_cost(inst: Instruction, operands: list[Shape]) -> Cost | None:
    """Cost of a recognised library custom call, or None when the target is not known."""
    target = inst.custom_call_target or ""
    if target in _ANNOTATIONS:
        return Cost(note=f"compiler annotation {target}: no work")
    config = inst.typed.backend_config
    if _GEMM_RE.match(target):
        return _gemm(inst, operands, config)
    if _CONV_RE.match(target):
        return _conv(inst, operands, target)
    if _FMHA_RE.match(target):
        return _fmha(inst, operands, config, target)
    if _TE_ATTN_RE.match(target):
        return _te_attention(inst, operands, target)
    if _BLOCK_SCALED_RE.match(target):
        return _block_scaled_dot(inst, operands)
    estimate = _cost_estimate(config, operands, kernel_outputs(inst))
    if estimate is not None:
        return estimate
    return None


def kernel_outputs(inst: Instruction) -> list[Shape]:
    """Result arrays without a trailing scratch workspace (u8/s8 vector at the end of a tuple)."""
    outs = leaves(inst.shape)
    if inst.shape.is_tuple and len(outs) > 1 and outs[-1].element_type in ("u8", "s8") and len(outs[-1].dims) == 1:
        outs = outs[:-1]
    return outs


def _io(operands: list[Shape], outs: list[Shape], flops: float, note: str) -> Cost:
    read = float(sum(byte_size(s) for s in operands if not s.is_tuple))
    written = float(sum(byte_size(s) for s in outs))
    return Cost(flops, 0.0, read, written, read + written, False, note)


def _dims(dnums: dict[str, Any], key: str) -> list[int]:
    return [int(x) for x in dnums.get(key, []) or []]


def _gemm(inst: Instruction, operands: list[Shape], config: dict) -> Cost | None:
    gemm = config.get("gemm_backend_config", config)
    dnums = gemm.get("dot_dimension_numbers")
    outs = kernel_outputs(inst)
    if not isinstance(dnums, dict) or not operands or not outs:
        return None
    flops = dot_flops(operands[0].dims, elements(outs[0]), _dims(dnums, "lhs_contracting_dimensions"))
    note = "library GEMM: 2*M*N*K from gemm_backend_config"
    beta = float(gemm.get("beta", 0) or 0)
    if beta:
        note += f" (beta={beta:g}: the C accumulation is not counted)"
    return _io(operands, outs, flops, note)


def _conv(inst: Instruction, operands: list[Shape], target: str) -> Cost | None:
    dims = inst.typed.conv_dims
    outs = kernel_outputs(inst)
    if dims is None or len(operands) < 2 or not outs:
        return None
    if "BackwardInput" in target:        # result = input gradient; operands: output grad, filter
        lhs, rhs, out = outs[0], operands[1], operands[0]
    elif "BackwardFilter" in target:     # result = filter gradient; operands: input, output grad
        lhs, rhs, out = operands[0], outs[0], operands[1]
    else:                                # forward (and fused bias/activation forward)
        lhs, rhs, out = operands[0], operands[1], outs[0]
    flops = conv_flops(lhs.dims, rhs.dims, out.dims, dims, inst.typed.window,
                       inst.typed.feature_group_count,
                       inst.typed.batch_group_count)
    return _io(operands, outs, flops, f"library convolution ({target})")


def _fmha(inst: Instruction, operands: list[Shape], config: dict, target: str) -> Cost | None:
    fmha = config.get("cudnn_fmha_backend_config", config)
    inter = fmha.get("intermediate_tensor_shape", {})
    inter_dims = [int(d) for d in inter.get("dimensions", [])] if isinstance(inter, dict) else []
    outs = kernel_outputs(inst)
    if not inter_dims or len(operands) < 3 or not outs or not operands[0].dims:
        return None
    # One attention GEMM: 2 x (B*H*Sq*Skv) x head dim; the head dim is what Q.K^T contracts
    # (cuDNN keeps it innermost in Q, which the backward config does not restate).
    bmm1 = fmha.get("bmm1_dot_dimension_numbers")
    q = operands[0].dims
    contracting = _dims(bmm1, "lhs_contracting_dimensions") if isinstance(bmm1, dict) else []
    head = math.prod(q[d] for d in contracting if d < len(q)) if contracting else q[-1]
    backward = "Backward" in target
    flops = float(_ATTN_GEMMS[backward] * 2 * math.prod(inter_dims) * head)
    note = f"cuDNN fused attention: {_ATTN_GEMMS[backward]} GEMMs of 2*B*H*Sq*Skv*D"
    if "CAUSAL" in str(fmha.get("mask_type", "")).upper() or fmha.get("is_causal_mask") is True:
        flops *= 0.5
        note += ", halved for the causal mask"
    return _io(operands, outs, flops, note)


def _te_attention(inst: Instruction, operands: list[Shape], target: str) -> Cost | None:
    """Transformer Engine fused attention: sizes from the call's MLIR attribute dictionary."""
    fields = {k: v.split(":")[0].strip() for k, v in _MLIR_ATTR_RE.findall(inst.backend_config or "")}
    try:
        b, h = int(fields["input_batch"]), int(fields["attn_heads"])
        sq, skv, d = int(fields["q_max_seqlen"]), int(fields["kv_max_seqlen"]), int(fields["qk_head_dim"])
        dv = int(fields.get("v_head_dim", d))
        mask = int(fields.get("mask_type", 0))
    except (KeyError, ValueError):
        return None
    backward = "backward" in target
    per_gemm = b * h * sq * skv * (d + dv)          # one GEMM, 2*B*H*Sq*Skv*D, averaged over D and Dv
    flops = float(_ATTN_GEMMS[backward] * per_gemm)
    note = f"Transformer Engine attention: {_ATTN_GEMMS[backward]} GEMMs of 2*B*H*Sq*Skv*D"
    if mask in _TE_CAUSAL_MASKS:
        flops *= 0.5
        note += ", halved for the causal mask"
    return _io(operands, kernel_outputs(inst), flops, note)


def _block_scaled_dot(inst: Instruction, operands: list[Shape]) -> Cost | None:
    """Operands (lhs, rhs, lhs_scale, rhs_scale[, global_scale]) contracting their last dimension,
    with batch dimension 0 at rank 3 (XLA's BlockScalingRewriter): 2 x output elements x K, as
    XLA's HandleScaledDot counts the dot it becomes; the scales are read, not multiplied."""
    outs = kernel_outputs(inst)
    if len(operands) < 3 or not outs or not operands[0].dims:
        return None
    flops = dot_flops(operands[0].dims, elements(outs[0]), [len(operands[0].dims) - 1])
    return _io(operands, outs, flops, "block-scaled dot: 2*M*N*K, K the last dimension of lhs")


def _cost_estimate(config: dict, operands: list[Shape], outs: list[Shape]) -> Cost | None:
    """A ``cost_estimate`` the kernel's author attached (Pallas ``pl.CostEstimate``).

    FLOPs, transcendentals and bytes accessed are the author's; the bytes are
    split into read and written in the ratio of the operand and result sizes,
    so read + written = accessed as for every other op.
    """
    for holder in (config, config.get("custom_call_config", {})):
        est = holder.get("cost_estimate") if isinstance(holder, dict) else None
        if isinstance(est, dict) and "flops" in est:
            try:
                flops = float(est.get("flops", 0))
                trans = float(est.get("transcendentals", 0))
                nbytes = float(est.get("bytes_accessed", 0))
            except (TypeError, ValueError):
                return None
            if not all(math.isfinite(v) and v >= 0 for v in (flops, trans, nbytes)):
                return None
            read = float(sum(byte_size(s) for s in operands if not s.is_tuple))
            written = float(sum(byte_size(s) for s in outs))
            share = read / (read + written) if read + written > 0 else 0.5
            return Cost(flops, trans, nbytes * share, nbytes * (1 - share), nbytes, False,
                        "cost_estimate given by the kernel's author")
    return None
