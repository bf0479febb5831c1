"""Static peaks of every module we can find: in a trace's HLO protos, or an HLO dump folder or file."""

from __future__ import annotations

from pathlib import Path

from traceview.errors import HloError
from traceview.memory.static import StaticPeak, static_peak
from traceview.parsers.hlo.buffer_assignment import parse_buffer_assignment
from traceview.parsers.hlo.buffer_assignment_text import companion_file, read_buffer_assignment_text
from traceview.parsers.hlo.dump import load_hlo_modules, read_bytes
from traceview.parsers.hlo.model import HloModule
from traceview.parsers.hlo.proto import modules_from_trace_protos


def _peak_of(data: bytes, module: HloModule, where: str, warnings: list[str]) -> StaticPeak | None:
    try:
        ba = parse_buffer_assignment(data, where)
    except HloError as exc:
        warnings.append(str(exc))
        return None
    if ba is None:
        warnings.append(f"{where}: no buffer assignment in this HLO proto (dump after optimizations with "
                        f"--xla_dump_hlo_as_proto to get one)")
        return None
    peak = static_peak(ba, module, name=module.name, program_id=module.program_id)
    warnings.extend(f"{where}: {w}" for w in peak.warnings)
    return peak


def static_peaks_from_protos(protos: dict[str, bytes], source: str) -> tuple[list[StaticPeak], list[str]]:
    """Peaks of a trace's HLO protos (``"<module>(<program id>)"`` -> HloProto bytes)."""
    modules, warnings = modules_from_trace_protos(protos, source)
    by_key = {f"{m.name}({m.program_id})" if m.program_id is not None else m.name: m for m in modules}
    peaks = []
    for key, data in protos.items():
        module = by_key.get(key)
        if module is None:
            continue
        peak = _peak_of(data, module, f"{source}: HLO proto {key}", warnings)
        if peak is not None:
            peaks.append(peak)
    return peaks, warnings


def static_peaks_from_dump(path: str | Path) -> tuple[list[StaticPeak], list[str]]:
    """Peaks of the after-optimizations HLO protos in a dump folder (or one proto file)."""
    modules, warnings = load_hlo_modules(path, stage="after")
    peaks = []
    for module in modules:
        file = Path(module.file) if module.file else None
        if file is None or not file.name.replace(".xz", "").replace(".gz", "").endswith(".pb"):
            text_ba = companion_file(file) if file is not None else None
            if text_ba is None:
                warnings.append(f"{module.file or module.name}: HLO text carries no buffer assignment and no "
                                f"-buffer-assignment.txt is beside it; dump with --xla_dump_hlo_as_proto")
                continue
            try:
                from_text = static_peak(read_buffer_assignment_text(text_ba), module, name=module.name,
                                        program_id=module.program_id)
            except HloError as exc:
                warnings.append(str(exc))
                continue
            warnings.extend(f"{text_ba}: {w}" for w in from_text.warnings)
            peaks.append(from_text)
            continue
        peak = _peak_of(read_bytes(file), module, str(file), warnings)
        if peak is not None:
            peaks.append(peak)
    return peaks, warnings
