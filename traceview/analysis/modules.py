"""The HLO modules behind a trace, and their per-instruction cost table.

Modules come from, in order of preference: the HloProtos the trace itself
carries (the compiled modules that ran), an XLA dump folder given with
``--hlo`` or found beside the trace (``hlo/``, ``xla_dump/``, ``dump/``), and
``*.hlo_proto.pb`` files next to the xplanes (the trace loader already adds
those to ``Profile.hlo_protos``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from traceview.cost.shapes import shape_text
from traceview.cost.table import COLUMNS, costs_frame, instruction_rows
from traceview.hostreduce.combine import executed
from traceview.hostreduce.profile import Profile
from traceview.parsers.hlo.dump import load_hlo_modules
from traceview.parsers.hlo.model import HloModule
from traceview.parsers.hlo.proto import modules_from_trace_protos
from traceview.parsers.layout import find_dump_dir
from traceview.parsers.tables.conventions import as_int64


@dataclass(frozen=True)
class Executed:
    """The modules a trace's ops ran in, as the cost join finds them: by program id (int64 bits, as
    the op table holds it) or by name."""

    program_ids: frozenset[int]
    names: frozenset[str]

    def holds(self, name: str, program_id: int | None) -> bool:
        return name in self.names or (program_id is not None and as_int64(program_id) in self.program_ids)


@dataclass(eq=False)
class TraceModules:
    """The HLO modules of an analysed trace and their per-instruction costs: ``ran``, those its ops ran in
    (read with the analysis, which joins their costs), and ``every`` module found, read on first use
    (a trace carries every module the program compiled, most of them never profiled). Re-targeted
    copies of an analysis share one, so no module is found or converted twice."""

    ran: list[HloModule]
    ran_costs: pd.DataFrame            # per-instruction costs of `ran` (cost_table)
    # (profile, --hlo, stage) to find every module from when `ran` is not all of them; None: it is
    every_from: tuple[Profile, str | Path | None, str] | None = None
    converted: dict = field(default_factory=dict, repr=False)   # modules converted so far, by source
    _every: tuple[list[HloModule], pd.DataFrame] | None = field(default=None, repr=False)

    @property
    def every(self) -> list[HloModule]:
        """Every module found for the trace; those its ops never ran in are converted on first use."""
        return self._found()[0]

    @property
    def every_costs(self) -> pd.DataFrame:
        """Per-instruction costs of `every` module."""
        return self._found()[1]

    def _found(self) -> tuple[list[HloModule], pd.DataFrame]:
        if self.every_from is None:
            return self.ran, self.ran_costs
        if self._every is None:
            modules, _ = profile_modules(*self.every_from, converted=self.converted)
            self._every = modules, cost_table(modules)[0]
        return self._every


def executed_modules(profile: Profile) -> Executed | None:
    """The modules the profile's op executions ran in, from its hosts' parts (None when it has none to go by)."""
    ids, names = executed(profile.parts)
    ids.discard(-1)
    names.discard("")
    return Executed(frozenset(ids), frozenset(names)) if ids or names else None


def profile_modules(profile: Profile, hlo_path: str | Path | None = None, stage: str = "after",
                    ran: Executed | None = None, converted: dict | None = None) -> tuple[list[HloModule], list[str]]:
    """Every module we can find for the profile (with `ran`: only those its ops ran in, the trace's
    other HloProtos left undecoded). ``converted``: a dict kept between calls for one profile, so a
    module converted by one is reused by the next (the list and its order are the same without it).

    The trace's own HLO (the optimized modules that ran) wins over a dump found
    beside it; a dump the user names with ``--hlo``, or asks for with
    ``--stage before``, wins over the trace's.
    """
    keep = ran.holds if ran is not None else None
    modules, warnings = modules_from_trace_protos(profile.hlo_protos, profile.source.path, keep=keep,
                                                  converted=converted)
    dump = Path(hlo_path) if hlo_path else find_dump_dir(profile.source.path)
    if dump is None:
        if stage == "before":
            warnings.append("--stage before needs an XLA dump (--hlo DIR): a trace carries only the "
                            "optimized modules, which are used")
        return modules, warnings
    dump_first = bool(hlo_path) or stage == "before"
    wanted = None
    if not dump_first:  # a dumped module the trace carries, or one that never ran, would be dropped below
        own = {m.name for m in modules}
        wanted = (lambda name: name not in own and (ran is None or ran.holds(name, None)))
    dumped, dump_warnings = load_hlo_modules(dump, stage=stage, wanted=wanted, converted=converted)
    warnings += dump_warnings
    first, second = (dumped, modules) if dump_first else (modules, dumped)
    have = {m.name for m in first}
    found = first + [m for m in second if m.name not in have]
    return (found if ran is None else [m for m in found if ran.holds(m.name, m.program_id)]), warnings


def cost_table(modules: list[HloModule]) -> tuple[pd.DataFrame, list[str]]:
    """All modules' instruction costs in one frame, with a `program_id` column (-1 when unknown).

    Program ids are uint64 in XLA; like the op table, the column holds them
    bit for bit in int64 (see parsers.tables.conventions.as_int64).
    """
    rows, warnings = [], []
    program_at, name_at = list(COLUMNS).index("program_id"), list(COLUMNS).index("name")
    for module in modules:
        module_rows, module_warnings = instruction_rows(module)
        warnings += module_warnings
        program_id = -1 if module.program_id is None else as_int64(module.program_id)
        prints = op_fingerprints([module])
        rows += [(*r[:program_at], program_id, *r[program_at + 1:], prints.get((module.name, r[name_at]), ""))
                 for r in module_rows]
    if not modules:
        return pd.DataFrame(), warnings
    table = costs_frame(rows, extra=("fingerprint",))     # one frame for all modules: no frame per module
    table["program_id"] = table["program_id"].astype("int64")
    return table, warnings


# Instructions that name values rather than run as ops: no fingerprint, not compared.
NOT_EXECUTED = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all",
                "partition-id", "replica-id"}


def _computation_text(module: HloModule, name: str, memo: dict[str, str], depth: int = 0) -> str:
    """Opcodes and shapes of a called computation (recursively), with no instruction names."""
    if name in memo:
        return memo[name]
    comp = module.computations.get(name)
    if comp is None or depth > 8:
        return "?"
    parts = []
    for inst in comp.instructions:
        inner = ",".join(_computation_text(module, c, memo, depth + 1) for c in inst.called_computations)
        parts.append(f"{inst.opcode}:{shape_text(inst.shape)}:{inst.custom_call_target or ''}({inner})")
    memo[name] = hashlib.blake2b(";".join(parts).encode(), digest_size=8).hexdigest()
    return memo[name]


def op_fingerprints(modules: list[HloModule]) -> dict[tuple[str, str], str]:
    """(module, instruction name) -> a short hash of what the instruction computes.

    The hash covers opcode, shape, fusion kind, custom-call target and the
    opcodes and shapes of the computations it calls, but no names, so a fusion
    XLA renumbered (fusion.3 -> fusion.7) keeps its fingerprint.
    """
    out: dict[tuple[str, str], str] = {}
    for module in modules:
        memo: dict[str, str] = {}
        for comp in module.computations.values():
            for inst in comp.instructions:
                key = (module.name, inst.name)
                if key in out or inst.opcode in NOT_EXECUTED:
                    continue
                inner = ",".join(_computation_text(module, c, memo) for c in inst.called_computations)
                text = (f"{inst.opcode}|{shape_text(inst.shape)}|{inst.fusion_kind or ''}|"
                        f"{inst.custom_call_target or ''}|{inner}")
                out[key] = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    return out
