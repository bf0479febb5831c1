"""The parallelism report's records: per axis (its roles, each with the book's verdict, and the structural
figures) and for the whole program."""

from __future__ import annotations

from dataclasses import dataclass, field

from traceview.hardware.chips import Chip
from traceview.parallelism.context import ContextFinding
from traceview.parallelism.dots import Figure
from traceview.parallelism.expert import ExpertFinding
from traceview.parallelism.mesh import Mesh
from traceview.parallelism.roles import AxisRole, Classified
from traceview.parallelism.rules import AxisVerdict, Link
from traceview.parallelism.shardings import ParameterSharding
from traceview.parallelism.structure import PipelineFinding


@dataclass
class RoleReport:
    """One strategy an axis carries, its evidence and the book's verdict for it."""
    role: str
    evidence: list[str]
    verdict: AxisVerdict


@dataclass
class AxisReport:
    name: str
    size: int
    role: AxisRole
    link: Link | None
    verdict: AxisVerdict                # the main role's
    collectives: int = 0                # distinct collective instructions over the axis
    executions: int | None = None       # collective executions in the trace (all devices)
    bytes: float | None = None          # payload bytes moved, all executions in the trace (all devices)
    bytes_per_execution: float = 0.0    # the axis's collectives once each (HLO), per device
    time_ps: float | None = None        # in-flight time, all devices
    exposed_ps: float | None = None     # not overlapped by compute, all devices
    roofline_ps: float | None = None
    share: float | None = None          # exposed / device span
    crosses_dcn: bool = False
    parameters: list[str] = field(default_factory=list)   # "params[0] dim 0": parameters split over the axis
    measured: str = ""                  # what the exposed time says, beside the book's verdict
    bytes_per_step: float | None = None  # per device: the cost model's payload x times run per step (trip counts)
    roles: list[RoleReport] = field(default_factory=list)   # every role, the main one first
    pipeline: PipelineFinding | None = None
    context: ContextFinding | None = None
    expert: ExpertFinding | None = None


@dataclass
class Parallelism:
    mesh: Mesh | None
    axes: list[AxisReport]
    collectives: list[Classified]
    why_no_mesh: str = ""
    per_chip_tokens: Figure | None = None
    target: Chip | None = None
    has_trace: bool = False
    warnings: list[str] = field(default_factory=list)
    parameters: list[ParameterSharding] = field(default_factory=list)
    target_source: str = ""             # where the target chip came from (the trace, --target, a dump)
    # the chip the trace ran on when the target is another one: the verdicts and link efficiencies are then
    # projected onto the target, the times measured on this chip
    measured_on: str | None = None

    @property
    def projected(self) -> bool:
        return self.measured_on is not None
