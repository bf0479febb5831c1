"""The what-if view's typed report: one projection per configuration, each with the terms it adds up."""

from __future__ import annotations

from dataclasses import dataclass, field

from traceview.whatif.book import Crossover
from traceview.whatif.config import Config


@dataclass
class Term:
    """One part of a projected step: what it is, which role (if any), its time today and projected, and the
    formula that scaled it (per device and step, picoseconds)."""
    what: str
    role: str | None
    time_ps: float | None
    baseline_ps: float | None
    formula: str
    measured: bool = True        # False: from the book's formula alone (nothing in the trace to calibrate it)


@dataclass
class Projection:
    config: Config
    step_ps: float | None
    step_reason: str = ""
    mfu: float | None = None
    tokens_per_s_per_chip: float | None = None
    bound: str | None = None                     # compute, memory, communication, bubble, idle: the largest term
    memory_per_chip_bytes: float | None = None
    memory_reason: str = ""
    memory_terms: dict[str, float] = field(default_factory=dict)
    capacity_bytes: float | None = None
    fits: bool | None = None
    headroom_bytes: float | None = None          # capacity - memory (negative: over by this much)
    dominant_change: str | None = None           # the term whose change from today is largest
    terms: list[Term] = field(default_factory=list)
    crossovers: list[Crossover] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # what this config needs that the trace cannot tell


@dataclass
class Today:
    mesh: dict[str, int]
    batch: float | None
    chips: int
    chip: str | None
    step_ps: float | None
    mfu: float | None
    memory_per_chip_bytes: float | None
    batch_how: str = ""


@dataclass
class WhatIf:
    today: Today
    projections: list[Projection]                # ranked by projected step time (unknown last)
    assumptions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
