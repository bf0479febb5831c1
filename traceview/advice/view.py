"""An analysis -> AdviceReport: idle causes, stragglers, and the ranked list of what to fix first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from traceview.advice.findings import Advice, AdviceContext, Provider, Views, ranked
from traceview.advice.idle import IdleCauses, idle_causes
from traceview.advice.providers import DEFAULT_PROVIDERS
from traceview.advice.stragglers import Stragglers, stragglers
from traceview.analysis.build import PipelineResult
from traceview.hostreduce.combine import run_activity
from traceview.parsers.profile import HOST_EVENT_COLUMNS, empty_frame
from traceview.timeline.overlap import Overlap

TOP = 5      # the items ``analyze`` prints


@dataclass
class AdviceReport:
    """What ``Analysis.advice()`` returns. ``span_ps``: the active devices' mean span; ``items``: ranked
    (``traceview.render.advice`` writes it as JSON and text)."""

    idle: IdleCauses
    stragglers: Stragglers
    items: list[Advice]
    span_ps: float
    active_devices: int
    warnings: list[str] = field(default_factory=list)


def advice_report(pipeline: PipelineResult, views: Views | None = None,
                  providers: Sequence[Provider] = DEFAULT_PROVIDERS) -> AdviceReport:
    """Idle causes and stragglers of ``pipeline`` (``analysis.build.PipelineResult``), then every
    provider's advice, ranked. ``views``: getters of the other views' typed reports (mesh, memory,
    scope tree, serving phases), each built only if a provider asks for it."""
    profile = pipeline.profile
    activity = run_activity(profile.parts, profile.span_fold)
    # each host's threads were cut where it was read (no host event is needed); else the run's host events
    events = empty_frame(HOST_EVENT_COLUMNS) if activity.hosts is not None else profile.all_host_events()
    idle = idle_causes(activity, events, pipeline.steps, jobs=profile.jobs, workers=profile.workers)
    late = stragglers(activity, jobs=profile.jobs)
    active = len(pipeline.device_times) if not pipeline.device_times.empty else 0
    span = pipeline.span_ps / active if active else 0.0
    context = AdviceContext(pipeline=pipeline, span_ps=float(span), active_devices=active,
                            views=views or Views(), idle=idle, stragglers=late,
                            overlap=Overlap(float(pipeline.op_time_ps), float(pipeline.device_time_ps)))
    items: list[Advice] = []
    warnings: list[str] = []
    for provider in providers:
        items.extend(provider(context))
    if idle.reason:
        warnings.append(f"idle causes: {idle.reason}")
    return AdviceReport(idle=idle, stragglers=late, items=ranked(items, span), span_ps=float(span),
                        active_devices=active, warnings=warnings)
