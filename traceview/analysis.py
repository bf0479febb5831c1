"""From a loaded Profile to the numbers every report shows.

This is the one place that assembles an analysis; the CLI formats, the
dashboard and the regression checks all read the same `Analysis`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from traceview.aggregate import op_stats, step_times
from traceview.profile import Profile


@dataclass
class Analysis:
    profile: Profile
    ops: pd.DataFrame                 # aggregated ops (see aggregate.op_stats), plus cost/roofline columns
    steps: pd.DataFrame               # aggregate.step_times
    per_device: bool = False
    target: object | None = None      # traceview.hardware.Chip once the roofline runs
    target_detected: bool = False
    summary_extra: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def device_time_ps(self) -> int:
        return int(self.profile.ops["self_ps"].sum()) if not self.profile.ops.empty else 0


def build_analysis(profile: Profile, per_device: bool = False) -> Analysis:
    warnings = list(profile.warnings)
    if profile.ops.empty:
        warnings.append("the trace holds no device op executions: nothing to analyze")
    return Analysis(
        profile=profile,
        ops=op_stats(profile.ops, per_device=per_device),
        steps=step_times(profile.steps),
        per_device=per_device,
        warnings=warnings,
    )
