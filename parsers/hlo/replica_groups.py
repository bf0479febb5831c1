"""The device groups of a ``replica_groups`` attribute, in any of XLA's three forms (explicit, iota,
mesh)."""

from __future__ import annotations

import math
import re
from itertools import pairwise

MAX_DEVICES = 1 << 20  # more devices than any machine has: a replica_groups form this large is corrupt
_IOTA_GROUPS_RE = re.compile(r"^\[(\d+),(\d+)\]<=\[([\d,]*)\](?:T\(([\d,]*)\))?$")
_MESH_RE = re.compile(r"^mesh\[(.*?)\]\s*\{(.*)\}$")
_MESH_PREFIX_RE = re.compile(r"^mesh\[(.*?)\]")
_MESH_AXIS_RE = re.compile(r"'([^']*)'=(\d+)")
_GROUP_AXIS_RE = re.compile(r"'([^']*)'(?::\((\d+)\)(\d+))?")


def parse_replica_groups(text: str, device_ids: list[int] | None = None) -> list[list[int]] | None:
    """The device groups a ``replica_groups`` attribute lists, in any of XLA's three forms.

    ``{{0,1},{2,3}}`` (explicit), ``[2,4]<=[8]`` / ``[4,2]<=[2,4]T(1,0)`` (iota:
    reshape iota(N) to the dims, transpose, reshape to groups x size) and
    ``mesh['a'=2,'b'=4] {'a'}`` (devices of a mesh that differ only along the
    listed axes). ``{}`` gives ``[]`` (one group of all devices, by XLA's
    convention); text in none of these forms gives None.
    """
    t = text.strip()
    if t.startswith("{"):
        inner = t[1:-1].strip()
        if not inner:
            return []
        try:
            return [[int(x) for x in g.split(",") if x.strip()] for g in re.findall(r"\{([^{}]*)\}", inner)]
        except ValueError:
            return None
    m = _IOTA_GROUPS_RE.match(t)
    if m:
        dims = [int(x) for x in m.group(3).split(",") if x]
        perm = [int(x) for x in m.group(4).split(",") if x] if m.group(4) else None
        return iota_groups(int(m.group(1)), int(m.group(2)), dims, perm)
    m = _MESH_RE.match(t)
    if m:
        axes = [(name, int(size)) for name, size in _MESH_AXIS_RE.findall(m.group(1))]
        wanted = [(name, int(pre) if pre else None, int(size) if pre else None)
                  for name, pre, size in _GROUP_AXIS_RE.findall(m.group(2))]
        return mesh_groups(axes, wanted, device_ids)
    return None


def mesh_axes(text: str | None) -> tuple[tuple[str, int], ...]:
    """The mesh (axis names and sizes) a mesh-form ``replica_groups`` names, whatever the axes it lists
    after; () for any other form."""
    m = _MESH_PREFIX_RE.match(text.strip()) if text else None
    return tuple((name, int(size)) for name, size in _MESH_AXIS_RE.findall(m.group(1))) if m else ()


def iota_groups(n_groups: int, size: int, dims: list[int], perm: list[int] | None) -> list[list[int]] | None:
    """The groups of the iota form ``[n_groups,size]<=[dims]T(perm)``: iota(N) reshaped to ``dims``,
    transposed by ``perm`` (None or empty: no transpose), read as ``n_groups`` rows of ``size``.

    None when the form does not fit (group count x size != device count, a bad transpose, more devices
    than MAX_DEVICES).
    """
    import numpy as np

    perm = list(perm) if perm else list(range(len(dims)))
    if any(d < 0 for d in dims):
        return None
    total = math.prod(dims)
    if total != n_groups * size or total > MAX_DEVICES or sorted(perm) != list(range(len(dims))):
        return None
    ids = np.arange(total).reshape(dims).transpose(perm)
    return ids.reshape(n_groups, size).tolist()


def mesh_groups(axes: list[tuple[str, int]], wanted: list[tuple[str, int | None, int | None]],
                device_ids: list[int] | None) -> list[list[int]] | None:
    """The groups of the mesh form ``mesh['a'=2,'b'=4] {'a'}``: the devices of the mesh (``axes``: name
    and size; ``device_ids``: the mesh's devices in order, None for iota) that differ only along the
    ``wanted`` axes (name, and the sub-axis's pre-size and size, or None for the whole axis).

    None when the mesh does not fit its axes.
    """
    try:
        return _mesh_groups(axes, wanted, device_ids)
    except (ValueError, IndexError, OverflowError, ZeroDivisionError):
        return None


def _mesh_groups(axes: list[tuple[str, int]], wanted: list[tuple[str, int | None, int | None]],
                 device_ids: list[int] | None) -> list[list[int]] | None:
    import numpy as np

    # split every axis into (pre, size, post) pieces so sub-axes can be picked out
    pieces: list[tuple[str, int, int]] = []  # (axis, pre_size, size) per reshaped dim
    splits: dict[str, list[int]] = {}
    for name, pre, size in wanted:
        if pre is not None:
            splits.setdefault(name, []).append(pre)
            splits[name].append(pre * (size or 0))
    for name, full in axes:
        cuts = sorted({1, full, *splits.get(name, [])})
        for lo, hi in pairwise(cuts):
            pieces.append((name, lo, hi // lo))
        if full == 1:
            pieces.append((name, 1, 1))
    total = math.prod(s for _, s in axes) if axes else 1
    if total > MAX_DEVICES:
        return None
    ids = np.asarray(device_ids if device_ids is not None else np.arange(total))
    ids = ids.reshape([p[2] for p in pieces] or [1])
    group_dims: list[int] = []
    for name, pre, size in wanted:
        for i, (pname, ppre, psize) in enumerate(pieces):
            if pname != name:
                continue
            if pre is None or (ppre >= pre and ppre * psize <= pre * (size or 0)):
                group_dims.append(i)
    other = [i for i in range(len(pieces)) if i not in group_dims]
    group_size = int(np.prod([pieces[i][2] for i in group_dims])) if group_dims else 1
    return ids.transpose(other + group_dims).reshape(-1, group_size).tolist()
