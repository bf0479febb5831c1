"""The model's widths read from the full (unsharded) shapes of the state a step updates: D, the MLP width F and
the number of weight matrices.

An optimized SPMD module's entry parameters are each device's shard, and each carries the sharding of the
whole array (``sharding={devices=[1,4,2]<=[8] last_tile_dim_replicate}``: dimension 1 split four ways). A shard's
dimensions times its tiles are the full array's. Every weight matrix of a transformer or an MLP stack has a
D side (the attention projections, the MLP's up, gate and down matrices, the embeddings), so D is the one
dimension that the most matrices share; F is the widest other side of a 2-D matrix. Read this way the widths
do not depend on how the mesh was read, and blocks of different widths are told apart (the median matrix
over F, the fallback in ``baseline``, is D only when every block has the same F).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from traceview.cost.shapes import byte_size, leaves
from traceview.parallelism.updates import find_updates
from traceview.parsers.hlo.model import HloModule
from traceview.parsers.hlo.sharding import TILED


@dataclass(frozen=True)
class StateWidths:
    d_model: int
    ffn: int
    matrices: int          # weight matrices (a stacked [L, D, F] parameter counts L)
    state_bytes: float     # the whole state (one copy: every matrix at its full shape)
    how: str


def full_dims(local: tuple[int, ...], sharding) -> tuple[int, ...] | None:
    """The whole array's dimensions from one device's shard and the array's sharding; None when the sharding
    does not say (missing, manual, maximal, a tuple, or tiles that do not fit the rank)."""
    if sharding is None:
        return None
    if sharding.kind == "replicated":
        return local
    if sharding.kind != TILED:
        return None
    tiles = sharding.tile_dims
    trailing = len(sharding.last_tile_dims) + (1 if sharding.replicate_last else 0)
    data = tiles[: len(tiles) - trailing] if trailing else tiles
    if len(data) != len(local):
        return None
    return tuple(d * t for d, t in zip(local, data))


def state_widths(module: HloModule | None, state: set[tuple[int, ...]]) -> StateWidths | None:
    """D, F and the matrix count from the full shapes of the state's entry parameters: the parameters the step
    updates, by data flow (parallelism.updates: an input batch of a weight's shape is not state), else those
    whose shape is in ``state`` (sorted dims of the parameters that are also results); None when a matrix's
    sharding does not give its full shape, or no one dimension is shared by more matrices than any other (one
    D x F and one F x D matrix: D and F are tied)."""
    entry = module.entry_computation() if module is not None else None
    if module is None or entry is None or not state:
        return None
    found = find_updates(module)
    updated = found.state if found is not None else None
    shared: Counter[int] = Counter()
    pairs: list[tuple[int, int]] = []
    matrices, total = 0, 0.0
    for inst in entry.instructions:
        if inst.opcode != "parameter":
            continue
        if updated is not None and inst.name not in updated:
            continue
        arrays = [a for a in leaves(inst.shape) if len(a.dims) >= 2
                  and (updated is not None or tuple(sorted(a.dims)) in state)]
        if not arrays:
            continue
        if len(leaves(inst.shape)) != 1:
            return None          # a tuple parameter: one sharding for several arrays is not decoded
        full = full_dims(tuple(arrays[0].dims), inst.typed.sharding)
        if full is None:
            return None
        stack, local, whole = 1, 1, 1
        for d in full[:-2]:
            stack *= d
        for d, f in zip(arrays[0].dims, full):
            local, whole = local * d, whole * f
        total += float(byte_size(arrays[0])) * whole / max(1, local)
        a, b = full[-2:]
        for side in {a, b}:
            shared[side] += stack
        pairs += [(a, b)] * stack
        matrices += stack
    if not pairs:
        return None
    ranked = shared.most_common(2)
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None
    d_model = ranked[0][0]
    others = [b if a == d_model else a for a, b in pairs if d_model in (a, b)]
    ffn = max(others) if others else d_model
    return StateWidths(d_model, ffn, matrices, total,
                       f"{matrices} state matrices' full shapes (shard x tiles): D = {d_model}, the side "
                       f"{ranked[0][1]} of them have; F = {ffn}, the widest other side")
