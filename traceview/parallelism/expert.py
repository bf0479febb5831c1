"""Expert parallelism: experts E, top-k and capacity read from the router and the all-to-all shapes.

* E and k: the router's top-k (``TopK`` / ``topk``): its operand holds one
  score per expert ([T, E]), its result k per token ([T, k]);
* D: the model width, the last dimension of the dispatched arrays;
* capacity: the slots per expert each chip sends, the dispatch all-to-all's
  elements over E·D;
* F: the expert MLP's width, the free extent of the weight in the dot that
  reads the dispatched tokens (else in the dots contracting D against a
  weight, the router's excepted).

The rule (docs/parallelism.md has a worked example): per token slot an expert
layer sends D·b bytes out (dispatch) and back (combine) and computes n·2·D·F
FLOPs in the expert's n matmuls (n = 2 for an up and a down projection). The
all-to-alls hide behind that compute when F > (C/W)·b/n.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from traceview.cost.shapes import leaves
from traceview.parallelism.dots import Figure, consuming_dot, dots
from traceview.parsers.hlo.model import HloModule

EXPERT_MATMULS = 2        # n: an expert MLP's up and down projections (a gated MLP has 3: the rule is conservative)
TOP_K_TARGETS = ("topk", "approxtopk", "top_k")


@dataclass
class Routing:
    experts: int | None
    top_k: int | None
    how: str


def router(module: HloModule) -> Routing:
    """E and k from the first top-k of the module: its operand [.., E] and its result [.., k]."""
    for comp in module.computations.values():
        shapes = {i.name: i.shape for i in comp.instructions}
        for inst in comp.instructions:
            target = (inst.custom_call_target or "").lower().replace("-", "")
            if not (inst.opcode == "topk" or (inst.opcode == "custom-call" and target in TOP_K_TARGETS)):
                continue
            operand = shapes.get(inst.operands[0]) if inst.operands else None
            result = leaves(inst.shape)
            if operand is None or not operand.dims or not result or not result[0].dims:
                continue
            e, k = operand.dims[-1], result[0].dims[-1]
            if 0 < k <= e:
                return Routing(e, k, f"{comp.name}/{inst.name}: top-{k} of {e} router scores per token")
    return Routing(None, None, "no top-k in the program: the router's experts and k are not readable")


@dataclass
class ExpertFinding:
    routing: Routing
    width: int | None          # D
    capacity: float | None     # slots per expert each chip sends
    ffn: int | None            # F
    element_bytes: float
    bytes_per_layer: float     # dispatch + combine, per chip, per layer (forward)
    how: str


def expert_width(module: HloModule, computation: str, name: str, d_model: int) -> int | None:
    """F: the free extent, on the weight side, of the dot reading the dispatched tokens (contracting D)."""
    dot = consuming_dot(module, computation, name)
    if dot is None or dot.k != d_model:
        return None
    sides = [dot.free("rhs"), dot.free("lhs")]
    inner = [f for f in sides if f not in (1,)]
    # the token side's free extent is the slots; the weight side's is F: the weight is the rhs by convention
    return int(sides[0]) if sides[0] > 1 else (int(inner[0]) if inner else None)


def weight_width(module: HloModule, weights: set[tuple[int, ...]], d_model: int, experts: int | None) -> int | None:
    """F when no dot is reached from the all-to-all: the weight side's free extent of the dots that contract D
    against a weight (not the router's E), the one with the most FLOPs."""
    votes: Counter[int] = Counter()
    for dot in dots(module):
        for side, other in (("rhs", dot.rhs), ("lhs", dot.lhs)):
            if tuple(sorted(other)) in weights and dot.k == d_model:
                free = dot.free(side)
                if free > 1 and free != experts:
                    votes[free] += int(dot.flops)
    return votes.most_common(1)[0][0] if votes else None


def routed_tokens(module: HloModule, weights: set[tuple[int, ...]], experts: int) -> Figure | None:
    """The per-chip batch of a routed program: the tokens its router scores (x[T, D] @ router[D, E]). The
    experts' matmuls, which hold the most FLOPs, run on slots (capacity x experts), not on tokens."""
    votes: Counter[int] = Counter()
    for dot in dots(module):
        if dot.out and dot.out[-1] == experts and tuple(sorted(dot.rhs)) in weights and dot.free("lhs") > 1:
            votes[dot.free("lhs")] += 1
    if not votes:
        return None
    tokens, _ = votes.most_common(1)[0]
    return Figure(float(tokens), f"the router's dot scores {tokens} tokens per chip against {experts} experts")


def capacity(elements: int, experts: int | None, d_model: int | None) -> float | None:
    if not experts or not d_model:
        return None
    return elements / (experts * d_model)
