"""The what-if view: today's step read from an analysis, every candidate configuration projected, ranked."""

from __future__ import annotations

import math

from traceview.parallelism.report import Parallelism
from traceview.whatif.baseline import Baseline, measure
from traceview.whatif.config import Config, Request, candidates
from traceview.whatif.host import WORK_QUANTILE
from traceview.whatif.project import project
from traceview.whatif.report import Projection, Today, WhatIf

SAME_KERNELS = ("same kernels: each op keeps the efficiency it was measured at; a compute-bound op's time scales "
                "with its per-chip FLOPs, (B'/B)(N/N') of today's (the book's 6 P T spread over N chips), a "
                "memory-bound op's with its per-chip bytes")
NO_REMAT = ("no new rematerialisation: activations per chip scale with the per-chip batch, parameters, gradients "
            "and optimizer state with the ways they are sharded")
IDLE_KEPT = "idle time between ops (host, launch, waits) is kept as measured"

ASSUMPTIONS = [
    SAME_KERNELS,
    "same overlap per role: each role's collectives are hidden behind compute in the share the trace measured "
    "for that role (a role the trace lacks: fully exposed, an upper bound)",
    "the book's collective volumes per role (docs/whatif.md), against today's measured time for that role",
    NO_REMAT,
    IDLE_KEPT,
]

# What the projection assumes when the trace's devices are threads of one host (whatif.host): the chip model's
# overlap per role and collective times per role do not apply there (nothing hides; collectives are copies)
HOST_ASSUMPTIONS = [
    SAME_KERNELS,
    NO_REMAT,
    IDLE_KEPT,
    "one host's virtual devices: the host's cores run every device's work in turn, so a step is the work of all "
    "devices over the rate the host got through today's (c, from today's step), plus idle; nothing hides behind "
    "anything, the compute it would hide behind needs the same cores",
    f"an op's work is its executions times the {WORK_QUANTILE * 100:.0f}th percentile of their durations (what it lasts when its "
    "thread is not waiting for a core); each role's collectives are the book's bytes per chip times the chips, "
    "read and written once at the rate the host's memory-bound ops ran at",
    "an op on a gathered weight goes with FSDP's gather: none in a mesh without FSDP",
]


def whatif_report(pipeline, parallelism: Parallelism, memory=None, request: Request | None = None) -> WhatIf:
    """Project the analysed step onto the requested configurations (or the defaults: every factorisation of
    today's chips over the roles the program uses, at today's batch, twice and half of it)."""
    request = request or Request()
    if request.target is None and pipeline.judged is not None and pipeline.judged.projected:
        request.target = pipeline.judged.chip      # an analysis re-targeted: project onto its target
    base = measure(pipeline, parallelism, memory)
    warnings = list(base.warnings)
    roles = [r for r in base.mesh if base.mesh[r] > 1] or ["data"]
    batch = base.batch_tokens
    if batch is None:
        warnings.append(f"the global batch was not read ({base.batch_how}): batches are in units of today's")
    configs = candidates(request, base.mesh, batch if batch is not None else 1.0, base.chip, roles)
    today_cfg = Config(dict(base.mesh), batch if batch is not None else 1.0, base.chip, "today")
    today = project(base, today_cfg)
    projections = [project(base, cfg) for cfg in configs]
    projections.sort(key=lambda p: (p.step_ps is None, p.step_ps if p.step_ps is not None else math.inf))
    assumptions = list(HOST_ASSUMPTIONS if base.host is not None else ASSUMPTIONS)
    return WhatIf(_today(base, today), projections, assumptions, warnings)


def _today(base: Baseline, today: Projection) -> Today:
    return Today(dict(base.mesh), base.batch_tokens, base.chips, base.chip.name if base.chip else None,
                 base.step_ps, base.mfu, today.memory_per_chip_bytes, base.batch_how)
