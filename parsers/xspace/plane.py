"""One XPlane's names and stats, looked up once: event metadata by id, stats by name."""

from __future__ import annotations

import numpy as np

from traceview.parsers.profile import Device


def stat_value(stat, stat_names: dict[int, str]):
    """A stat's python value; ref_value resolves to the referenced stat metadata's name."""
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":
        return stat_names.get(stat.ref_value, "")
    return getattr(stat, kind)


def stats_dict(stats, stat_names: dict[int, str]) -> dict:
    return {stat_names.get(s.metadata_id, str(s.metadata_id)): stat_value(s, stat_names) for s in stats}


class PlaneView:
    """Name and stat lookups for one XPlane, computed once."""

    def __init__(self, plane) -> None:
        self.plane = plane
        self.stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        self.stat_ids = {v: k for k, v in self.stat_names.items()}
        md = plane.event_metadata
        ids = np.fromiter(md.keys(), dtype=np.int64, count=len(md))
        order = np.argsort(ids)
        self.md_ids = ids[order]
        self.md_list = [md[int(i)] for i in self.md_ids]
        self._md_stats: list[dict] | None = None

    def md_index(self, metadata_ids: np.ndarray) -> np.ndarray:
        """Index into md_list for each metadata id (unknown ids -> -1)."""
        if self.md_ids.size == 0:
            return np.full(metadata_ids.size, -1, dtype=np.int64)
        pos = np.searchsorted(self.md_ids, metadata_ids)
        pos = np.minimum(pos, self.md_ids.size - 1)
        return np.where(self.md_ids[pos] == metadata_ids, pos, -1)

    def md_stats(self) -> list[dict]:
        if self._md_stats is None:
            self._md_stats = [stats_dict(m.stats, self.stat_names) for m in self.md_list]
        return self._md_stats

    def plane_stats(self) -> dict:
        return stats_dict(self.plane.stats, self.stat_names)


def device_of(plane_view: PlaneView, host: str, kind: str, ordinal: str) -> Device:
    return Device.from_plane_stats(f"{host}/{kind}:{ordinal}", host, kind, plane_view.plane_stats())
