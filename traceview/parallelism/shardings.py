"""How each entry parameter is split over the devices, from its HLO ``sharding`` attribute.

``{devices=[4,2]<=[8]}`` tiles dimension 0 four ways and dimension 1 two ways;
the tile assignment is iota(8) reshaped to [4,2] (an explicit list, or the
iota form ``<=[dims]T(perm)``, reshape then transpose, as replica groups).
With ``last_tile_dim_replicate`` the last tile dimension holds replicas, not
a split. The devices that differ only in their tile index along dimension i
form the groups dimension i is split over: the same groups a collective over
those mesh axes has, so :mod:`attribution` names the axes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from traceview.cost.shapes import shape_text
from traceview.parsers.hlo.model import HloModule

_DEVICES_RE = re.compile(r"devices=\[([\d,]+)\]\s*(?:<=\[([\d,]+)\](?:T\(([\d,]+)\))?|([\d,\s]+))")


@dataclass
class ParameterSharding:
    module: str
    name: str
    label: str                               # the user's name (op_name metadata), else the instruction's
    shape: str
    dim_groups: dict[int, list[list[int]]] = field(default_factory=dict)   # tensor dim -> device groups
    axes: dict[int, list[str] | None] = field(default_factory=dict)      # tensor dim -> mesh axes


def tile_groups(sharding: str) -> dict[int, list[list[int]]] | None:
    """Tensor dimension -> the device groups it is split over; None when the text is not a tiled sharding."""
    m = _DEVICES_RE.search(sharding)
    if not m or sharding.strip().startswith("{{"):
        return None
    tiles = [int(x) for x in m.group(1).split(",") if x]
    count = int(np.prod(tiles))
    if m.group(2):
        dims = [int(x) for x in m.group(2).split(",") if x]
        if int(np.prod(dims)) != count:
            return None
        ids = np.arange(count).reshape(dims)
        if m.group(3):
            perm = [int(x) for x in m.group(3).split(",") if x]
            if sorted(perm) != list(range(len(dims))):
                return None
            ids = ids.transpose(perm)
    else:
        listed = [int(x) for x in m.group(4).replace(" ", "").split(",") if x]
        if len(listed) != count:
            return None
        ids = np.asarray(listed)
    grid = ids.reshape(tiles)
    tensor_dims = len(tiles) - (1 if "last_tile_dim_replicate" in sharding else 0)
    if "last_tile_dims=" in sharding:       # manual / other subgroup kinds: not read
        return None
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
        text = inst.attributes.get("sharding")
        if inst.opcode != "parameter" or not text:
            continue
        groups = tile_groups(text)
        if groups is None:
            continue
        out.append(ParameterSharding(module.name, inst.name, inst.metadata.get("op_name") or inst.name,
                                     shape_text(inst.shape), groups))
    return out
