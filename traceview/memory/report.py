"""PATH -> MemoryReport: runtime peaks (a trace's allocator events), static peaks (buffer assignments), headroom."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from traceview.errors import UserError
from traceview.hardware.chips import Chip
from traceview.hardware.database import get_chip, load_hardware
from traceview.hardware.detect import detect_target
from traceview.memory.headroom import Headroom, headroom, is_device_memory
from traceview.memory.modules import static_peaks_from_dump, static_peaks_from_protos
from traceview.memory.runtime import RuntimePeak, runtime_peaks
from traceview.memory.static import StaticPeak
from traceview.parsers.allocator_events import empty_allocator_frame, read_allocator_events
from traceview.profile import Profile
from traceview.read import is_trace_path


@dataclass
class MemoryReport:
    source: str
    memories: list[RuntimePeak] = field(default_factory=list)
    modules: list[StaticPeak] = field(default_factory=list)
    target: Chip | None = None
    target_detected: bool = False
    origin_ps: int = 0                       # time zero of the report's times (the trace's first event)
    events: pd.DataFrame = field(default_factory=empty_allocator_frame)
    warnings: list[str] = field(default_factory=list)

    def memory_headroom(self, peak: RuntimePeak) -> Headroom | None:
        if self.target is None or not is_device_memory(peak.name):
            return None
        return headroom(peak.peak_bytes, self.target)

    def module_headroom(self, peak: StaticPeak) -> Headroom | None:
        return None if self.target is None else headroom(peak.peak_bytes, self.target)


def fill_from_profile(report: MemoryReport, profile: Profile, files: list[Path]) -> None:
    """Runtime peaks from the allocator events of `files` (the profile's trace files), static peaks from its HLO."""
    frames = [read_allocator_events(f) for f in files]
    frames = [f for f in frames if not f.empty]
    if frames:
        report.events = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    report.warnings += profile.warnings
    starts = [int(profile.ops["start_ps"].min())] if not profile.ops.empty else []
    if not report.events.empty:
        starts.append(int(report.events["time_ps"].min()))
    report.origin_ps = min(starts) if starts else 0
    report.memories = runtime_peaks(report.events)
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


def memory_report(path: str | Path, run: str | None = None, target: str | None = None,
                  hardware_file: str | Path | None = None) -> MemoryReport:
    """Everything `traceview memory` shows for PATH (a trace, an HLO dump folder or an HLO file)."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such file or folder")
    db = load_hardware(hardware_file)
    report = MemoryReport(source=str(p))
    devices = []
    if is_trace_path(p):
        from traceview.parsers.discover import find_run
        from traceview.read import load_profile

        profile = load_profile(p, run=run)
        devices = profile.devices
        fill_from_profile(report, profile, find_run(p, run).files)
    else:
        report.modules, warnings = static_peaks_from_dump(p)
        report.warnings += warnings
    if target:
        report.target = get_chip(target, db)
    elif devices:
        chip, warnings = detect_target(devices, db)
        report.target, report.target_detected = chip, chip is not None
        report.warnings += warnings
    if report.target is not None and report.target.hbm_capacity is None:
        report.warnings.append(f"target {report.target.name}: the hardware database has no HBM capacity; "
                               f"no headroom")
    report.modules.sort(key=lambda m: -m.peak_bytes)
    report.warnings = list(dict.fromkeys(report.warnings))
    return report
