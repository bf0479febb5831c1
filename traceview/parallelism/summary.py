"""Which parallelism report ``traceview analyze`` summarises in one line, decided without diagnosing a run
that has nothing to say.

A run whose ops hold no collective, and that does not run several programs on several devices, has no mesh
to speak of: the diagnosis (reading the HLO for collectives, device groups and shardings) is skipped. A run
with programs but no collective is diagnosed, and summarised only when the diagnosis finds mesh axes (a
pipeline that runs a program per stage, measured in the trace).
"""

from __future__ import annotations

from collections.abc import Callable

from traceview.analysis.build import PipelineResult
from traceview.parallelism.report import Parallelism


def may_have_mesh(pipeline: PipelineResult) -> tuple[bool, bool]:
    """Whether the run's ops hold a collective, and whether it runs two or more programs on two or more
    devices: the two ways a run can have a mesh to summarise. Reads the op table only."""
    ops = pipeline.ops
    if ops.empty:
        return False, False
    communicates = "collective_kind" in ops.columns and \
        bool((ops["collective_kind"].fillna("").astype(str) != "").any())
    programs = "module" in ops.columns and ops["module"].nunique() >= 2 and len(pipeline.profile.devices) >= 2
    return communicates, programs


def summarised_mesh(pipeline: PipelineResult, diagnose: Callable[[], Parallelism]) -> Parallelism | None:
    """The parallelism report ``analyze`` prints a line about; None for a run with no collective, unless it
    runs a program per stage of a pipeline on its devices (an MPMD pipeline, measured in the trace).
    ``diagnose``: builds (or returns the kept) report of the run, called only when the run may have a mesh."""
    communicates, programs = may_have_mesh(pipeline)
    if not (communicates or programs):
        return None
    report = diagnose()
    if not communicates and not report.axes:
        return None
    return report
