"""The cost record every rule returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Cost:
    flops: float = 0.0
    transcendentals: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    bytes_accessed: float = 0.0
    unknown: bool = False
    note: str = ""            # why a figure is what it is (library rule, unknown target, ...)
    lower_bound: bool = False  # bytes are what the op must move at least; its FLOPs are not known

    def add(self, other: Cost, times: float = 1.0) -> None:
        self.flops += other.flops * times
        self.transcendentals += other.transcendentals * times
        self.bytes_read += other.bytes_read * times
        self.bytes_written += other.bytes_written * times
        self.bytes_accessed += other.bytes_accessed * times
        self.unknown = self.unknown or other.unknown
        self.lower_bound = self.lower_bound or other.lower_bound


def io_cost(read: float, written: float, flops: float = 0.0, trans: float = 0.0) -> Cost:
    return Cost(flops, trans, read, written, read + written)


