"""What a run keeps of each host as it arrives: folded into running results, not held until the last host.

``trace.read.load_profile`` hands each host's part to :meth:`Arrivals.add` as its result comes in (before
its arrays are spilled): its reduced step table is folded into the run's step times
(``timeline.step_parts.StepFold``) and its step spans' per-step sums into the stragglers' running sums
(``timeline.lateness.SpanFold``), after which the part lets its own sums go. A pod's parent then holds one
running result per fold, whatever the number of its hosts, in place of a few hundred kB per host.
"""

from __future__ import annotations

from traceview.hostreduce.part import HostPart
from traceview.hostreduce.step_times import fold_in
from traceview.timeline.lateness import SpanFold
from traceview.timeline.step_parts import StepFold


class Arrivals:
    """The running folds of a run's hosts, in any order they arrive (each fold is order-free)."""

    def __init__(self) -> None:
        self.steps = StepFold()
        self.spans = SpanFold()

    def add(self, part: HostPart) -> None:
        """Fold one host's part in; its step spans' sums are the run's now, and leave the part."""
        fold_in(self.steps, part)
        summary = part.ops.activity.span_summary
        self.spans.add(summary)
        if summary is not None:
            summary.sums = None
