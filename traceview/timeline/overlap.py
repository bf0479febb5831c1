"""How much a device's ops overlap each other: op time against busy time, and savings in wall time.

On a CPU, XLA hands work to a thread pool and several ops run at once; on a
GPU, kernels of several streams can too. Their self times then add up to more
than the time the device was busy (the union of its ops' intervals): the
transformer sample holds 97.7 ms of op time in 50.0 ms of busy time. A gain
summed over op time (an op's time minus its roofline time) can then exceed
the whole span, which reads as an error, and no fix can remove more wall time
than the device was busy.

So a saving is also stated in wall time: the op-time gain times the share of
op time that was wall time, ``busy / op time`` (at most 1). Summed over every
op, that is at most the busy time; it assumes the ops would keep overlapping
as they did. Where ops do not overlap (a TPU's one op at a time) the factor is
1 and the two figures are one.
"""

from __future__ import annotations

from dataclasses import dataclass

from traceview.units import fmt_time_us

# Op time at most this much above busy time is not overlap worth a word (clock rounding, nested ops).
NEGLIGIBLE = 1e-3


@dataclass(frozen=True)
class Overlap:
    """Op self time and busy time of the same devices (summed over them), in picoseconds."""

    op_time_ps: float
    busy_ps: float

    @property
    def factor(self) -> float:
        """Wall time per unit of op time: busy / op time, at most 1 (1 when either is unknown or 0)."""
        if self.op_time_ps <= 0 or self.busy_ps <= 0:
            return 1.0
        return min(1.0, self.busy_ps / self.op_time_ps)

    @property
    def overlapped(self) -> bool:
        """Whether the ops ran concurrently enough for the op-time and wall figures to differ."""
        return self.op_time_ps > self.busy_ps * (1.0 + NEGLIGIBLE) and self.busy_ps > 0

    def wall(self, op_time_ps: float) -> float:
        """An op-time figure (a gain, a self time) as the wall time it stands for."""
        return op_time_ps * self.factor

    def ratio_text(self) -> str:
        """Op time over busy time as the reports write it: two decimals, three below 1.01 (an overlap of 0.1%
        is not "1.00x", which reads as none); "-" when the busy time is unknown."""
        if self.busy_ps <= 0:
            return "-"
        ratio = self.op_time_ps / self.busy_ps
        return f"{ratio:.2f}" if ratio >= 1.01 else f"{ratio:.3f}"

    def describe(self) -> str:
        """One phrase for the reports: how much the ops overlapped and what a wall saving is."""
        ratio = self.ratio_text()
        return (f"ops overlap {ratio}x: {fmt_time_us(self.op_time_ps / 1e6)} of op time in "
                f"{fmt_time_us(self.busy_ps / 1e6)} busy (ops in flight at once: concurrent streams, a CPU's "
                f"thread pool, asynchronous copies); a wall-time saving = the op-time gain / {ratio}")
