"""The HLO modules behind a trace, and their per-instruction cost table.

Modules come from, in order of preference: the HloProtos the trace itself
carries (the compiled modules that ran), an XLA dump folder given with
``--hlo`` or found beside the trace (``hlo/``, ``xla_dump/``, ``dump/``), and
``*.hlo_proto.pb`` files next to the xplanes (the trace loader already adds
those to ``Profile.hlo_protos``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from traceview.cost import instruction_costs
from traceview.parsers.hlo_dump import load_hlo_modules
from traceview.parsers.hlo_model import HloModule
from traceview.parsers.hlo_proto import modules_from_trace_protos
from traceview.parsers.xplane import as_int64
from traceview.profile import Profile

DUMP_DIR_NAMES = ("hlo", "xla_dump", "dump", "hlo_dump")


def find_dump_dir(trace_path: str | Path) -> Path | None:
    """An HLO dump folder beside a trace: in PATH itself or in the folder above `plugins/`."""
    path = Path(trace_path)
    candidates = [path] if path.is_dir() else []
    for parent in [path, *path.parents]:
        if parent.name == "plugins":
            candidates.append(parent.parent)
            break
    for base in candidates:
        for name in DUMP_DIR_NAMES:
            if (base / name).is_dir():
                return base / name
    return None


def profile_modules(profile: Profile, hlo_path: str | Path | None = None,
                    stage: str = "after") -> tuple[list[HloModule], list[str]]:
    """Every module we can find for the profile.

    The trace's own HLO (the optimized modules that ran) wins over a dump found
    beside it; a dump the user names with ``--hlo``, or asks for with
    ``--stage before``, wins over the trace's.
    """
    modules, warnings = modules_from_trace_protos(profile.hlo_protos, profile.source.path)
    dump = Path(hlo_path) if hlo_path else find_dump_dir(profile.source.path)
    if dump is None:
        if stage == "before":
            warnings.append("--stage before needs an XLA dump (--hlo DIR): a trace carries only the "
                            "optimized modules, which are used")
        return modules, warnings
    dumped, dump_warnings = load_hlo_modules(dump, stage=stage)
    warnings += dump_warnings
    first, second = (dumped, modules) if (hlo_path or stage == "before") else (modules, dumped)
    have = {m.name for m in first}
    return first + [m for m in second if m.name not in have], warnings


def cost_table(modules: list[HloModule]) -> tuple[pd.DataFrame, list[str]]:
    """All modules' instruction costs in one frame, with a `program_id` column (-1 when unknown).

    Program ids are uint64 in XLA; like the op table, the column holds them
    bit for bit in int64 (see parsers.xplane.as_int64).
    """
    frames, warnings = [], []
    for module in modules:
        costs = instruction_costs(module)
        warnings += costs.attrs.get("warnings", [])
        costs.attrs = {}
        program_id = -1 if module.program_id is None else as_int64(module.program_id)
        frames.append(costs.assign(program_id=program_id))
    if not frames:
        return pd.DataFrame(), warnings
    table = pd.concat(frames, ignore_index=True)
    table["program_id"] = table["program_id"].astype("int64")
    return table, warnings
