"""The book's cost models of a training step, as plain functions of a configuration.

Source: Austin et al., "How to Scale Your Model" (2025): chapter 5 "How to Parallelize a Transformer for
Training" (the collectives of each strategy and their crossovers), chapter 6 "Training LLaMA 3 on TPUs"
(6 P T FLOPs, training time at an MFU, memory of parameters and Adam state), chapter 3 "Sharded Matrices"
(an all-gather or reduce-scatter moves (n-1)/n of the gathered array per chip, an all-reduce twice that).
The what-if projection uses these as *ratios* against what the trace measured; a description of a model
alone (no trace) uses them as they stand. docs/whatif.md writes every formula out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SECONDS_PER_DAY = 86_400.0
ADAM_BYTES_PER_PARAM = 8      # two float32 moments (the book's 8 x params)

# How many times each role's collective moves its array per step, in units of (n-1)/n of the array:
# an all-gather or reduce-scatter moves (n-1)/n of the full array per chip, an all-reduce 2 (n-1)/n.
ALL_REDUCE_PASSES = 2.0


def ring_share(n: int) -> float:
    """(n-1)/n: the share of a gathered array each chip sends (or receives) in a ring all-gather."""
    return (n - 1) / n if n > 1 else 0.0


def training_flops(params: float, tokens: float) -> float:
    """6 P T: forward (2 P T) and backward (4 P T) FLOPs of a dense transformer step on T tokens."""
    return 6.0 * params * tokens


def training_seconds(total_flops: float, chips: int, peak_flops: float, mfu: float) -> float:
    """Wall time of a run of ``total_flops`` on ``chips`` chips at the given MFU."""
    return total_flops / (chips * peak_flops * mfu)


def parameter_ways(mesh: dict[str, int]) -> int:
    """The ways the parameters (and their gradients and optimizer state) are split: FSDP, tensor, pipeline
    and expert shard them; data and context parallelism replicate them."""
    return mesh.get("fsdp", 1) * mesh.get("tensor", 1) * mesh.get("pipeline", 1) * mesh.get("expert", 1)


def batch_ways(mesh: dict[str, int]) -> int:
    """The ways the tokens of a batch are split along the batch and sequence: data, FSDP, context, expert."""
    return mesh.get("data", 1) * mesh.get("fsdp", 1) * mesh.get("context", 1) * mesh.get("expert", 1)


def chips_of(mesh: dict[str, int]) -> int:
    return math.prod(mesh.values()) if mesh else 1


def collective_bytes(role: str, mesh: dict[str, int], batch_tokens: float, param_bytes: float,
                     activation_bytes_per_token: float) -> float:
    """Bytes one chip sends over the role's axis in one step, by the book's formula for that role.

    * data: all-reduce of the gradients the chip holds, 2 (n-1)/n x parameter bytes / (tensor x pipeline);
    * fsdp: all-gather of the parameters and reduce-scatter of their gradients, 2 (n-1)/n x parameter
      bytes / (tensor x pipeline) (the same volume as data parallelism, the book's point);
    * tensor: all-reduce (all-gather + reduce-scatter) of the activations around each matmul pair,
      2 (n-1)/n x per-chip tokens x bytes of activation per token crossing the axis;
    * context: the K/V ring, (n-1)/n of the K/V of the chip's batch rows;
    * expert: dispatch and combine all-to-alls, 2 (n-1)/n x per-chip tokens x activation bytes per token;
    * pipeline: the activations of the chip's rows passed to the next stage (forward) and their gradients
      back, 2 (n-1)/n x rows x bytes per token; small against its bubble, which :func:`bubble_fraction` is.
    """
    n = mesh.get(role, 1)
    if n <= 1:
        return 0.0
    share = ring_share(n)
    weights = param_bytes / (mesh.get("tensor", 1) * mesh.get("pipeline", 1) * mesh.get("expert", 1))
    rows = batch_tokens / (mesh.get("data", 1) * mesh.get("fsdp", 1))     # tokens of the chip's batch rows
    if role in ("data", "fsdp"):
        return ALL_REDUCE_PASSES * share * weights
    if role == "tensor":
        return ALL_REDUCE_PASSES * share * rows / mesh.get("context", 1) * activation_bytes_per_token
    if role == "context":
        return share * rows * activation_bytes_per_token
    if role == "expert":
        return ALL_REDUCE_PASSES * share * batch_tokens / chips_of(mesh) * activation_bytes_per_token
    if role == "pipeline":
        return ALL_REDUCE_PASSES * share * rows * activation_bytes_per_token
    return 0.0


def bubble_fraction(stages: int, microbatches: int) -> float:
    """GPipe's bubble (p-1)/(m+p-1): the share of a step each stage idles while the pipeline fills and drains."""
    return (stages - 1) / (microbatches + stages - 1) if stages > 1 else 0.0


@dataclass(frozen=True)
class Crossover:
    """One of the book's compute-vs-communication rules for a role: compute-bound while value > threshold."""
    role: str
    rule: str
    value: float | None
    threshold: float | None
    how: str

    @property
    def compute_bound(self) -> bool | None:
        if self.value is None or self.threshold is None:
            return None
        return self.value > self.threshold


def crossovers(mesh: dict[str, int], batch_tokens: float, ffn: float | None, ratio: float | None,
               axes_per_role: dict[str, int] | None = None) -> list[Crossover]:
    """The book's crossover of each role the mesh uses: C/W is ``ratio`` for one link axis (both directions);
    a role spread over k torus axes has k times the bandwidth (the book's n_axes)."""
    out = []
    axes = axes_per_role or {}
    per_chip = batch_tokens / batch_ways(mesh)          # the book's B/X: tokens per chip along the batch
    per_chip_all = batch_tokens / chips_of(mesh)
    mixed = mesh.get("tensor", 1) > 1 and (mesh.get("fsdp", 1) > 1 or mesh.get("data", 1) > 1)
    for role in ("data", "fsdp", "tensor"):
        if mesh.get(role, 1) <= 1:
            continue
        k = axes.get(role, 1)
        r = None if ratio is None else ratio / k
        if role == "tensor":
            width = None if ffn is None else ffn / mesh["tensor"]
            out.append(Crossover(role, "tensor: F/Y > C/W", width, r, f"C/W over {k} axis(es); F = {ffn}"))
        elif mixed and ffn:
            thr = None if r is None else 2 * r ** 2 / ffn
            out.append(Crossover(role, f"{role} with tensor: B/N > 2 (C/W)^2 / F", per_chip_all, thr,
                                 f"C/W over {k} axis(es), F = {ffn:g}"))
        else:
            out.append(Crossover(role, f"{role}: B/X > C/W", per_chip, r, f"C/W over {k} axis(es)"))
    return out


def optimal_fsdp(batch_tokens: float, chips: int, ffn: float, axes_fsdp: int = 1, axes_tensor: int = 1) -> float:
    """The book's X_opt = sqrt(B N M_X / (F M_Y)) (the mixed FSDP x tensor mesh with least communication);
    ``2BN/F`` in the LLaMA-3 chapter, where the FSDP ways span two of three axes."""
    return math.sqrt(batch_tokens * chips * axes_fsdp / (ffn * axes_tensor))
