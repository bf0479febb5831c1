"""An analysis -> AdviceReport: idle causes, stragglers, and the ranked list of what to fix first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from traceview.advice.findings import Advice, AdviceContext, Provider, ViewGetter, advice_json, ranked
from traceview.advice.idle import CAUSES, IdleCauses, idle_causes
from traceview.advice.providers import DEFAULT_PROVIDERS
from traceview.advice.stragglers import Stragglers, stragglers
from traceview.hostreduce.activity import Activity, merge_activity, reduce_activity
from traceview.timeline.overlap import Overlap
from traceview.trace.read import host_events

TOP = 5      # the items ``analyze`` prints


@dataclass
class AdviceReport:
    """What ``Analysis.advice()`` returns. ``span_ps``: the active devices' mean span; ``items``: ranked."""

    idle: IdleCauses
    stragglers: Stragglers
    items: list[Advice]
    span_ps: float
    active_devices: int
    warnings: list[str] = field(default_factory=list)

    def advice_json(self) -> list[dict[str, Any]]:
        """The top-level ``advice`` list of ``analyze --format json``."""
        return [advice_json(item, self.span_ps) for item in self.items]

    def idle_causes_json(self) -> list[dict[str, Any]]:
        """``summary.idle_causes``: per cause, its time summed over devices, share of idle, evidence."""
        idle = self.idle
        if not idle.causes:
            return []
        return [{"cause": c, "time_us": idle.causes[c] / 1e6,
                 "share": idle.causes[c] / idle.idle_ps if idle.idle_ps else None,
                 "evidence": [{"name": e["name"], "time_us": e["time_ps"] / 1e6, "source": e["source"]}
                              for e in idle.evidence.get(c, [])]} for c in CAUSES]


def advice_report(pipeline: Any, views: dict[str, ViewGetter] | None = None,
                  providers: Sequence[Provider] = DEFAULT_PROVIDERS) -> AdviceReport:
    """Idle causes and stragglers of ``pipeline`` (``analysis.build.PipelineResult``), then every
    provider's advice, ranked. ``views``: name -> getter of the other views (``parallelism``,
    ``memory``; ``scopes`` and ``serving`` as their JSON records), built only if a provider asks."""
    profile = pipeline.profile
    activity = run_activity(profile)
    # each host's threads were cut where it was read; else the run's host events (read again if not kept)
    idle = idle_causes(activity, profile.host_events if activity.hosts is not None else host_events(profile),
                       pipeline.steps, jobs=profile.jobs)
    late = stragglers(activity, jobs=profile.jobs)
    active = len(pipeline.device_times) if not pipeline.device_times.empty else 0
    span = pipeline.span_ps / active if active else 0.0
    context = AdviceContext(pipeline=pipeline, span_ps=float(span), active_devices=active,
                            views={**(views or {}), "idle": lambda: idle, "stragglers": lambda: late},
                            overlap=Overlap(float(pipeline.op_time_ps), float(pipeline.device_time_ps)))
    items: list[Advice] = []
    warnings: list[str] = []
    for provider in providers:
        items.extend(provider(context))
    if idle.reason:
        warnings.append(f"idle causes: {idle.reason}")
    return AdviceReport(idle=idle, stragglers=late, items=ranked(items, span), span_ps=float(span),
                        active_devices=active, warnings=warnings)


def run_activity(profile: Any) -> Activity:
    """The run's device activity: its hosts' reductions merged (each host reduced where it was read), or
    its op table reduced here when the profile came without them. No op execution is read again."""
    if profile.op_parts is not None:
        return merge_activity([p.activity for p in profile.op_parts])
    return reduce_activity(profile.ops)


def per_step_json(idle: IdleCauses) -> list[dict[str, Any]]:
    """Per step: its devices' idle time inside the step's window, by cause (us, summed over devices)."""
    return _rows_us(idle.per_step, "step")


def per_device_json(idle: IdleCauses) -> list[dict[str, Any]]:
    """Per device: its idle time by cause (us)."""
    return _rows_us(idle.per_device, "device")


def _rows_us(table: pd.DataFrame, key: str) -> list[dict[str, Any]]:
    if table.empty:
        return []
    out = []
    for row in table.to_dict("records"):
        record: dict[str, Any] = {key: row[key] if key == "device" else int(row[key]),
                                  "idle_us": row["idle_ps"] / 1e6}
        record["causes_us"] = {c: row[f"{c}_ps"] / 1e6 for c in CAUSES}
        out.append(record)
    return out
