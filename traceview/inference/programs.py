"""What an HLO module's signature says about serving: its weights, its KV cache, its token input.

A serving program (a jitted prefill or decode step) takes the model's weights, a KV cache and a
batch of tokens, and returns the cache updated in place. In the HLO that reads as:

* **KV cache**: an entry parameter whose value comes back as an output after one or more
  ``dynamic-update-slice`` (a contiguous cache) or ``scatter`` (a paged / ragged cache) wrote into it;
  usually donated, so the module's ``input_output_alias`` maps that output to the parameter.
* **tokens**: the 32/64-bit integer parameter of rank 1 or 2 with the most elements
  (``s32[batch, tokens]``; rank 1: one token per sequence); of equal sizes, the one whose JAX argument
  name says tokens (``tok``, ``ids``, ``prompt``, ``input``), then the rank-2 one.
* **positions**: other 32/64-bit integer parameters (scalars, per-sequence positions, page tables, keys).
* **weights**: every other parameter (floats, and int8/int4/fp8 quantized weights).

The tracing walks from each output back through the ops that keep a buffer as it is (bitcast, copy,
convert, reshape, tuple plumbing) and through fusions, bounded in steps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from traceview.cost.shapes import elements, leaf_bytes, shape_text
from traceview.inference.paged import PagedCache, page_table, read_paging
from traceview.parsers.hlo.model import Computation, HloModule, Instruction, Shape

CACHE_WRITES = ("dynamic-update-slice", "scatter")
# Ops whose output is their first operand's buffer, re-viewed or copied whole.
_PASS_THROUGH = frozenset(("bitcast", "copy", "convert", "reshape", "bitcast-convert", "copy-start", "copy-done",
                           "optimization-barrier"))
_TOKEN_TYPES = frozenset(("s32", "u32", "s64", "u64"))
_MAX_WALK = 10_000
_TOKEN_NAME_RE = re.compile(r"tok|ids|prompt|input", re.IGNORECASE)


@dataclass(frozen=True)
class CacheWrite:
    """One write into a cache parameter: ``opcode`` and the shape of what it writes."""

    opcode: str
    update_dims: tuple[int, ...]


@dataclass
class Parameter:
    """One entry parameter: number, name (the JAX argument path when the HLO keeps it), shape, bytes, role
    (``weight``, ``kv_cache``, ``tokens``, ``position``)."""

    number: int
    name: str
    shape: Shape
    bytes: int
    role: str = "weight"
    output: int | None = None       # for a cache: the output index it comes back as
    aliased: bool = False           # that output is donated (input_output_alias)
    writes: list[CacheWrite] = field(default_factory=list)

    @property
    def shape_text(self) -> str:
        return shape_text(self.shape)


@dataclass
class Program:
    """An HLO module read as a serving program (see the module docstring)."""

    module: str
    program_id: int | None
    parameters: list[Parameter]
    output_shapes: list[Shape] = field(default_factory=list)   # the entry's outputs, in output-index order
    paging: PagedCache | None = None      # a paged cache: its pages, page table and bytes per token

    def of_role(self, role: str) -> list[Parameter]:
        return [p for p in self.parameters if p.role == role]

    @property
    def caches(self) -> list[Parameter]:
        return self.of_role("kv_cache")

    @property
    def weights(self) -> list[Parameter]:
        return self.of_role("weight")

    @property
    def tokens(self) -> Parameter | None:
        found = self.of_role("tokens")
        return found[0] if found else None

    @property
    def weight_bytes(self) -> int:
        return sum(p.bytes for p in self.weights)

    @property
    def weight_elements(self) -> int:
        return sum(elements(p.shape) for p in self.weights)

    @property
    def kv_cache_bytes(self) -> int:
        return sum(p.bytes for p in self.caches)

    def makes_cache_of(self, other: Program) -> list[int]:
        """The outputs of this program shaped as ``other``'s KV cache parameters: a prefill that creates
        the cache a decode step then updates (it takes no cache, so none is updated in place here)."""
        wanted = {(p.shape.element_type, p.shape.dims) for p in other.caches}
        return [i for i, s in enumerate(self.output_shapes) if (s.element_type, s.dims) in wanted]

    @property
    def paged(self) -> bool:
        """The cache is written by scatter: a paged or ragged cache, not one slot per (sequence, position)."""
        return any(w.opcode == "scatter" for p in self.caches for w in p.writes)

    @property
    def ragged(self) -> bool:
        """A paged step's flat token input over the page table's sequences (``s32[T]``, T tokens of S)."""
        tokens = self.tokens
        return bool(self.paging is not None and self.paging.sequences and tokens is not None
                    and len(tokens.shape.dims) == 1)

    @property
    def batch(self) -> int | None:
        """Sequences per step: the token input's first dim, or a ragged step's page-table rows."""
        tokens = self.tokens
        if self.ragged and self.paging is not None:
            return self.paging.sequences
        return tokens.shape.dims[0] if tokens is not None and tokens.shape.dims else None

    @property
    def tokens_per_step(self) -> int | None:
        if self.ragged and self.paging is not None:
            return self.paging.tokens_per_step
        b, t = self.batch, self.tokens_per_sequence
        return b * t if b is not None and t is not None else None

    @property
    def tokens_per_sequence(self) -> int | None:
        """New tokens per sequence per call: the token input's second dim (1 for a rank-1 input; for a ragged
        step, 1 when its tokens are its sequences, else None: they vary), else the size the cache writes have
        along the sequence dim."""
        tokens = self.tokens
        if self.ragged and self.paging is not None:
            return 1 if self.paging.tokens_per_step == self.paging.sequences else None
        if tokens is not None:
            return tokens.shape.dims[1] if len(tokens.shape.dims) == 2 else 1
        dim = self.sequence_dim
        if dim is None:
            return None
        sizes = {w.update_dims[dim] for p in self.caches for w in p.writes if len(w.update_dims) > dim}
        return sizes.pop() if len(sizes) == 1 else None

    @property
    def sequence_dim(self) -> int | None:
        """The cache dim the writes advance along: of the dims where a write is smaller than the cache, the
        one whose write size is the new tokens per sequence, else the last such dim (layers lead, heads and
        features are written whole). None for a paged cache or when the writes say nothing."""
        if not self.caches or self.paged:
            return None
        cache = self.caches[0]
        candidates: list[int] = []
        for w in cache.writes:
            if len(w.update_dims) != len(cache.shape.dims):
                continue
            candidates += [d for d, (u, c) in enumerate(zip(w.update_dims, cache.shape.dims))
                           if u < c and d not in candidates]
        if not candidates:
            return None
        tokens = self.tokens
        if tokens is not None:
            want = tokens.shape.dims[1] if len(tokens.shape.dims) == 2 else 1
            matching = [d for d in candidates if all(w.update_dims[d] == want for w in cache.writes
                                                     if len(w.update_dims) > d)]
            if matching:
                return max(matching)
        return max(candidates)

    @property
    def max_sequence_length(self) -> int | None:
        if self.paging is not None:
            return self.paging.max_sequence_length
        dim = self.sequence_dim
        return self.caches[0].shape.dims[dim] if dim is not None else None


def read_program(module: HloModule) -> Program:
    """The module's entry parameters, each with its serving role."""
    entry = module.entry_computation()
    params = _entry_parameters(entry) if entry is not None else []
    program = Program(module.name, module.program_id, params)
    if entry is None:
        return program
    by_number = {p.number: p for p in params}
    program.output_shapes = [out.shape for out in _outputs(entry)]
    aliases = module.aliases
    names = _Names()
    for index, output in enumerate(_outputs(entry)):
        number, writes, _ = trace_to_parameter(module, entry, output, names)
        param = by_number.get(number) if number is not None else None
        if param is None or not writes:
            continue
        param.role, param.output, param.writes = "kv_cache", index, writes
        param.aliased = aliases.get(index) == number
    _label_integer_inputs(params)
    if program.paged:
        table = page_table(module, [p for p in params if p.role in ("tokens", "position")])
        if table is not None:
            table.role = "page_table"
            if not program.tokens:
                _pick_tokens([p for p in params if p.role == "position" and p.shape.dims])
        program.paging = read_paging(module, program.caches, table, program.tokens)
    return program


def _entry_parameters(entry: Computation) -> list[Parameter]:
    params = []
    for inst in entry.instructions:
        if inst.opcode != "parameter":
            continue
        number = inst.typed.parameter_number
        if number < 0:
            continue
        name = inst.metadata.get("op_name") or inst.name
        params.append(Parameter(number, name, inst.shape, leaf_bytes(inst.shape)))
    return sorted(params, key=lambda p: p.number)


def _label_integer_inputs(params: list[Parameter]) -> None:
    """Tokens and positions among the parameters that are not caches."""
    ints = [p for p in params if p.role == "weight" and not p.shape.is_tuple
            and p.shape.element_type in _TOKEN_TYPES and len(p.shape.dims) <= 2]
    for p in ints:
        p.role = "position"
    _pick_tokens([p for p in ints if p.shape.dims])


def _pick_tokens(candidates: list[Parameter]) -> None:
    """The token input among integer parameters: the most elements, then a token-like name, then rank 2."""
    if candidates:
        max(candidates, key=lambda p: (elements(p.shape), bool(_TOKEN_NAME_RE.search(p.name)),
                                       len(p.shape.dims))).role = "tokens"


def _outputs(entry: Computation) -> list[Instruction]:
    """The entry's outputs, in output-index order (a non-tuple root is output 0)."""
    insts = entry.by_name()
    root = insts.get(entry.root or "")
    if root is None:
        return []
    if root.opcode == "tuple":
        return [insts[o] for o in root.operands if o in insts]
    return [root]


class _Names:
    """Each computation's instructions by name, built once per computation (``Computation.by_name`` builds
    a fresh dict on every call)."""

    def __init__(self) -> None:
        self._maps: dict[int, dict[str, Instruction]] = {}

    def __call__(self, comp: Computation) -> dict[str, Instruction]:
        found = self._maps.get(id(comp))
        if found is None:
            found = self._maps[id(comp)] = comp.by_name()
        return found


def _scattered_into(module: HloModule, comp: Computation, update: Instruction, names: _Names,
                    calls: list[tuple[Computation, Instruction]]) -> list[CacheWrite]:
    """The scatters that made a dynamic-update-slice's update (a layer of a stacked paged pool written back
    whole after its new tokens were scattered into it), through views, out of the fusion the update is a
    parameter of (``calls``: the fusion call sites entered) and into the fusion that made it."""
    inst: Instruction | None = update
    found: list[CacheWrite] = []
    for _ in range(256):
        if inst is None:
            return found
        if inst.opcode == "parameter" and calls:
            number = inst.typed.parameter_number
            comp, call = calls.pop()
            inst = names(comp).get(call.operands[number]) if 0 <= number < len(call.operands) else None
            continue
        if inst.opcode == "scatter" and inst.operands:        # and on to what it scattered into
            source = names(comp).get(inst.operands[-1])
            found += [CacheWrite("scatter", tuple(source.shape.dims))] if source is not None else []
            inst = names(comp).get(inst.operands[0])
            continue
        if inst.opcode == "fusion" and inst.called_computations:
            fused = module.computations.get(inst.called_computations[0])
            shapes = names(fused) if fused is not None else {}
            scatters = [i for i in (fused.instructions if fused else []) if i.opcode == "scatter" and i.operands]
            if not scatters:
                return found
            found += [CacheWrite("scatter", tuple(shapes[i.operands[-1]].shape.dims)) for i in scatters
                      if i.operands[-1] in shapes]
            target = shapes.get(scatters[0].operands[0])
            number = target.typed.parameter_number if target is not None and \
                target.opcode == "parameter" else -1
            inst = names(comp).get(inst.operands[number]) if 0 <= number < len(inst.operands) else None
            continue
        if inst.opcode not in _PASS_THROUGH or not inst.operands:
            return found
        inst = names(comp).get(inst.operands[0])
    return found


def trace_to_parameter(module: HloModule, comp: Computation, inst: Instruction,
                       names: _Names | None = None) -> tuple[int | None, list[CacheWrite], int | None]:
    """(parameter number of ``comp`` the value of ``inst`` is an in-place update of, the writes on the way,
    the tuple element of that parameter when it is a tuple: a loop body's carry element)."""
    names = names or _Names()
    writes: list[CacheWrite] = []
    calls: list[tuple[Computation, Instruction]] = []     # the fusion call sites entered, innermost last
    index: int | None = None                              # the tuple element wanted of a fusion's root
    for _ in range(_MAX_WALK):
        insts = names(comp)
        op = inst.opcode
        if op == "parameter":
            number = inst.typed.parameter_number
            if not calls:
                return (number if number >= 0 else None), writes, index
            comp, call = calls.pop()
            if not 0 <= number < len(call.operands) or call.operands[number] not in names(comp):
                return None, writes, None
            inst = names(comp)[call.operands[number]]
            continue
        if op in CACHE_WRITES and len(inst.operands) >= 2:
            update = insts.get(inst.operands[1] if op == "dynamic-update-slice" else inst.operands[-1])
            if update is not None:
                inner = _scattered_into(module, comp, update, names, list(calls)) \
                    if op == "dynamic-update-slice" else []
                writes.extend(inner or [CacheWrite(op, tuple(update.shape.dims))])
        elif op == "fusion" and inst.called_computations:
            fused = module.computations.get(inst.called_computations[0])
            if fused is None or fused.root not in names(fused) or len(calls) > _MAX_WALK // 10:
                return None, writes, None
            calls.append((comp, inst))
            comp, inst = fused, names(fused)[fused.root or ""]
            if index is not None and inst.opcode == "tuple":
                if not 0 <= index < len(inst.operands) or inst.operands[index] not in names(comp):
                    return None, writes, None
                inst, index = names(comp)[inst.operands[index]], None
            continue
        elif op == "get-tuple-element":
            index = inst.typed.index
            source = insts.get(inst.operands[0]) if inst.operands else None
            if source is None:
                return None, writes, None
            if source.opcode == "tuple":
                if not 0 <= index < len(source.operands) or source.operands[index] not in insts:
                    return None, writes, None
                inst, index = insts[source.operands[index]], None
            else:
                inst = source        # a fusion with a tuple root: resolved on entering it
            continue
        elif op not in _PASS_THROUGH:
            return None, writes, None
        if not inst.operands or inst.operands[0] not in insts:
            return None, writes, None
        inst = insts[inst.operands[0]]
    return None, writes, None
