"""Which mesh axes each collective runs over.

A collective with replica groups runs over the subset S of (non-trivial) mesh
axes whose mesh groups (:meth:`Mesh.groups`) equal its groups, compared as
sets of sets. A point-to-point collective (collective-permute, send/recv) runs
over the axes along which its source and target coordinates differ.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from traceview.parallelism.groups import CollectiveSite
from traceview.parallelism.mesh import Mesh


@dataclass
class Attribution:
    site: CollectiveSite
    axes: list[str] | None     # None: not attributed (see reason); []: no cross-device traffic
    reason: str = ""

    @property
    def label(self) -> str:
        if self.axes is None:
            return "unattributed"
        return "+".join(self.axes) if self.axes else "local"


def as_sets(groups: list[list[int]]) -> frozenset[frozenset[int]]:
    return frozenset(frozenset(g) for g in groups)


def attribute_all(sites: list[CollectiveSite], mesh: Mesh | None, why_no_mesh: str = "") -> list[Attribution]:
    cache: dict[frozenset[frozenset[int]], tuple[list[str] | None, str]] = {}
    out = []
    for site in sites:
        if mesh is None:
            out.append(Attribution(site, None, why_no_mesh or "no mesh"))
        elif site.pairs is not None:
            out.append(_point_to_point(site, mesh))
        elif site.groups is None:
            out.append(Attribution(site, None, site.note or "replica groups unknown"))
        elif not site.groups:
            out.append(Attribution(site, [a.name for a in mesh.axes if a.size > 1], "all devices"))
        else:
            key = as_sets(site.groups)
            if key not in cache:
                cache[key] = axes_of_groups(key, mesh)
            axes, reason = cache[key]
            out.append(Attribution(site, axes, reason))
    return out


def axes_of_groups(groups: frozenset[frozenset[int]], mesh: Mesh) -> tuple[list[str] | None, str]:
    """The mesh axes whose groups are exactly ``groups`` (None and why, when no set of axes has them)."""
    size = len(next(iter(groups)))
    if size <= 1:
        return [], "groups of one device"
    real = [a for a in mesh.axes if a.size > 1]
    for r in range(1, len(real) + 1):
        for subset in itertools.combinations(real, r):
            if math.prod(a.size for a in subset) != size:
                continue
            names = [a.name for a in subset]
            if as_sets(mesh.groups(names)) == groups:
                return names, ""
    sample = sorted(sorted(g) for g in groups)[:2]
    return None, f"groups {sample}... match no set of mesh axes"


def _point_to_point(site: CollectiveSite, mesh: Mesh) -> Attribution:
    axes: set[int] = set()
    for source, target in site.pairs or []:
        a, b = mesh.coordinates(source), mesh.coordinates(target)
        if a is None or b is None:
            return Attribution(site, None, f"device {source if a is None else target} is outside the mesh")
        axes |= {i for i, (x, y) in enumerate(zip(a, b)) if x != y}
    return Attribution(site, [mesh.axes[i].name for i in sorted(axes)], site.note)
