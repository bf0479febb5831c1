"""An analysis (or an HLO dump) -> MemoryReport: runtime peaks (a trace's allocator events), static peaks (buffer assignments), headroom."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from traceview.analysis.build import PipelineResult
from traceview.errors import UserError
from traceview.hardware.chips import Chip
from traceview.hardware.database import load_hardware
from traceview.hardware.detect import detect_target
from traceview.hostreduce.memory_peaks import RuntimePeak
from traceview.hostreduce.profile import Profile
from traceview.memory.headroom import Headroom, headroom, is_device_memory
from traceview.memory.modules import static_peaks_from_dump, static_peaks_from_protos
from traceview.memory.static import StaticPeak
from traceview.trace.read import runtime_memory


@dataclass
class MemoryReport:
    source: str
    memories: list[RuntimePeak] = field(default_factory=list)
    modules: list[StaticPeak] = field(default_factory=list)
    target: Chip | None = None
    target_detected: bool = False
    target_source: str | None = None         # "--target", "trace" or "dump: <target config file>"
    origin_ps: int = 0                       # time zero of the report's times (the trace's first event)
    warnings: list[str] = field(default_factory=list)

    def memory_headroom(self, peak: RuntimePeak) -> Headroom | None:
        if self.target is None or not is_device_memory(peak.name):
            return None
        return headroom(peak.peak_bytes, self.target)

    def module_headroom(self, peak: StaticPeak) -> Headroom | None:
        return None if self.target is None else headroom(peak.peak_bytes, self.target)


def fill_from_profile(report: MemoryReport, profile: Profile) -> None:
    """Runtime peaks from the allocator events of the profile's trace files (as reduced where their hosts
    were read, or read now), static peaks from its HLO."""
    report.memories, first = runtime_memory(profile)
    report.warnings += profile.warnings
    kept = profile.kept      # the executions' first start where the reading kept them (not read again for it)
    starts = [int(kept.ops["start_ps"].min())] if kept is not None and not kept.ops.empty else []
    if first is not None:
        starts.append(first)
    report.origin_ps = min(starts) if starts else 0
    where = report.source
    if not report.memories:
        report.warnings.append(f"{where}: no allocator events (MemoryAllocation/MemoryDeallocation) in the trace: "
                               f"no runtime peak (JAX on the CPU writes none)")
    report.modules, warnings = static_peaks_from_protos(profile.hlo_protos, where)
    report.warnings += warnings
    if not profile.hlo_protos:
        report.warnings.append(f"{where}: the trace carries no HLO protos: no static peak")
    report.modules.sort(key=lambda m: -m.peak_bytes)
    report.warnings = list(dict.fromkeys(report.warnings))


def memory_from_analysis(pipeline: PipelineResult, hardware_file: str | Path | None = None) -> MemoryReport:
    """What `traceview memory` shows for an analysed trace: runtime peaks from its allocator events, static
    peaks from the HLO protos it carries, headroom on the analysis' target."""
    profile = pipeline.profile
    report = MemoryReport(source=str(profile.source.path))
    fill_from_profile(report, profile)
    judged = pipeline.judged
    if judged is not None and not judged.detected:   # given (--target, retarget)
        report.target, report.target_source = judged.chip, "--target"
    elif judged is not None and judged.source != "trace":   # chosen from the run's dump
        report.target, report.target_detected, report.target_source = judged.chip, True, judged.source
    elif profile.devices:
        chip, warnings = detect_target(profile.devices, load_hardware(hardware_file))
        report.target, report.target_detected = chip, chip is not None
        report.target_source = "trace" if chip is not None else None
        report.warnings += warnings
    return _finished(report)


def memory_from_dump(path: str | Path, target: Chip | None = None, target_source: str | None = None) -> MemoryReport:
    """What `traceview memory` shows for an XLA dump folder or HLO file: static peaks from the buffer
    assignments (no accelerator needed), headroom on `target` (``target_source``: where it came from,
    default "--target")."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such file or folder")
    report = MemoryReport(source=str(p), target=target, target_detected=target_source not in (None, "--target"),
                          target_source=(target_source or "--target") if target is not None else None)
    report.modules, warnings = static_peaks_from_dump(p)
    report.warnings += warnings
    return _finished(report)


def _finished(report: MemoryReport) -> MemoryReport:
    if report.target is not None and report.target.hbm_capacity is None:
        report.warnings.append(f"target {report.target.name}: the hardware database has no HBM capacity; "
                               f"no headroom")
    report.modules.sort(key=lambda m: -m.peak_bytes)
    report.warnings = list(dict.fromkeys(report.warnings))
    return report
