"""PATH -> Profile: discover the run, read every host's file, merge the tables."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from traceview.errors import TraceError, UserError
from traceview.parsers.discover import find_run, is_trace_file
from traceview.parsers.xplane import TraceData, read_xplane
from traceview.profile import HOST_EVENT_COLUMNS, OP_COLUMNS, STEP_COLUMNS, Profile, Source, empty_frame


def load_profile(path: str | Path, run: str | None = None,
                 progress: Callable[[int, int], None] | None = None) -> Profile:
    """Read the run PATH means (the newest, or the one named `run`) into one Profile.

    Every host file of the run is read; rows keep their host. A broken file
    among several becomes a warning naming it; if every file is broken the
    first error is raised (a UserError naming the file). `progress(done,
    total)` is called after each file.
    """
    found = find_run(path, run)
    parts: list[TraceData] = []
    warnings: list[str] = []
    errors: list[TraceError] = []
    ok_files: list[str] = []
    total = len(found.files)
    for i, f in enumerate(found.files):
        try:
            parts.append(read_xplane(f))
            ok_files.append(str(f))
        except TraceError as exc:
            errors.append(exc)
            warnings.append(f"skipped unreadable trace file: {exc}")
        if progress is not None:
            progress(i + 1, total)
    if not parts:
        if len(errors) == 1:
            raise errors[0]
        raise UserError(f"{found.path}: none of the {total} trace files could be read (first: {errors[0]})")
    for part in parts:
        warnings += part.warnings
    hlo_protos: dict[str, bytes] = {}
    environment: dict[str, str] = {}
    for part in parts:
        for k, v in part.hlo_protos.items():
            hlo_protos.setdefault(k, v)
        for k, v in part.environment.items():
            environment.setdefault(k, v)
    # Per-module HloProto files written beside the xplanes ("<module>(<program id>).hlo_proto.pb").
    for f in found.hlo_proto_files:
        key = f.name[: -len(".hlo_proto.pb")]
        if key not in hlo_protos:
            hlo_protos[key] = f.read_bytes()
    return Profile(
        source=Source(path=str(path), run=found.name, hosts=[p.host for p in parts], files=ok_files),
        ops=_concat([p.ops for p in parts], OP_COLUMNS),
        host_events=_concat([p.host_events for p in parts], HOST_EVENT_COLUMNS),
        steps=_concat([p.steps for p in parts], STEP_COLUMNS),
        devices=[d for p in parts for d in p.devices],
        hlo_protos=hlo_protos,
        environment=environment,
        warnings=warnings,
    )


def _concat(frames: list[pd.DataFrame], columns: dict[str, str]) -> pd.DataFrame:
    """Concatenate per-host tables; categoricals get the union of their categories."""
    frames = [f for f in frames if not f.empty]
    if not frames:
        return empty_frame(columns)
    if len(frames) == 1:
        return frames[0]
    from pandas.api.types import union_categoricals

    out = {}
    for name, dtype in columns.items():
        if dtype == "category":
            out[name] = union_categoricals([f[name] for f in frames])
        else:
            out[name] = pd.concat([f[name] for f in frames], ignore_index=True).to_numpy()
    return pd.DataFrame(out).astype(columns)


def is_trace_path(path: Path) -> bool:
    """Whether ``path`` is a trace file or a folder holding one (rather than HLO or a JSON baseline)."""
    if path.is_file():
        return is_trace_file(path)
    return path.is_dir() and any(is_trace_file(p) for p in path.rglob("*.xplane.pb*"))
