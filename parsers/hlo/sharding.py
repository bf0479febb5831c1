"""An instruction's ``sharding`` as a typed value (:class:`Sharding`), from the text XLA prints or from an
OpSharding proto.

XLA prints a sharding as ``{replicated}``, ``{manual}``, ``{maximal device=3}``, a tuple of shardings
``{{replicated}, {devices=[2,1]0,1}}``, or a tiled one: ``{devices=[4,2]<=[8]}`` tiles dimension 0 four
ways and dimension 1 two ways, the tile assignment being iota(8) reshaped to [4,2] (the iota form
``<=[dims]T(perm)``: reshape, then transpose, as replica groups) or listed (``devices=[2,2]0,2,1,3``);
``last_tile_dim_replicate`` says the last tile dimension holds replicas, ``last_tile_dims={manual}`` names
the kind of the trailing tile dimensions. Both sources give equal records for the same sharding
(tests/unit/test_hlo_proto_typed.py); the proto's decoder is
:func:`traceview.parsers.hlo.proto_typed.sharding_from_proto`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

from traceview.parsers.hlo.replica_groups import iota_groups

TILED = "other"  # XLA's name for a tiled sharding (OpSharding.Type OTHER)

_TILED_RE = re.compile(r"\{\s*devices=\[([\d,]+)\]\s*(?:<=\[([\d,]+)\](?:T\(([\d,]+)\))?|([\d,\s]+))")
_LAST_TILE_DIMS_RE = re.compile(r"last_tile_dims=\{([^{}]*)\}")
_KIND_RE = re.compile(r"\{\s*([A-Za-z_]\w*)(?=[\s}])")
_MAXIMAL_RE = re.compile(r"device=(\d+)")


@dataclass(frozen=True)
class Sharding:
    """How an instruction's value is laid out over the devices.

    ``kind``: replicated, maximal, tuple, other (tiled), manual, unknown, unreduced. A tiled sharding has
    its tile assignment's dimensions (``tile_dims``) and the device of each tile in row-major order
    (``devices``; None when the assignment does not fit the dimensions); a maximal one its device in
    ``devices``. The elements of a tuple sharding are not decoded (nothing reads them).
    """

    kind: str
    tile_dims: tuple[int, ...] = ()
    devices: tuple[int, ...] | None = None
    replicate_last: bool = False            # the last tile dimension holds replicas, not a split
    last_tile_dims: tuple[str, ...] = ()    # the kinds of the trailing tile dimensions (manual, ...)


@lru_cache(maxsize=1024)
def iota_devices(tile_dims: tuple[int, ...], dims: tuple[int, ...], perm: tuple[int, ...]) -> tuple[int, ...] | None:
    """The devices of the iota form ``<=[dims]T(perm)`` for ``tile_dims``; None when they do not fit."""
    found = iota_groups(1, math.prod(tile_dims), list(dims), list(perm) or None)
    return tuple(found[0]) if found else None


def listed_devices(tile_dims: tuple[int, ...], devices: tuple[int, ...]) -> tuple[int, ...] | None:
    """A listed tile assignment; None when it lists another number of devices than there are tiles."""
    return devices if len(devices) == math.prod(tile_dims) else None


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(" ", "").split(",") if x)


@lru_cache(maxsize=4096)
def parse_sharding(text: str | None) -> Sharding | None:
    """The sharding XLA's text prints; None when absent or in no form above."""
    if text is None:
        return None
    t = text.strip()
    if t.startswith("{{") or t == "{}":
        return Sharding("tuple")
    m = _TILED_RE.match(t)
    if m:
        tiles = _ints(m.group(1))
        if m.group(2):
            devices = iota_devices(tiles, _ints(m.group(2)), _ints(m.group(3) or ""))
        else:
            devices = listed_devices(tiles, _ints(m.group(4)))
        rest = t[m.end():]
        last = _LAST_TILE_DIMS_RE.search(rest)
        kinds = tuple(k.strip() for k in last.group(1).split(",") if k.strip()) if last else ()
        return Sharding(TILED, tiles, devices, "last_tile_dim_replicate" in rest, kinds)
    m = _KIND_RE.match(t)
    if m is None:
        return None
    if m.group(1) == "maximal":
        device = _MAXIMAL_RE.search(t, m.end())
        return Sharding("maximal", devices=(int(device.group(1)) if device else 0,))
    return Sharding(m.group(1))

