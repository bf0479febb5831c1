"""FLOP counts of contractions, as XLA's HloCostAnalysis counts them (one FMA = 2 FLOPs).

Shared by the HLO rules (dot, convolution) and the library-call rules
(cuBLAS/hipBLASLt GEMMs, cuDNN convolutions and attention), so every path
counts a contraction the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from traceview.parsers.hlo.attributes import ConvDims, WindowDim

FMA_FLOPS = 2


def dot_flops(lhs_dims: Sequence[int], out_elements: int, lhs_contracting: Sequence[int]) -> int:
    """2 x output elements x product of the lhs contracting dimensions."""
    width = 1
    for d in lhs_contracting:
        width *= lhs_dims[d]
    return FMA_FLOPS * out_elements * width


def _valid_positions(in_n: int, k_n: int, out_n: int, w: WindowDim) -> int:
    """(kernel tap, output position) pairs that read a real (not padding, not dilation-hole) input."""
    if (in_n == out_n and k_n == out_n and in_n == w.lhs_dilate and w.rhs_dilate == 1
            and max(1, in_n - 1) == w.stride and w.pad_low == 0 and w.pad_high == 0):
        return in_n
    if (in_n == 1 and k_n == out_n and w.rhs_dilate == 1 and w.lhs_dilate == 1 and w.stride == 1
            and w.pad_high == out_n - 1 and w.pad_low == out_n - 1):
        return out_n
    count = 0
    for k in range(k_n):
        if w.stride == 1 and w.lhs_dilate == 1:
            base = w.pad_low - k * w.rhs_dilate
            count += max(min(in_n + base, out_n) - max(base, 0), 0)
            continue
        for o in range(out_n):
            undilated = o * w.stride - w.pad_low + k * w.rhs_dilate
            if undilated % w.lhs_dilate:
                continue
            idx = undilated // w.lhs_dilate
            if 0 <= idx < in_n:
                count += 1
    return count


def conv_flops(lhs_dims: Sequence[int], rhs_dims: Sequence[int], out_dims: Sequence[int],
               dims: ConvDims, window: Sequence[WindowDim],
               feature_group_count: int = 1, batch_group_count: int = 1) -> int:
    """Convolution FLOPs counting only multiply-adds that touch real input elements.

    Padding and lhs (base) dilation holes are skipped per spatial dimension,
    as XLA's GetConvolutionFlops does; feature and batch groups divide the
    input feature and batch extents.
    """
    input_feature = lhs_dims[dims.input_feature]
    output_feature = out_dims[dims.output_feature]
    batch = lhs_dims[dims.input_batch]
    positions = []
    if not window:
        positions.append(1)
    for i, w in enumerate(window):
        positions.append(_valid_positions(lhs_dims[dims.input_spatial[i]], rhs_dims[dims.kernel_spatial[i]],
                                          out_dims[dims.output_spatial[i]], w))
    fma = ((input_feature // max(feature_group_count, 1)) * output_feature
           * (batch // max(batch_group_count, 1)) * math.prod(positions))
    return FMA_FLOPS * fma
