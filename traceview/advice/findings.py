"""What a piece of advice is, what a provider of advice sees, and how the list is ranked.

A *provider* is a function ``provider(context) -> Iterable[Advice]``. The context carries the
pipeline's tables, the mean device span (what ``saving_share`` is a share of), the idle causes and
stragglers, and the other views' typed reports, each built only when a provider asks for it
(:meth:`AdviceContext.memory` and its siblings). Adding a source of advice is
writing one provider and listing it; nothing else changes (see ``traceview.advice`` for how a
named-scope and a serving provider plug in).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from traceview.timeline.overlap import Overlap
from traceview.units import clipped, fmt_time_us

if TYPE_CHECKING:
    from traceview.advice.idle import IdleCauses
    from traceview.advice.stragglers import Stragglers
    from traceview.analysis.build import PipelineResult
    from traceview.inference.view import InferenceReport
    from traceview.memory.view import MemoryReport
    from traceview.parallelism.report import Parallelism
    from traceview.scopes.tree import ScopeTree

UNQUANTIFIED = "no honest estimate of the time saved: ranked after the quantified items"
NAME_WIDTH = 80     # a host event's name in the text blocks at most (the JSON keeps it whole)


def short_name(name: object, width: int = NAME_WIDTH) -> str:
    """A host event's name as the text blocks show it: a C++ kernel's template and call arguments folded
    (``void Eigen::internal::EigenMetaKernel<...>(...)``), then cut to ``width`` characters with an ellipsis."""
    text = str(name)
    if len(text) <= width:
        return text
    folded, depth = [], 0
    for ch in text:
        if ch in "<(":
            if depth == 0:
                folded.append(ch + "...")
            depth += 1
        elif ch in ">)" and depth > 0:
            depth -= 1
            if depth == 0:
                folded.append(ch)
        elif depth == 0:
            folded.append(ch)
    text = "".join(folded) if depth == 0 else text
    return clipped(text, width)


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


def _none() -> None:
    return None


@dataclass
class Views:
    """The other views advice reads, as getters: each is called only when a provider first asks for its
    view, and gives None when the analysis has no such view. ``parallelism``: the mesh ``analyze``
    summarises (``parallelism.summary``), None without one; ``memory``: the memory report; ``scopes``: the
    named-scope tree; ``serving``: the inference report, None when no program with a KV cache ran."""

    parallelism: Callable[[], Parallelism | None] = _none
    memory: Callable[[], MemoryReport | None] = _none
    scopes: Callable[[], ScopeTree | None] = _none
    serving: Callable[[], InferenceReport | None] = _none


@dataclass
class AdviceContext:
    """What providers read. ``span_ps``: the active devices' mean span (first op start to last op end);
    ``active_devices``: how many devices ran ops; ``pipeline``: ``analysis.build.PipelineResult``;
    ``idle`` and ``stragglers``: the advice view's own findings; ``views``: the other views' getters,
    each built once, on first use (:meth:`parallelism`, :meth:`memory`, :meth:`scopes`, :meth:`serving`).
    ``overlap``: the devices' op time against their busy time (timeline.overlap), what turns an op-time
    gain into wall time."""

    pipeline: PipelineResult
    span_ps: float
    active_devices: int
    views: Views = field(default_factory=Views)
    overlap: Overlap = field(default_factory=lambda: Overlap(0.0, 0.0))
    idle: IdleCauses | None = None
    stragglers: Stragglers | None = None
    _built: dict[str, Any] = field(default_factory=dict, repr=False)

    def _view(self, name: str) -> Any:
        if name not in self._built:
            self._built[name] = getattr(self.views, name)()
        return self._built[name]

    def parallelism(self) -> Parallelism | None:
        """The mesh report (None when ``analyze`` has no mesh to summarise)."""
        return self._view("parallelism")

    def memory(self) -> MemoryReport | None:
        """The memory report (runtime and static peaks, headroom)."""
        return self._view("memory")

    def scopes(self) -> ScopeTree | None:
        """The named-scope tree."""
        return self._view("scopes")

    def serving(self) -> InferenceReport | None:
        """The serving phases (None when no program with a KV cache ran)."""
        return self._view("serving")

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
        shown = self.overlap.ratio_text()
        return (f"; gain {fmt_time_us(self.per_device(op_time_ps) / 1e6)} of op time per device, and the ops "
                f"overlap {shown}x (op time / busy time): the wall time saved is that / {shown}")


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
