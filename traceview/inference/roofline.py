"""The book's inference roofline ("How to Scale Your Model", ch. 7), as plain functions of a step's figures.

Per decode step the chip must do the step's FLOPs and read every weight and the whole KV cache from HBM:

    floor = max(FLOPs / peak, (weight bytes + KV-cache bytes) / HBM bandwidth)

A prefill step is taken to be compute-bound: floor = FLOPs / peak. Decode turns compute-bound above the
critical batch, where the matmuls' 2 FLOPs per weight per sequence take as long as loading the weight:

    critical batch = peak * bytes per weight / (2 * HBM bandwidth)

(bf16 weights on a TPU v5e: 1.97e14 * 2 / (2 * 8.1e11) = 243 sequences; int8 or fp8 weights halve it).
Counting the KV cache too, each extra sequence adds its cache reads, and the crossover is

    batch* = (weight bytes / BW) / (FLOPs per sequence / peak - KV bytes per sequence / BW)

which does not exist when a sequence's cache takes longer to read than its FLOPs take to compute.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Floor:
    """One step's lower bound on a chip (seconds), and which side bounds it."""

    compute_s: float
    memory_s: float
    floor_s: float
    bound: str          # "compute" | "memory"


def decode_floor(flops: float, weight_bytes: float, kv_bytes: float, peak: float, bandwidth: float) -> Floor:
    compute, memory = flops / peak, (weight_bytes + kv_bytes) / bandwidth
    return Floor(compute, memory, max(compute, memory), "compute" if compute >= memory else "memory")


def prefill_floor(flops: float, weight_bytes: float, kv_bytes: float, peak: float, bandwidth: float) -> Floor:
    return Floor(flops / peak, (weight_bytes + kv_bytes) / bandwidth, flops / peak, "compute")


def critical_batch(peak: float, bandwidth: float, bytes_per_weight: float) -> float:
    """Sequences per decode step above which the weight matmuls are compute-bound (the book's B_crit)."""
    return peak * bytes_per_weight / (2.0 * bandwidth)


def critical_batch_with_kv(weight_bytes: float, flops_per_sequence: float, kv_bytes_per_sequence: float,
                           peak: float, bandwidth: float) -> float | None:
    """The crossover batch counting each sequence's KV-cache reads; None when there is none."""
    per_sequence = flops_per_sequence / peak - kv_bytes_per_sequence / bandwidth
    if per_sequence <= 0:
        return None
    return (weight_bytes / bandwidth) / per_sequence


def projected_step(batch: float, measured_batch: int, flops: float, weight_bytes: float, kv_bytes: float,
                   peak: float, bandwidth: float) -> Floor:
    """The decode floor at another batch: FLOPs and KV-cache bytes scale with the batch, weights do not."""
    scale = batch / measured_batch
    return decode_floor(flops * scale, weight_bytes, kv_bytes * scale, peak, bandwidth)
