"""A training run from a description of the model and the mesh alone (no trace): the book's chapter 6
arithmetic (parameters, 6 P T FLOPs, days at an MFU, memory of parameters, Adam state and checkpoints,
the per-chip batch against each crossover), so a user can check a plan, and the projection, by hand."""

from __future__ import annotations

from dataclasses import dataclass, field

from traceview.hardware.chips import Chip
from traceview.parallelism.rules import axis_link, critical_ratio
from traceview.whatif.book import (
    ADAM_BYTES_PER_PARAM,
    SECONDS_PER_DAY,
    Crossover,
    chips_of,
    crossovers,
    optimal_fsdp,
    parameter_ways,
    training_flops,
    training_seconds,
)


@dataclass(frozen=True)
class ModelSpec:
    """A dense decoder (the fields of a Hugging Face config.json, the book's symbols in comments)."""
    layers: int            # L
    d_model: int           # D
    d_ff: int              # F
    heads: int             # N
    kv_heads: int          # K
    head_dim: int          # H
    vocab: int             # V
    gated: bool = True     # three MLP matrices (SwiGLU), else two

    @property
    def params(self) -> float:
        """The book's count: MLP L x D x F x 3, embeddings 2 x V x D, attention L x (2 D N H + 2 D K H)."""
        mlp = self.layers * self.d_model * self.d_ff * (3 if self.gated else 2)
        vocab = 2 * self.vocab * self.d_model
        attention = self.layers * (2 * self.d_model * self.heads * self.head_dim
                                   + 2 * self.d_model * self.kv_heads * self.head_dim)
        return float(mlp + vocab + attention)


@dataclass
class Plan:
    """The book's figures for one model, batch and mesh on one chip."""
    params: float
    flops_per_token: float
    total_flops: float | None
    days: float | None
    param_bytes: float
    optimizer_bytes: float
    checkpoint_bytes: float
    memory_per_chip_bytes: float
    per_chip_batch: float
    crossovers: list[Crossover] = field(default_factory=list)
    optimal_fsdp: float | None = None
    ratio: float | None = None               # C/W over one link axis


def plan(model: ModelSpec, mesh: dict[str, int], chip: Chip, batch_tokens: float, *,
         total_tokens: float | None = None, mfu: float = 0.4, param_bytes_per: int = 2,
         checkpoints_per_layer: int = 4, dtype: str = "bf16", axes_per_role: dict[str, int] | None = None) -> Plan:
    """The run of ``model`` on ``mesh`` (role -> ways) of ``chip``s at ``batch_tokens`` per step."""
    p = model.params
    chips = chips_of(mesh)
    peak = chip.peak_flops_for(dtype)
    total = training_flops(p, total_tokens) if total_tokens else None
    days = training_seconds(total, chips, peak, mfu) / SECONDS_PER_DAY if total and peak else None
    params_b = param_bytes_per * p
    optimizer_b = ADAM_BYTES_PER_PARAM * p
    # gradient checkpoints: the residual stream (D values of 2 bytes per token) saved k times per layer
    ckpt_b = 2.0 * model.d_model * batch_tokens * checkpoints_per_layer * model.layers
    ways = parameter_ways(mesh)
    per_chip = (params_b + optimizer_b) / ways + ckpt_b / chips
    ratio = critical_ratio(chip, axis_link(chip), dtype)
    xo = crossovers(mesh, batch_tokens, float(model.d_ff), ratio, axes_per_role)
    x_opt = optimal_fsdp(batch_tokens, chips, model.d_ff, 2, 1) if mesh.get("tensor", 1) > 1 else None
    return Plan(p, 6.0 * p, total, days, params_b, optimizer_b, ckpt_b, per_chip, batch_tokens / chips, xo,
                x_opt, ratio)
