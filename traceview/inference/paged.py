"""Paged KV caches: a pool of fixed-size pages addressed through a page table, and ragged batches.

vLLM and JetStream keep the keys and values in a pool of pages (``[..., pages, page_size, kv_heads,
head_dim]``); each sequence owns the pages its row of the page table (``s32[sequences, pages per
sequence]``) names. One step program takes a ragged batch: T tokens of S sequences, some prefilling
several tokens, others decoding one, written into the pool with ``scatter`` at their slots, read back by
gathering each sequence's pages by the table. In the HLO:

* **page table**: an integer rank-2 parameter whose values index a ``gather`` (or a fused attention
  kernel's operands) reading an array of rank 3 or more, the pool (token ids index the embedding, rank 2);
* **KV bytes per token**: what the step writes into the cache per new token: the scatters' update elements
  over the T tokens, times the cache's bytes per element, summed over every write (K and V, every layer);
* **pages**: the pool's slots (its bytes over the bytes per token), the page size the cache dimension that
  with the one before it makes up the slots (pages × page size);
* **sequences**: the page table's rows; the tokens per step, the token input's length. A step whose tokens
  equal its sequences decodes one token each; more tokens than sequences mix prefill and decode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from traceview.cost.shapes import elements
from traceview.parsers.hlo.model import HloModule, Shape


class Parameter(Protocol):
    """What this module reads of a program's parameter (``programs.Parameter``)."""
    number: int
    name: str
    shape: Shape
    bytes: int
    writes: list

    @property
    def shape_text(self) -> str: ...


P = TypeVar("P", bound=Parameter)

INT_TYPES = frozenset(("s32", "u32", "s64", "u64"))
MAX_STEPS = 20_000


@dataclass
class PagedCache:
    """The paging of a program's KV cache; unknown figures are None."""
    kv_bytes_per_token: float | None
    slots: int | None                 # token positions the pool holds
    pages: int | None
    page_size: int | None
    pages_per_sequence: int | None    # the page table's second dimension
    sequences: int | None             # the page table's rows
    tokens_per_step: int | None
    how: list[str]

    @property
    def max_sequence_length(self) -> int | None:
        """The longest sequence the table addresses: its pages per sequence × the page size."""
        if self.pages_per_sequence and self.page_size:
            return self.pages_per_sequence * self.page_size
        return None

    @property
    def mixed(self) -> bool:
        """More tokens than sequences in one step: some sequences prefill while others decode."""
        return bool(self.tokens_per_step and self.sequences and self.tokens_per_step > self.sequences)


def page_table(module: HloModule, params: Sequence[P]) -> P | None:
    """The integer rank-2 parameter whose values index a gather from an array of rank 3 or more."""
    for p in params:
        if p.shape.is_tuple or p.shape.element_type not in INT_TYPES or len(p.shape.dims) != 2:
            continue
        if _indexes_pool(module, p.number):
            return p
    return None


def read_paging(module: HloModule, caches: Sequence[Parameter], table: Parameter | None,
                tokens: Parameter | None) -> PagedCache:
    """KV bytes per token, slots, pages and page size, sequences and tokens per step of a scatter-written
    cache (see the module docstring)."""
    how: list[str] = []
    t = math.prod(tokens.shape.dims) if tokens is not None and tokens.shape.dims else None
    per_token = 0.0
    for cache in caches:
        n = elements(cache.shape)
        width = cache.bytes / n if n else 0.0
        for w in [w for w in cache.writes if w.opcode == "scatter"]:
            if not t or t not in w.update_dims:
                return PagedCache(None, None, None, None, _dim(table, 1), _dim(table, 0), t,
                                  [f"a write into {cache.name} does not hold one entry per token of the step "
                                   f"({t} tokens): the bytes per token are not read"])
            per_token += math.prod(w.update_dims) / t * width
    total = sum(c.bytes for c in caches)
    slots = int(round(total / per_token)) if per_token else None
    pages, size = _pages(caches[0].shape.dims, slots) if slots and caches else (None, None)
    how.append(f"{sum(1 for c in caches for w in c.writes if w.opcode == 'scatter')} scatter(s) write {per_token:g} B per token of the step's "
               f"{t} tokens (token input {tokens.name} {tokens.shape_text})" if tokens is not None else "")
    if slots:
        how.append(f"the pool holds {total:,} B / {per_token:g} B = {slots:,} token slots"
                   + (f" = {pages} pages of {size}" if pages else " (no pair of its dimensions makes them up)"))
    if table is not None:
        how.append(f"page table {table.name} {table.shape_text}: {table.shape.dims[0]} sequences of up to "
                   f"{table.shape.dims[1]} pages")
    return PagedCache(per_token or None, slots, pages, size, _dim(table, 1), _dim(table, 0), t, [h for h in how if h])


def _dim(p: Parameter | None, i: int) -> int | None:
    return p.shape.dims[i] if p is not None and len(p.shape.dims) > i else None


def _pages(dims, slots: int) -> tuple[int | None, int | None]:
    """(pages, page size): the adjacent cache dimensions whose product is the slots."""
    for i in range(len(dims) - 1):
        if dims[i] * dims[i + 1] == slots and dims[i] > 1 and dims[i + 1] > 1:
            return dims[i], dims[i + 1]
    return None, None


def _indexes_pool(module: HloModule, number: int) -> bool:
    """Whether entry parameter ``number`` reaches the indices of a gather from an array of rank >= 3 (through
    elementwise ops, reshapes and fusions)."""
    entry = module.entry_computation()
    if entry is None:
        return False
    start = next((i.name for i in entry.instructions if i.opcode == "parameter"
                  and i.typed.parameter_number == number), None)
    users, callers = _users(module)
    frontier, seen = [(entry.name, start)], set[tuple[str, str]]()
    while frontier and len(seen) < MAX_STEPS:
        comp_name, name = frontier.pop()
        if name is None or (comp_name, name) in seen:
            continue
        seen.add((comp_name, name))
        if module.computations[comp_name].root == name:          # out of a fusion: its result
            frontier += callers.get(comp_name, [])
        for user, operand in users.get(comp_name, {}).get(name, []):
            if user.opcode == "gather" and operand >= 1:
                source = module.computations[comp_name].by_name().get(user.operands[0])
                if source is not None and len(source.shape.dims) >= 3:
                    return True
            elif user.opcode in ("fusion", "call") and user.called_computations:
                fused = module.computations.get(user.called_computations[0])
                param = next((i.name for i in fused.instructions if i.opcode == "parameter"
                              and i.typed.parameter_number == operand), None) if fused else None
                frontier.append((user.called_computations[0], param))
            elif user.opcode == "custom-call" and any(len(_shape(module, comp_name, o).dims) >= 3 for o in
                                                       user.operands if _shape(module, comp_name, o) is not None):
                return True           # a fused paged-attention kernel takes the table beside the pool
            elif not user.shape.is_tuple and user.shape.element_type in INT_TYPES:
                frontier.append((comp_name, user.name))
    return False


def _shape(module: HloModule, comp_name: str, name: str):
    inst = module.computations[comp_name].by_name().get(name)
    return inst.shape if inst is not None and not inst.shape.is_tuple else None


def _users(module: HloModule) -> tuple[dict, dict]:
    """Per computation, each instruction's users; per fused computation, its fusion call sites."""
    out: dict = {}
    callers: dict = {}
    for comp in module.computations.values():
        users: dict = {}
        for inst in comp.instructions:
            for i, operand in enumerate(inst.operands):
                users.setdefault(operand, []).append((inst, i))
            if inst.opcode in ("fusion", "call") and inst.called_computations:
                callers.setdefault(inst.called_computations[0], []).append((comp.name, inst.name))
        out[comp.name] = users
    return out, callers

