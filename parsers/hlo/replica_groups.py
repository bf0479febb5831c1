"""The device groups of a ``replica_groups`` attribute, in any of XLA's three forms (explicit, iota,
mesh)."""

from __future__ import annotations

import math
import re
from itertools import pairwise

MAX_DEVICES = 1 << 20  # more devices than any machine has: a replica_groups form this large is corrupt
_IOTA_GROUPS_RE = re.compile(r"^\[(\d+),(\d+)\]<=\[([\d,]*)\](?:T\(([\d,]*)\))?$")
_MESH_RE = re.compile(r"^mesh\[(.*?)\]\s*\{(.*)\}$")
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
    import numpy as np

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
        n_groups, size = int(m.group(1)), int(m.group(2))
        dims = [int(x) for x in m.group(3).split(",") if x]
        perm = [int(x) for x in m.group(4).split(",") if x] if m.group(4) else list(range(len(dims)))
        total = math.prod(dims)
        # Forms that do not fit (group count x size != device count, a bad transpose) are unreadable.
        if total != n_groups * size or total > MAX_DEVICES or sorted(perm) != list(range(len(dims))):
            return None
        ids = np.arange(total).reshape(dims).transpose(perm)
        return ids.reshape(n_groups, size).tolist()
    m = _MESH_RE.match(t)
    if m:
        try:
            return _mesh_groups(m, device_ids)
        except (ValueError, IndexError, OverflowError, ZeroDivisionError):  # a mesh that does not fit its axes
            return None
    return None


def _mesh_groups(m: re.Match, device_ids: list[int] | None) -> list[list[int]] | None:
    """Groups of a ``mesh[...] {axes}`` form (see parse_replica_groups)."""
    import numpy as np

    axes = [(name, int(size)) for name, size in _MESH_AXIS_RE.findall(m.group(1))]
    # split every axis into (pre, size, post) pieces so sub-axes can be picked out
    pieces: list[tuple[str, int, int]] = []  # (axis, pre_size, size) per reshaped dim
    wanted = _GROUP_AXIS_RE.findall(m.group(2))
    splits: dict[str, list[int]] = {}
    for name, pre, size in wanted:
        if pre:
            splits.setdefault(name, []).append(int(pre))
            splits[name].append(int(pre) * int(size))
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
            if not pre or (ppre >= int(pre) and ppre * psize <= int(pre) * int(size)):
                group_dims.append(i)
    other = [i for i in range(len(pieces)) if i not in group_dims]
    group_size = int(np.prod([pieces[i][2] for i in group_dims])) if group_dims else 1
    return ids.transpose(other + group_dims).reshape(-1, group_size).tolist()
