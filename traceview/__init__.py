"""traceview: roofline analysis of XLA / JAX profiler traces.

The public API (docs/api.md)::

    import traceview
    a = traceview.load("sample_traces/transformer")   # -> Analysis
    a.ops.head()                                      # one row per (program, op), by gain (time saved at the roofline)
    v5p = a.retarget("tpu-v5p")                       # same trace, judged on another chip

Names resolve on first use (module ``__getattr__``), so ``import traceview``
and ``traceview --version`` stay cheap: pandas loads only when a name needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from traceview.version import __version__

# Public name -> the module that defines it.
_EXPORTS = {
    "load": "traceview.api.analysis",
    "Analysis": "traceview.api.analysis",
    "Summary": "traceview.api.analysis",
    "hlo": "traceview.api.hlo",
    "HloReport": "traceview.api.hlo",
    "diff": "traceview.api.compare",
    "check": "traceview.api.compare",
    "chips": "traceview.api.chips",
    "Chip": "traceview.hardware.chips",
    "Diff": "traceview.regress.diff",
    "Shift": "traceview.regress.stats",
    "Snapshot": "traceview.regress.baseline",
    "Verdict": "traceview.regress.check",
    "Check": "traceview.regress.check",
    "Budgets": "traceview.regress.budgets",
    "UserError": "traceview.errors",
    "TraceError": "traceview.errors",
    "HloError": "traceview.errors",
}

__all__ = [
    "__version__", "load", "Analysis", "Summary", "hlo", "HloReport", "diff", "check", "chips", "Chip", "Diff",
    "Shift", "Snapshot", "Verdict", "Check", "Budgets", "UserError", "TraceError", "HloError",
]

if TYPE_CHECKING:
    from traceview.api.analysis import Analysis, Summary, load
    from traceview.api.chips import chips
    from traceview.api.compare import check, diff
    from traceview.api.hlo import HloReport, hlo
    from traceview.errors import HloError, TraceError, UserError
    from traceview.hardware.chips import Chip
    from traceview.regress.baseline import Snapshot
    from traceview.regress.budgets import Budgets
    from traceview.regress.check import Check, Verdict
    from traceview.regress.diff import Diff
    from traceview.regress.stats import Shift


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'traceview' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
