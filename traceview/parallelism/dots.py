"""The figures the book's rules need, read from the dot shapes of the optimized (per-device) HLO.

* weight shapes: the program's state (entry parameters whose shape is also a
  result: the parameters a training step updates), the same without a leading
  stacked-layers dimension, and the results of parameter all-gathers;
* per-chip batch in tokens: for a dot with one weight-shaped operand, the
  non-contracting, non-batch extent of the other (x[T,D] @ w[D,F]: T); for a
  dot producing a weight-shaped result (the weight gradient x^T @ dy), its
  contracting extent (T). The value XLA spends the most FLOPs on wins;
* per-shard width (F / Y for tensor parallelism): the contracting extent of
  the dot that produces a tensor-parallel all-reduce or reduce-scatter
  (h[T, F/Y] @ w2[F/Y, D], then summed over the Y shards).

Plain ``dot`` instructions (also inside fusions), library GEMM custom calls
(cuBLAS, with ``dot_dimension_numbers`` in their backend_config) and TPU
matmuls written as convolutions without spatial dimensions (``dim_labels=bf_io->bf``)
count. Weights are followed through async wrappers (the all-gathers' results,
whatever wraps them), bitcasts that drop a stacked layer's unit dimension, and
the layer slices of a scanned model's stacked state.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from traceview.cost.library import is_library_call
from traceview.cost.shapes import leaves
from traceview.parsers.hlo.attributes import ConvDims
from traceview.parsers.hlo.model import Computation, HloModule, Instruction, Shape

PASS_THROUGH = ("bitcast", "copy", "convert", "reshape", "transpose", "get-tuple-element", "all-reduce-done",
                "reduce-scatter-done", "all-gather-done", "copy-start", "copy-done", "optimization-barrier")


@dataclass
class Dot:
    computation: str
    name: str
    lhs: tuple[int, ...]
    rhs: tuple[int, ...]
    out: tuple[int, ...]
    lhs_contracting: tuple[int, ...]
    rhs_contracting: tuple[int, ...]
    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]

    @property
    def flops(self) -> float:
        return 2.0 * math.prod(self.out) * math.prod(self.lhs[i] for i in self.lhs_contracting)

    @property
    def k(self) -> int:
        return math.prod(self.lhs[i] for i in self.lhs_contracting)

    def free(self, side: str) -> int:
        dims, contracting, batch = ((self.lhs, self.lhs_contracting, self.lhs_batch) if side == "lhs"
                                    else (self.rhs, self.rhs_contracting, self.rhs_batch))
        return math.prod(d for i, d in enumerate(dims) if i not in contracting and i not in batch)


def shape_map(comp: Computation) -> dict[str, Shape]:
    return {inst.name: inst.shape for inst in comp.instructions}


def _array_dims(shape: Shape) -> tuple[int, ...]:
    arrays = leaves(shape)
    return tuple(arrays[0].dims) if arrays else ()


def dot_of(inst: Instruction, shapes: dict[str, Shape], comp: str) -> Dot | None:
    if inst.opcode == "dot":
        typed = inst.typed
        dn = {"lhs_contracting_dims": typed.lhs_contracting_dims, "rhs_contracting_dims": typed.rhs_contracting_dims,
              "lhs_batch_dims": typed.lhs_batch_dims, "rhs_batch_dims": typed.rhs_batch_dims}
    elif inst.opcode == "custom-call" and is_library_call(inst.custom_call_target) and \
            any(word in (inst.custom_call_target or "").lower() for word in ("gemm", "matmul")):
        config = inst.typed.backend_config
        nums = (config.get("gemm_backend_config", config) or {}).get("dot_dimension_numbers")
        if not isinstance(nums, dict):
            return None
        dn = {f"{k}_dims": tuple(int(x) for x in nums.get(f"{k}_dimensions", []) or [])
              for k in ("lhs_contracting", "rhs_contracting", "lhs_batch", "rhs_batch")}
    elif inst.opcode == "convolution":
        labelled = _matmul_convolution(inst.typed.conv_dims)
        if labelled is None:
            return None
        dn = labelled
    else:
        return None
    if len(inst.operands) < 2 or inst.operands[0] not in shapes or inst.operands[1] not in shapes:
        return None
    lhs, rhs = _array_dims(shapes[inst.operands[0]]), _array_dims(shapes[inst.operands[1]])
    if not (_fits(dn["lhs_contracting_dims"] + dn["lhs_batch_dims"], lhs)
            and _fits(dn["rhs_contracting_dims"] + dn["rhs_batch_dims"], rhs)):
        return None          # dimension numbers past an operand's rank (malformed text): no matmul to read
    return Dot(comp, inst.name, lhs, rhs, _array_dims(inst.shape), dn["lhs_contracting_dims"],
               dn["rhs_contracting_dims"], dn["lhs_batch_dims"], dn["rhs_batch_dims"])


def _fits(dims: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    return all(0 <= d < len(shape) for d in dims)


def _matmul_convolution(conv: ConvDims | None) -> dict[str, tuple[int, ...]] | None:
    """Dimension numbers of a convolution without spatial dimensions (``bf_io->bf``: how TPU HLO writes a
    matmul), else None. Input feature ``f`` contracts with kernel input ``i``."""
    if conv is None or conv.input_spatial or conv.kernel_spatial or conv.output_spatial:
        return None
    return {"lhs_contracting_dims": (conv.input_feature,), "rhs_contracting_dims": (conv.kernel_input_feature,),
            "lhs_batch_dims": (), "rhs_batch_dims": ()}


def dots(module: HloModule) -> Iterator[Dot]:
    for comp in module.computations.values():
        shapes = shape_map(comp)
        for inst in comp.instructions:
            found = dot_of(inst, shapes, comp.name)
            if found is not None:
                yield found


def dots_in(module: HloModule, names: set[str]) -> Iterator[Dot]:
    """The dots of the named computations."""
    for name in names:
        comp = module.computations.get(name)
        if comp is None:
            continue
        shapes = shape_map(comp)
        for inst in comp.instructions:
            found = dot_of(inst, shapes, comp.name)
            if found is not None:
                yield found


def state_shapes(module: HloModule) -> set[tuple[int, ...]]:
    """Sorted dims of the entry parameters that are also results (the state a step updates)."""
    entry = module.entry_computation()
    if entry is None:
        return set()
    by_name = entry.by_name()
    root = by_name.get(entry.root or "")
    if root is None:
        return set()
    results = {tuple(sorted(a.dims)) for a in leaves(root.shape)}
    params = {tuple(sorted(a.dims)) for inst in entry.instructions if inst.opcode == "parameter"
              for a in leaves(inst.shape)}
    return {d for d in params & results if len(d) >= 2}


def weight_shapes(module: HloModule, gathered: list[tuple[int, ...]]) -> set[tuple[int, ...]]:
    out = set(state_shapes(module))
    # a scanned model stacks its layers' weights along one dimension and slices one layer per iteration
    out |= {tuple(sorted(dims[:i] + dims[i + 1:])) for dims in _unsorted_state(module) if len(dims) >= 3
            for i in range(len(dims))}
    out |= {tuple(sorted(d)) for d in gathered if len(d) >= 2}
    # a gathered layer slice keeps its stacked dimension as 1 ([1, D, F]); its dot reads the bitcast [D, F]
    out |= {squeezed for d in list(out) if len(squeezed := tuple(x for x in d if x != 1)) >= 2}
    return out


def _unsorted_state(module: HloModule) -> list[tuple[int, ...]]:
    entry = module.entry_computation()
    if entry is None:
        return []
    state = state_shapes(module)
    return [tuple(a.dims) for inst in entry.instructions if inst.opcode == "parameter"
            for a in leaves(inst.shape) if tuple(sorted(a.dims)) in state]


@dataclass
class Figure:
    value: float | None
    how: str


def per_chip_tokens(module: HloModule, weights: set[tuple[int, ...]],
                    provenance: frozenset[tuple[str, str]] | None = None) -> Figure:
    """Tokens per chip, from the dots that read a weight (module docstring). Where both operands have a
    weight's shape (tokens per chip equal to a weight's side), ``provenance`` (the (computation, instruction)
    values that are the state's weights, by data flow) says which operand is the weight."""
    votes: Counter[int] = Counter()
    count = 0
    for d in dots(module):
        lhs_w, rhs_w = tuple(sorted(d.lhs)) in weights, tuple(sorted(d.rhs)) in weights
        if lhs_w and rhs_w and provenance:
            lhs_w, rhs_w = _read_weights(module, d, provenance)
        if lhs_w != rhs_w:
            tokens = d.free("rhs" if lhs_w else "lhs")
        elif not lhs_w and tuple(sorted(d.out)) in weights:
            tokens = d.k
        else:
            continue
        if tokens > 1:
            votes[tokens] += int(d.flops)
            count += 1
    if not votes:
        return Figure(None, "no dot has a weight-shaped operand or result (weights: the state a step "
                            "updates and gathered parameters)")
    value, _ = votes.most_common(1)[0]
    return Figure(float(value), f"{count} dots with a weight operand or result; the most FLOPs at {value} "
                                "tokens per chip")


def _read_weights(module: HloModule, d: Dot, provenance: frozenset[tuple[str, str]]) -> tuple[bool, bool]:
    """Which of a dot's operands are weights by data flow."""
    inst = module.computations[d.computation].by_name().get(d.name)
    if inst is None or len(inst.operands) < 2:
        return False, False
    return (d.computation, inst.operands[0]) in provenance, (d.computation, inst.operands[1]) in provenance


def producing_dot(module: HloModule, computation: str, name: str, depth: int = 0) -> Dot | None:
    """The dot whose result feeds instruction ``name`` (through pass-through ops and fusions)."""
    comp = module.computations.get(computation)
    if comp is None or depth > 6:
        return None
    by_name = comp.by_name()
    inst = by_name.get(name)
    if inst is None:
        return None
    found = dot_of(inst, shape_map(comp), comp.name)
    if found is not None:
        return found
    if inst.opcode == "fusion" and inst.called_computations:
        fused = module.computations.get(inst.called_computations[0])
        if fused is not None and fused.root:
            return producing_dot(module, fused.name, fused.root, depth + 1)
    if inst.opcode in PASS_THROUGH or inst.opcode in ("add", "multiply", "divide"):
        for operand in inst.operands:
            hit = producing_dot(module, computation, operand, depth + 1)
            if hit is not None:
                return hit
    return None


def consuming_dot(module: HloModule, computation: str, name: str) -> Dot | None:
    """A dot (direct, or through pass-through ops, or inside a fusion) that reads instruction ``name``."""
    comp = module.computations.get(computation)
    if comp is None:
        return None
    frontier, seen = [name], set[str]()
    shapes = shape_map(comp)
    while frontier:
        current = frontier.pop()
        if current in seen or len(seen) > 50:
            continue
        seen.add(current)
        for inst in comp.instructions:
            if current not in inst.operands:
                continue
            found = dot_of(inst, shapes, comp.name)
            if found is not None:
                return found
            if inst.opcode in PASS_THROUGH:
                frontier.append(inst.name)
            elif inst.opcode == "fusion" and inst.called_computations:
                fused = module.computations.get(inst.called_computations[0])
                if fused is not None:
                    fshapes = shape_map(fused)
                    for finst in fused.instructions:
                        hit = dot_of(finst, fshapes, fused.name)
                        if hit is not None:
                            return hit
    return None
