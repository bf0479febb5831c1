"""How each entry parameter is split over the devices, from its HLO ``sharding`` attribute.

The sharding is the instruction's typed one (``Instruction.typed.sharding``, decoded once by the HLO
reader from text or from the proto: :mod:`traceview.parsers.hlo.sharding`). ``{devices=[4,2]<=[8]}``
tiles dimension 0 four ways and dimension 1 two ways over the devices in tile order; with
``last_tile_dim_replicate`` the last tile dimension holds replicas, not a split. The devices that differ
only in their tile index along dimension i form the groups dimension i is split over: the same groups a
collective over those mesh axes has, so :mod:`attribution` names the axes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from traceview.cost.shapes import shape_text
from traceview.parsers.hlo.model import HloModule
from traceview.parsers.hlo.sharding import TILED, Sharding


@dataclass
class ParameterSharding:
    module: str
    name: str
    label: str                               # the user's name (op_name metadata), else the instruction's
    shape: str
    dim_groups: dict[int, list[list[int]]] = field(default_factory=dict)   # tensor dim -> device groups
    axes: dict[int, list[str] | None] = field(default_factory=dict)      # tensor dim -> mesh axes


def tile_groups(sharding: Sharding | None) -> dict[int, list[list[int]]] | None:
    """Tensor dimension -> the device groups it is split over; None when it is no tiled sharding (or one
    whose tile assignment does not fit, or with subgroups of other kinds, manual or more, which are not
    read)."""
    if sharding is None or sharding.kind != TILED or sharding.devices is None or sharding.last_tile_dims:
        return None
    tiles = list(sharding.tile_dims)
    grid = np.asarray(sharding.devices, dtype=np.int64).reshape(tiles)
    tensor_dims = len(tiles) - (1 if sharding.replicate_last else 0)
    out = {}
    for i in range(tensor_dims):
        if tiles[i] > 1:
            order = [j for j in range(len(tiles)) if j != i] + [i]
            out[i] = grid.transpose(order).reshape(-1, tiles[i]).tolist()
    return out


def parameter_shardings(module: HloModule) -> list[ParameterSharding]:
    entry = module.entry_computation()
    if entry is None:
        return []
    out = []
    for inst in entry.instructions:
        if inst.opcode != "parameter":
            continue
        groups = tile_groups(inst.typed.sharding)
        if groups is None:
            continue
        out.append(ParameterSharding(module.name, inst.name, inst.metadata.get("op_name") or inst.name,
                                     shape_text(inst.shape), groups))
    return out
