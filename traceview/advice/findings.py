"""What a piece of advice is, what a provider of advice sees, and how the list is ranked.

A *provider* is a function ``provider(context) -> Iterable[Advice]``. The context carries the
pipeline's tables, the mean device span (what ``saving_share`` is a share of), and the other views,
each built only when a provider asks for it (:meth:`AdviceContext.view`). Adding a source of advice is
writing one provider and listing it; nothing else changes (see ``traceview.advice`` for how a
named-scope and a serving provider plug in).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from traceview.timeline.overlap import Overlap
from traceview.units import fmt_time_us

UNQUANTIFIED = "no honest estimate of the time saved: ranked after the quantified items"


@dataclass(frozen=True)
class Advice:
    """One thing to fix. ``saving_ps``: device time per device the fix removes at most (it never
    exceeds ``removable_ps``, the time the finding measured); None where no estimate is honest.
    ``rule``: the book's section or formula, or the measurement it rests on; ``evidence``: what was
    measured; ``fix``: what to do. ``tab``: the dashboard tab that shows it."""

    kind: str
    title: str
    saving_ps: float | None
    rule: str
    evidence: tuple[str, ...] = ()
    fix: str = ""
    tab: str = "Overview"
    removable_ps: float | None = None
    rank: int = 0


ViewGetter = Callable[[], Any]


@dataclass
class AdviceContext:
    """What providers read. ``span_ps``: the active devices' mean span (first op start to last op end);
    ``active_devices``: how many devices ran ops; ``pipeline``: ``analysis.build.PipelineResult``;
    ``views``: name -> a function that builds that view (``parallelism``, ``memory``, ``idle``,
    ``stragglers``, ``scopes``, ``serving``); each is built once, on first use. ``overlap``: the devices'
    op time against their busy time (timeline.overlap), what turns an op-time gain into wall time."""

    pipeline: Any
    span_ps: float
    active_devices: int
    views: dict[str, ViewGetter] = field(default_factory=dict)
    overlap: Overlap = field(default_factory=lambda: Overlap(0.0, 0.0))
    _built: dict[str, Any] = field(default_factory=dict, repr=False)

    def view(self, name: str) -> Any:
        """The view ``name`` (None when this analysis has no such view)."""
        if name not in self._built:
            getter = self.views.get(name)
            self._built[name] = getter() if getter is not None else None
        return self._built[name]

    def per_device(self, total_ps: float) -> float:
        """A time summed over the active devices, per device."""
        return total_ps / max(self.active_devices, 1)

    def wall_per_device(self, op_time_ps: float) -> float:
        """An op-time figure summed over the active devices (a gain, a self time), as wall time per device:
        where ops overlap, never more than the busy time."""
        return self.overlap.wall(self.per_device(op_time_ps))

    def op_time_note(self, op_time_ps: float) -> str:
        """What an op-time gain (summed over devices) was before it became wall time ("" without overlap)."""
        if not self.overlap.overlapped:
            return ""
        ratio = self.overlap.op_time_ps / self.overlap.busy_ps
        return (f"; gain {fmt_time_us(self.per_device(op_time_ps) / 1e6)} of op time per device, and the ops "
                f"overlap {ratio:.2f}x (op time / busy time): the wall time saved is that / {ratio:.2f}")


Provider = Callable[[AdviceContext], Iterable[Advice]]


def ranked(items: Iterable[Advice], span_ps: float) -> list[Advice]:
    """Quantified items by saving, largest first, then the unquantified ones in the order given;
    each saving capped by the time it removes and by the span; ranks from 1."""
    quantified, other = [], []
    for item in items:
        saving = item.saving_ps
        if saving is None or not math.isfinite(saving):
            other.append(replace(item, saving_ps=None))
            continue
        cap = min(c for c in (item.removable_ps, span_ps if span_ps > 0 else None, saving) if c is not None)
        quantified.append(replace(item, saving_ps=max(float(cap), 0.0)))
    quantified.sort(key=lambda a: -(a.saving_ps or 0.0))
    return [replace(item, rank=i) for i, item in enumerate(quantified + other, start=1)]


def advice_json(item: Advice, span_ps: float) -> dict[str, Any]:
    """One item as the ``advice`` list of ``analyze --format json`` holds it."""
    saving_us = None if item.saving_ps is None else item.saving_ps / 1e6
    return {"rank": item.rank, "kind": item.kind, "title": item.title, "saving_us": saving_us,
            "saving_share": None if item.saving_ps is None or span_ps <= 0 else item.saving_ps / span_ps,
            "rule": item.rule, "evidence": list(item.evidence), "fix": item.fix, "tab": item.tab}
