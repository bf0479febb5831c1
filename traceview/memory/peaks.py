"""Peak memory per key, for comparisons: ``runtime:<allocator>`` (device memories) and ``static:<module>``."""

from __future__ import annotations

from pathlib import Path

from traceview.hostreduce.profile import Profile
from traceview.memory.headroom import is_device_memory
from traceview.memory.modules import static_peaks_from_dump, static_peaks_from_protos
from traceview.memory.static import StaticPeak
from traceview.trace.read import runtime_memory


def _static_keys(peaks: list[StaticPeak]) -> dict[str, int]:
    names = [p.name for p in peaks]
    out: dict[str, int] = {}
    for p in peaks:
        key = p.name if names.count(p.name) == 1 or p.program_id is None else f"{p.name}({p.program_id})"
        out[f"static:{key}"] = max(out.get(f"static:{key}", 0), p.peak_bytes)
    return out


def profile_peaks(profile: Profile) -> tuple[dict[str, int], list[str]]:
    """Runtime peaks of the profile's device allocators and static peaks of its HLO modules."""
    peaks = [p for p in runtime_memory(profile)[0] if is_device_memory(p.name)]   # JSON: none
    out: dict[str, int] = {}
    hosts = {p.host for p in peaks}
    for p in peaks:
        out[f"runtime:{p.name if len(hosts) == 1 else p.device}"] = p.peak_bytes
    static, warnings = static_peaks_from_protos(profile.hlo_protos, profile.source.path)
    out.update(_static_keys(static))
    return out, warnings


def dump_peaks(path: str | Path) -> tuple[dict[str, int], list[str]]:
    """Static peaks of an HLO dump folder or proto file."""
    static, warnings = static_peaks_from_dump(path)
    return _static_keys(static), warnings
