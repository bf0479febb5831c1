"""Context (sequence) parallelism: ring attention and all-gathered K/V, read from the HLO.

Ring attention keeps each chip's query block and passes the key/value blocks
around the ring with collective-permute, one hop per iteration of the
attention loop, while the chip computes attention of its queries against the
block it holds. A permute is read as a K/V pass when its loop (the body and
the computations it calls, fusions included) holds an attention-shaped dot:
batch dimensions on both sides, no weight-shaped operand, and a contracting
extent equal to the block's last (head) dimension; or a fused attention kernel
(cuDNN, Pallas splash/flash: a custom-call) reading blocks of its shape. That dot's key side gives
the per-chip sequence length s (its free extent) and the ratio of query heads
to key/value heads (its elements over the block's). All-gather context
parallelism gathers K/V along the sequence instead: an activation all-gather
read by such a dot, or by a fused attention kernel.

The rule (docs/parallelism.md has a worked example): one ring step computes
4·B·H·s²·d FLOPs (QKᵀ and PV) and moves the K and V blocks, 2·B·s·H_kv·d·b
bytes; the transfer hides behind the compute when s > (C/W)·b·H_kv/(2·H).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from traceview.cost.shapes import byte_size, leaves
from traceview.parallelism.dots import Dot, dots_in
from traceview.parallelism.loops import Loop
from traceview.parsers.hlo.model import HloModule, Instruction, Shape


@dataclass
class AttentionShape:
    seq_per_chip: int          # s: the key side's free extent
    head_dim: int              # d: the contracting extent
    heads_per_kv_head: float   # H / H_kv: the key operand's elements over the K block's


def is_attention_dot(dot: Dot, weights: set[tuple[int, ...]]) -> bool:
    return bool(dot.lhs_batch) and len(dot.lhs) >= 3 and len(dot.rhs) >= 3 and \
        tuple(sorted(dot.lhs)) not in weights and tuple(sorted(dot.rhs)) not in weights


def attention_shape(module: HloModule, computations: set[str], block: Shape,
                    weights: set[tuple[int, ...]]) -> AttentionShape | None:
    """The attention (QKᵀ) dot among ``computations`` that reads K/V blocks of ``block``'s shape."""
    if not block.dims:
        return None
    head_dim = block.dims[-1]
    block_elements = math.prod(block.dims)
    if block_elements <= 0:
        return None
    votes: Counter[tuple[int, int, float]] = Counter()
    for dot in dots_in(module, computations):
        if not is_attention_dot(dot, weights) or dot.k != head_dim:
            continue
        key_elements = math.prod(dot.rhs)
        if key_elements % block_elements:
            continue
        votes[(dot.free("rhs"), head_dim, key_elements / block_elements)] += 1
    if not votes:
        return attention_kernel_shape(module, computations, block)
    (s, d, ratio), _ = votes.most_common(1)[0]
    return AttentionShape(s, d, ratio)


# Fused attention kernels: cuDNN's flash attention, Pallas / Mosaic splash and flash kernels, Triton's.
ATTENTION_KERNELS = ("fmha", "flash", "splash", "attention", "mha")


def attention_kernel_shape(module: HloModule, computations: set[str], block: Shape) -> AttentionShape | None:
    """A fused attention kernel (a custom-call) among ``computations`` reading an operand of the block's
    shape. Read in JAX's [batch, sequence, heads, head dim] layout: s the block's second dimension, d its
    last, H/H_kv the first (query) operand's elements over the block's."""
    if len(block.dims) != 4:
        return None
    for name in computations:
        kernels, shapes = _attention_kernels(module, name)
        for inst in kernels:
            operands = [shapes[o] for o in inst.operands if o in shapes]
            if len(operands) < 2 or not any(tuple(o.dims) == tuple(block.dims) for o in operands[1:]):
                continue
            query = math.prod(operands[0].dims)
            if query <= 0 or query % math.prod(block.dims):
                continue
            return AttentionShape(block.dims[1], block.dims[-1], query / math.prod(block.dims))
    return None


def _attention_kernels(module: HloModule, computation: str) -> tuple[list[Instruction], dict[str, Shape]]:
    """The fused attention kernels (custom-calls) of a computation, with its instructions' shapes."""
    comp = module.computations.get(computation)
    if comp is None:
        return [], {}
    shapes = {i.name: i.shape for i in comp.instructions}
    kernels = [i for i in comp.instructions if i.opcode == "custom-call"
               and any(word in (i.custom_call_target or "").lower() for word in ATTENTION_KERNELS)]
    return kernels, shapes


GATHER_FORWARDS = ("bitcast", "copy", "all-gather-done", "get-tuple-element", "optimization-barrier")


def gathered_kv_kernel(module: HloModule, computation: str, name: str, gathered: Shape) -> AttentionShape | None:
    """A fused attention kernel reading all-gather ``name``'s result (directly, or through copies and
    bitcasts of the same dimensions) as keys or values: all-gather context parallelism. Read in JAX's
    [batch, sequence, heads, head dim] layout: the query operand (the first) holds the chip's queries,
    s its second dimension; d the last; H/H_kv the query's heads over the gathered array's. The gathered
    sequence must be a whole multiple of the chip's, the batch and head dimension the query's."""
    dims = tuple(gathered.dims)
    if len(dims) != 4:
        return None
    kernels, shapes = _attention_kernels(module, computation)
    if not kernels:
        return None
    comp = module.computations[computation]
    names, frontier = {name}, [name]
    while frontier and len(names) < 64:          # the gather's result under other names (same dimensions)
        current = frontier.pop()
        for inst in comp.instructions:
            if current in inst.operands and inst.opcode in GATHER_FORWARDS and inst.name not in names and \
                    dims in {tuple(a.dims) for a in leaves(inst.shape)}:
                names.add(inst.name)
                frontier.append(inst.name)
    for kernel in kernels:
        if not any(o in names for o in kernel.operands[1:]) or kernel.operands[0] not in shapes:
            continue
        query = tuple(shapes[kernel.operands[0]].dims)
        if len(query) != 4 or query[0] != dims[0] or query[3] != dims[3] or not query[1] or not dims[2] or \
                dims[1] % query[1]:
            continue
        return AttentionShape(query[1], dims[3], query[2] / dims[2])
    return None


def loop_computations(module: HloModule, loop: Loop, loops: dict[str, Loop]) -> set[str]:
    """The loop body and everything it calls (fusions included), not nested loops' bodies."""
    out, frontier = set[str](), [loop.body]
    while frontier and len(out) < 4096:
        name = frontier.pop()
        if name in out:
            continue
        out.add(name)
        comp = module.computations.get(name)
        for inst in comp.instructions if comp else []:
            frontier.extend(c for c in inst.called_computations if loops.get(c, loop) == loop)
    return out


def block_of(arrays: list[Shape]) -> Shape | None:
    found = [a for a in arrays if a.element_type != "token" and len(a.dims) >= 3]
    return found[0] if found else None


@dataclass
class ContextFinding:
    style: str                     # "ring" or "all-gather"
    attention: AttentionShape
    element_bytes: float
    bytes_per_pass: float          # K/V bytes a chip sends in one ring step (or one gather)
    passes: int | None             # ring steps per attention: hops of one block (a loop's trips x hops per body)
    how: list[str] = field(default_factory=list)   # where the K/V were seen read, how the passes were counted


def element_bytes(shape: Shape) -> float:
    """Bytes per element of an array (4 for an unknown type)."""
    n = math.prod(shape.dims)
    return byte_size(Shape(shape.element_type, shape.dims)) / n if n and byte_size(
        Shape(shape.element_type, shape.dims)) else 4.0


def arrays_of(shape: Shape) -> list[Shape]:
    return [a for a in leaves(shape) if a.element_type != "token"]
