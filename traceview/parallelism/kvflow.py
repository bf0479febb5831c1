"""Where a moved buffer goes: followed forward through the program to the attention product that reads it.

Context parallelism is told by data flow, not by the shape of the loop around it. A collective-permute
(or an all-gather) moves keys and values when what it delivers is read, after any re-viewing (bitcast,
reshape, transpose, copy, slices of a stacked ``[2, ...]`` K/V buffer, the broadcast that repeats K/V
heads for grouped-query attention, a rotary embedding's elementwise ops), as the key side of an attention
product: a dot with batch dimensions on both sides that contracts the buffer's last (head) dimension
against an operand that did not come from the buffer (the chip's queries; no weight test: the data flow
already says the operand is the moved buffer, and an activation shaped like the program's state, as a
forward program's input and output are, is still no weight); or the value side, a dot that contracts the
buffer's sequence against the probabilities and keeps its head dimension;
or as a key/value operand of a fused attention kernel (cuDNN, Transformer Engine, Pallas flash/splash: a
custom-call). A send/recv (XLA's GPU form of a loop's permute) delivers what its recv-done's element 0
holds. The walk enters fusions, calls and while loops (the value put in a loop's carry is read in
the body, and a body's result is the next iteration's carry), and leaves them again, so it finds the
product whether the ring is unrolled into a chain of permutes, runs in a loop of its own, or sits inside
the scan over layers: the loop's shape is never asked.

From the product: s, the per-chip sequence (the key side's free extent, over the gather's group size for
gathered K/V), d (the contracted extent) and H/H_kv (the query operand's elements over one chip's K block,
the smallest array on the way: a stacked K/V buffer's half before the heads are repeated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from traceview.parallelism.context import ATTENTION_KERNELS, AttentionShape, is_attention_dot
from traceview.parallelism.dots import dot_of, shape_map
from traceview.parallelism.memo import ModuleMemo
from traceview.parallelism.p2p import received_value
from traceview.parsers.hlo.model import Computation, HloModule, Instruction

MAX_STEPS = 20_000       # instructions visited per walk (hostile input)

# Ops whose result is (part of) their first operand re-viewed, moved or combined elementwise.
FORWARD = frozenset((
    "bitcast", "copy", "reshape", "transpose", "convert", "slice", "dynamic-slice", "broadcast", "concatenate",
    "pad", "reverse", "collective-permute", "collective-permute-start", "collective-permute-done",
    "all-gather", "all-gather-start", "all-gather-done", "copy-start", "copy-done", "dynamic-update-slice",
    "multiply", "add", "subtract", "negate", "select", "optimization-barrier", "bitcast-convert",
    "async-start", "async-update", "async-done",
))


@dataclass(frozen=True)
class _At:
    """A value on the walk: the result of ``inst`` in ``comp`` (the element at ``path`` of a tuple result)."""
    comp: str
    inst: str
    path: tuple[int, ...]
    smallest: int            # the fewest elements the value had on the way here


class _Index:
    """Users of every instruction, and who calls each computation, built once per module."""

    def __init__(self, module: HloModule) -> None:
        self.module = module
        self.users: dict[str, dict[str, list[tuple[Instruction, int]]]] = {}
        self.names: dict[str, dict[str, Instruction]] = {}
        self.shapes: dict[str, dict] = {}
        self.callers: dict[str, list[tuple[str, Instruction]]] = {}
        for comp in module.computations.values():
            users: dict[str, list[tuple[Instruction, int]]] = {}
            for inst in comp.instructions:
                for i, operand in enumerate(inst.operands):
                    users.setdefault(operand, []).append((inst, i))
                for called in inst.called_computations:
                    self.callers.setdefault(called, []).append((comp.name, inst))
            self.users[comp.name] = users
            self.names[comp.name] = comp.by_name()

    def comp(self, name: str) -> Computation | None:
        return self.module.computations.get(name)

    def shape_map(self, name: str) -> dict:
        if name not in self.shapes:
            comp = self.comp(name)
            self.shapes[name] = shape_map(comp) if comp is not None else {}
        return self.shapes[name]


# one report asks about every permute and gather of the same few modules, and an index costs a pass over the
# module: the last few modules' indexes are kept
_index = ModuleMemo(_Index)


def _elements(shape) -> int:
    return math.prod(shape.dims) if shape is not None and not shape.is_tuple else 0


def kv_reader(module: HloModule, computation: str, name: str, head_dim: int, group: int = 1,
              weights: set[tuple[int, ...]] | None = None) -> tuple[AttentionShape, str] | None:
    """(the attention shape, where it was found) when the value of ``name`` (a permute's or a gather's
    result) reaches the key side of an attention product, else None. ``group``: how many chips' blocks the
    value holds (a gather's group size; 1 for a ring's block)."""
    index = _index(module)
    start = index.names.get(computation, {}).get(name)
    if start is None or head_dim <= 0:
        return None
    seen: set[tuple[str, str, tuple[int, ...]]] = set()
    frontier = [_At(computation, name, (), _elements(start.shape) or 2**62)]
    if start.opcode in ("send", "recv"):         # the data lands in the recv-done's element 0
        frontier = _delivered(index, computation, start, 2**62)
    sources = {(computation, name)}
    steps = 0
    while frontier and steps < MAX_STEPS:
        at = frontier.pop()
        key = (at.comp, at.inst, at.path)
        if key in seen:
            continue
        seen.add(key)
        steps += 1
        for user, operand in index.users.get(at.comp, {}).get(at.inst, []):
            found = _read_by(index, at, user, operand, head_dim, group, sources, weights or set())
            if isinstance(found, tuple):
                return found
            frontier.extend(found)
            sources.update((n.comp, n.inst) for n in found)
        frontier.extend(_leaving(index, at))
    return None


def _read_by(index: _Index, at: _At, user: Instruction, operand: int, head_dim: int, group: int,
             sources: set[tuple[str, str]], weights: set[tuple[int, ...]]):
    """Either the attention found at ``user`` (a tuple) or the values the walk goes on to (a list)."""
    op = user.opcode
    shrink = min(at.smallest, _elements(user.shape) or at.smallest)
    if at.path:
        if op == "get-tuple-element":
            index_ = user.typed.index
            return [_At(at.comp, user.name, at.path[1:], at.smallest)] if index_ == at.path[0] else []
        if op == "tuple":
            return [_At(at.comp, user.name, (operand,) + at.path, at.smallest)]
        return _enter(index, at, user, operand, at.path) if op in ("while", "fusion", "call", "conditional") else (
            [_At(at.comp, user.name, at.path, at.smallest)] if op in ("optimization-barrier", "copy-start",
                                                                       "copy-done") else [])
    if op == "tuple":
        return [_At(at.comp, user.name, (operand,), at.smallest)]
    if op in ("while", "fusion", "call", "conditional"):
        return _enter(index, at, user, operand, ())
    shapes = index.shape_map(at.comp)
    dot = dot_of(user, shapes, at.comp)
    if dot is not None:
        side = "lhs" if operand == 0 else "rhs"
        other = user.operands[1 - operand] if len(user.operands) > 1 else None
        dims = dot.lhs if side == "lhs" else dot.rhs
        if other is None or (at.comp, other) in sources or not dims or \
                not (is_attention_dot(dot, set()) or (_unbatched_attention(dot, side, shapes.get(other), weights)
                                                      and _feeds_softmax(index, at.comp, user.name))):
            return []
        block = at.smallest / group
        if dot.k == head_dim:                 # Q Kᵀ: the keys' free extent is the sequence
            free = dot.free(side)
            if free % group or not block:
                return []
            return (AttentionShape(free // group, head_dim, _elements(shapes.get(other)) / block),
                    f"{user.name} in {at.comp} contracts its head dimension ({head_dim}) against "
                    f"{other} (the chip's queries): the key side of an attention product")
        if dims[-1] == head_dim and dot.free(side) % head_dim == 0 and dot.k % group == 0 and block:
            # P V: the values contract their sequence against the probabilities [B, H, s_q, s_k]
            s = dot.k // group
            return (AttentionShape(s, head_dim, _elements(shapes.get(other)) * head_dim / (block * dot.k)),
                    f"{user.name} in {at.comp} contracts its sequence ({dot.k}) against {other} (the attention "
                    "probabilities), keeping its head dimension: the value side of an attention product")
        return []
    if op == "custom-call" and any(w in (user.custom_call_target or "").lower() for w in ATTENTION_KERNELS) \
            and operand > 0 and user.operands and user.operands[0] in shapes:
        query = shapes[user.operands[0]]
        if len(query.dims) == 4 and query.dims[-1] == head_dim:
            s = query.dims[1]
            return (AttentionShape(s, head_dim, _elements(query) / (at.smallest / group) if at.smallest else 0.0),
                    f"operand {operand} of the fused attention kernel {user.name} "
                    f"({user.custom_call_target}) in {at.comp}")
        return []
    if op == "send" and operand == 0:            # the next hop: what the send delivers
        return _delivered(index, at.comp, user, shrink)
    if op in FORWARD:
        if op == "dynamic-update-slice" and operand > 1:
            return []             # an index
        if op in ("dynamic-slice", "slice", "pad", "broadcast", "reverse") and operand > 0:
            return []
        return [_At(at.comp, user.name, (), shrink)]
    return []


def _delivered(index: _Index, comp: str, inst: Instruction, smallest: int) -> list[_At]:
    """The value a send or recv delivers: element 0 of its recv-done (:func:`p2p.received_value`)."""
    found = received_value(index.module, comp, inst)
    if found is None:
        return []
    data = index.shape_map(found[0]).get(found[1])
    elements = _elements(data.tuple_shapes[0]) if data is not None and data.is_tuple and data.tuple_shapes else 0
    return [_At(found[0], found[1], (0,), min(smallest, elements or smallest))]


def _feeds_softmax(index: _Index, comp: str, name: str, depth: int = 6) -> bool:
    """Whether the product's scores reach an exponential within a few ops (the softmax between the two
    products), inside a fusion or after it."""
    frontier, seen = [(comp, name, 0)], set()
    while frontier:
        comp, name, d = frontier.pop()
        if (comp, name) in seen or d > depth:
            continue
        seen.add((comp, name))
        here = index.comp(comp)
        if here is not None and here.root == name:
            frontier += [(caller, inst.name, d + 1) for caller, inst in index.callers.get(comp, [])
                         if inst.opcode == "fusion"]
        for user, _ in index.users.get(comp, {}).get(name, []):
            if user.opcode == "exponential":
                return True
            if user.opcode == "fusion" and user.called_computations:
                fused = index.comp(user.called_computations[0])
                if fused is not None and any(i.opcode == "exponential" for i in fused.instructions):
                    return True
            frontier.append((comp, user.name, d + 1))
    return False


def _unbatched_attention(dot, side: str, other, weights: set[tuple[int, ...]]) -> bool:
    """An attention product with one head and one sequence per chip, whose unit batch dimensions XLA dropped
    ([s, d] x [d, s'] once XLA moved the transpose into the operand): a rank-2 product of no batch dimension
    whose other side is no weight (its scores must also reach a softmax: :func:`_feeds_softmax`)."""
    return (other is not None and not dot.lhs_batch and len(dot.lhs) == len(dot.rhs) == 2
            and tuple(sorted(other.dims)) not in weights)


def _enter(index: _Index, at: _At, user: Instruction, operand: int, path: tuple[int, ...]) -> list[_At]:
    """Into the computations ``user`` calls with the value as operand ``operand``; a while's result too."""
    out = []
    if user.opcode == "while":
        out.append(_At(at.comp, user.name, path, at.smallest))     # after the loop
        targets = user.called_computations                         # condition and body
        number = 0
    else:
        targets = user.called_computations[:1] if user.opcode != "conditional" else user.called_computations
        number = operand
    for name in targets:
        comp = index.comp(name)
        if comp is None:
            continue
        for inst in comp.instructions:
            if inst.opcode == "parameter" and inst.typed.parameter_number == number:
                out.append(_At(name, inst.name, path, at.smallest))
    return out


def _leaving(index: _Index, at: _At) -> list[_At]:
    """A computation's root leaves it: a loop body's result is the next iteration's carry; a fusion's or a
    call's is the calling instruction's result."""
    comp = index.comp(at.comp)
    if comp is None or comp.root != at.inst:
        return []
    out = []
    for caller, inst in index.callers.get(at.comp, []):
        if inst.opcode == "while":
            body = inst.called_computations[1] if len(inst.called_computations) > 1 else None
            if body == at.comp:
                out += [_At(at.comp, p.name, at.path, at.smallest) for p in comp.instructions
                        if p.opcode == "parameter"]
                out.append(_At(caller, inst.name, at.path, at.smallest))
        elif inst.opcode in ("fusion", "call", "conditional", "async-start"):
            out.append(_At(caller, inst.name, at.path, at.smallest))
    return out


def gather_group(module: HloModule, computation: str, name: str) -> int:
    """How many chips' pieces an all-gather's result holds: its extent along the gathered dimension over its
    operand's (1 when not read)."""
    names = _index(module).names.get(computation, {})
    inst = names.get(name)
    if inst is None or not inst.operands:
        return 1
    if inst.opcode == "async-start" or inst.opcode.endswith("-start"):
        result = inst.shape.tuple_shapes[-1] if inst.shape.is_tuple and inst.shape.tuple_shapes else inst.shape
    else:
        result = inst.shape
    operand = names.get(inst.operands[0])
    dims = inst.typed.dimensions
    if operand is None or operand.shape.is_tuple or result.is_tuple or len(dims) != 1 or dims[0] < 0:
        return 1
    dim = dims[0]
    if dim >= len(result.dims) or dim >= len(operand.shape.dims) or not operand.shape.dims[dim]:
        return 1
    return max(1, result.dims[dim] // operand.shape.dims[dim])
