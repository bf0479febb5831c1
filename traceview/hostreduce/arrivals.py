"""What a run keeps of each host as it arrives: folded into running results, not held until the last host.

``trace.read.load_profile`` hands each host's part to :meth:`Arrivals.add` as its result comes in (before
its arrays are spilled): its reduced step table is folded into the run's step times
(``timeline.step_parts.StepFold``) and its step spans' per-step sums into the stragglers' running sums
(``timeline.lateness.SpanFold``), after which the part lets its own sums go. A pod's parent then holds one
running result per fold, whatever the number of its hosts, in place of a few hundred kB per host. The names
a pod's hosts repeat (ops, modules, devices, threads) are kept once for the run (:class:`Names`).
"""

from __future__ import annotations

import numpy as np

from traceview.hostreduce.part import HostPart
from traceview.hostreduce.step_times import fold_in
from traceview.timeline.lateness import SpanFold
from traceview.timeline.step_parts import StepFold


class Arrivals:
    """The running folds of a run's hosts, in any order they arrive (each fold is order-free)."""

    def __init__(self) -> None:
        self.steps = StepFold()
        self.spans = SpanFold()
        self.names = Names()

    def add(self, part: HostPart) -> None:
        """Fold one host's part in; its step spans' sums are the run's now, and leave the part; its names are
        the run's copies (:class:`Names`)."""
        self.names.share(part)
        fold_in(self.steps, part)
        summary = part.ops.activity.span_summary
        self.spans.add(summary)
        if summary is not None:
            summary.sums = None


class Names:
    """One copy of each name a run's hosts repeat: the pod's hosts run the same programs, so each host's part
    arrives with its own copies of the same op, module, device-line and host-thread names (tens of kB a host
    in a pod's parent). A host's names are replaced, in place, by the first equal one the run saw: the same
    values, so whatever reads them reads the same."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def one(self, name: str) -> str:
        return self._seen.setdefault(name, name)

    def share(self, part: HostPart) -> None:
        """Every name list and name array of ``part`` made of the run's copies."""
        ops = part.ops
        for names in (ops.op_names, ops.modules, ops.devices):
            self._in_list(names)
        activity = ops.activity
        for device in activity.devices.values():
            self._in_array(device.collective_names)
        for sets in (activity.hosts or {}).values():
            self._in_list(sets.threads)
            if sets.pieces is not None:
                self._in_array(sets.pieces.names)

    def _in_list(self, names: list) -> None:
        names[:] = [self.one(n) if type(n) is str else n for n in names]

    def _in_array(self, names: np.ndarray) -> None:
        if names.dtype == object and names.size and names.flags.writeable:
            names[:] = [self.one(n) if type(n) is str else n for n in names.tolist()]
