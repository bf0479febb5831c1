"""``traceview.hlo(path) -> HloReport``: the cost model of HLO modules (a dump, an HLO file or a trace's HLO)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from traceview.analysis.modules import profile_modules
from traceview.config.values import flag, optional_path, path_like, whole_number
from traceview.cost.hlo_costs import hlo_report
from traceview.cost.table import COLUMNS
from traceview.hardware.chips import Chip
from traceview.hardware.database import load_hardware
from traceview.hardware.dump_target import dump_target
from traceview.parsers.hlo.dump import check_stage, load_hlo_modules
from traceview.parsers.hlo.model import HloModule
from traceview.parsers.layout import find_dump_dir
from traceview.render.hlo import hlo_csv, hlo_json, hlo_text
from traceview.trace.read import is_trace_path, load_profile

__all__ = ["HloReport", "hlo"]


@dataclass
class HloReport:
    """Costed HLO modules: ``modules`` and ``instructions`` as DataFrames, ``warnings``.

    ``hlo_modules`` are the parsed modules (``traceview.parsers.hlo.model``);
    ``costed`` the (module, instruction costs, totals) triples the renderers take.
    """

    hlo_modules: list[HloModule]
    costed: list[tuple[HloModule, pd.DataFrame, dict]]
    warnings: list[str] = field(default_factory=list)
    target: Chip | None = None          # the chip the dump's target config names (gpu_target_config)
    target_source: str | None = None    # "dump: <that file>"

    @property
    def _target_record(self) -> dict | None:
        return None if self.target is None else {"name": self.target.name, "source": self.target_source}

    @cached_property
    def modules(self) -> pd.DataFrame:
        """One row per module: name, file, stage ("after"/"before"/None), program_id, flops,
        transcendentals, bytes_accessed (as XLA's HloCostAnalysis defines them for the module),
        flops_per_step, bytes_accessed_per_step (while bodies times their known trip counts),
        collective_bytes (payload of its collectives), instructions (how many)."""
        records = [{"name": module.name, "file": module.file, "stage": module.stage, "program_id": module.program_id,
                    **{k: totals[k] for k in ("flops", "transcendentals", "bytes_accessed", "flops_per_step",
                                              "bytes_accessed_per_step")},
                    "collective_bytes": float(costs["payload_bytes"].sum()) if len(costs) else 0.0,
                    "instructions": len(costs)} for module, costs, totals in self.costed]
        return pd.DataFrame.from_records(records, columns=[
            "name", "file", "stage", "program_id", "flops", "transcendentals", "bytes_accessed",
            "flops_per_step", "bytes_accessed_per_step", "collective_bytes", "instructions"])

    @cached_property
    def instructions(self) -> pd.DataFrame:
        """One row per instruction of every module (columns in docs/api.md: module, computation, name,
        opcode, category, shape, dtype, flops, transcendentals, bytes_read, bytes_written,
        bytes_accessed, multiplier, flops_per_step, bytes_accessed_per_step, collective_kind,
        payload_bytes, group_size (NaN when unknown), groups, crosses_dcn, ring_directions, unknown,
        note, source_file, source_line, fusion_kind)."""
        frames = [costs for _, costs, _ in self.costed if len(costs)]
        if not frames:
            return pd.DataFrame({k: pd.Series(dtype=v) for k, v in COLUMNS.items()})
        return pd.concat(frames, ignore_index=True)

    def to_json(self) -> dict[str, Any]:
        """Exactly what ``traceview hlo PATH --format json`` prints."""
        return hlo_json(self.costed, self.warnings, self._target_record)

    def to_csv(self) -> str:
        """The instruction table as ``traceview hlo --format csv`` writes it."""
        return hlo_csv(self.costed)

    def to_text(self, top: int = 10, markdown: bool = False) -> str:
        """The ``traceview hlo`` tables: modules, then each module's ``top`` instructions (0 or more: a
        negative count would list all but the last ones)."""
        rows = whole_number(top, "top", 0)
        return hlo_text(self.costed, self.warnings, top=rows, markdown=flag(markdown, "markdown"),
                        target=self._target_record)


def hlo(path: str | Path, *, run: str | None = None, stage: str = "after",
        hardware_file: str | Path | None = None) -> HloReport:
    """Cost the HLO modules at ``path``: an XLA dump folder (``--xla_dump_to``), one HLO file (text or
    proto, optionally .xz/.gz), or a trace (log dir, run dir, file: its own HLO, or an ``hlo/`` folder
    beside it). ``run`` picks a run of a log dir; ``stage`` "after" or "before" optimizations. A dump
    whose XLA target config names its chip gives the report's ``target`` (chips: ``hardware_file``)."""
    p = Path(path_like(path, "path"))
    hardware_file = optional_path(hardware_file, "hardware_file")
    check_stage(stage)
    dump: Path | None = p
    if is_trace_path(p):
        modules, warnings = profile_modules(load_profile(p, run=run), stage=stage)
        if not modules:
            warnings.append(f"{p}: the trace carries no HLO and no dump folder was found beside it")
        dump = find_dump_dir(p)
    else:
        modules, warnings = load_hlo_modules(p, stage=stage)
    report = costed_report(modules, warnings)
    found = dump_target(dump, load_hardware(hardware_file))
    if found is not None:
        report.target, report.target_source = found.chip, found.source if found.chip is not None else None
        report.warnings = list(dict.fromkeys(report.warnings + found.warnings))
    return report


def costed_report(modules: list[HloModule], warnings: list[str]) -> HloReport:
    """The report of modules already read (``warnings``: what reading them said)."""
    costed, cost_warnings = hlo_report(modules)
    return HloReport(modules, costed, list(dict.fromkeys(warnings + cost_warnings)))
