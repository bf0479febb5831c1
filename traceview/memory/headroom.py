"""Does a peak fit the target chip's HBM, and by how much does it miss?"""

from __future__ import annotations

from dataclasses import dataclass

from traceview.hardware.chips import Chip


@dataclass
class Headroom:
    target: str
    capacity_bytes: int | None      # the chip's HBM capacity (None: the database has no figure)
    capacity_source: str | None
    peak_bytes: int
    fits: bool | None               # None when the capacity is unknown
    headroom_bytes: int | None      # capacity - peak; negative: by how much it misses


def headroom(peak_bytes: int, chip: Chip) -> Headroom:
    capacity = int(chip.hbm_capacity) if chip.hbm_capacity else None
    return Headroom(target=chip.name, capacity_bytes=capacity, capacity_source=chip.sources.get("hbm_capacity"),
                    peak_bytes=peak_bytes, fits=None if capacity is None else peak_bytes <= capacity,
                    headroom_bytes=None if capacity is None else capacity - peak_bytes)


def is_device_memory(name: str) -> bool:
    """Allocators of device memory (GPU_0_bfc, TPU index "0"), not the pinned host pools (xla_gpu_host_bfc)."""
    return "host" not in name.lower()
