"""Cost tables of a module: one row per op-level instruction, plus module totals."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from traceview.cost.async_wrapped import execution_thread, wrapped_op
from traceview.cost.categories import category, math_dtype
from traceview.cost.collectives import CollectiveInfo, collective_info
from traceview.cost.library import is_library_call
from traceview.cost.model import Cost, ModuleAnalysis
from traceview.cost.shapes import shape_text, unknown_element_types
from traceview.errors import UserError
from traceview.parsers.hlo.model import Computation, HloModule, Instruction

# Column -> dtype of instruction_costs(); documented in traceview/cost/__init__.py.
COLUMNS: dict[str, str] = {
    "module": "object", "program_id": "object", "computation": "object", "name": "object", "opcode": "object",
    "category": "object", "shape": "object", "dtype": "object", "flops": "float64", "transcendentals": "float64",
    "bytes_read": "float64", "bytes_written": "float64", "bytes_accessed": "float64", "multiplier": "float64",
    "flops_per_step": "float64", "bytes_accessed_per_step": "float64",
    "collective_kind": "object", "payload_bytes": "float64", "group_size": "float64", "groups": "object",
    "crosses_dcn": "object", "ring_directions": "float64", "unknown": "bool", "note": "object", "source_file": "object",
    "source_line": "float64", "fusion_kind": "object",
    "trip_count": "float64", "execution_thread": "object", "cost_lower_bound": "bool", "contraction": "bool",
    "op_name": "object", "source_function": "object", "precision": "object", "partial_access": "object",
}
def _roots(module: HloModule) -> list[Computation]:
    """The entry computation; without one, every computation that nothing calls."""
    entry = module.entry_computation()
    if entry is not None:
        return [entry]
    comps = module.computations
    called = {c for comp in comps.values() for inst in comp.instructions for c in inst.called_computations}
    return [c for name, c in comps.items() if name not in called]


def _op_computations(module: HloModule, analysis: ModuleAnalysis,
                     warnings: list[str]) -> list[tuple[Computation, float]]:
    """Computations whose instructions run as ops, each with its loop multiplier.

    Walks from the entry through while bodies/conditions, conditional branches
    and calls; fused computations and to_apply reducers are not ops. Without an
    ENTRY (truncated text) every computation that nothing calls is a root.
    """
    comps = module.computations
    roots = _roots(module)
    out: list[tuple[Computation, float]] = []
    seen: set[str] = set()
    stack = [(c, 1.0) for c in reversed(roots)]
    while stack:
        comp, mult = stack.pop()
        if comp.name in seen:
            continue
        seen.add(comp.name)
        out.append((comp, mult))
        children: list[tuple[Computation, float]] = []
        for inst in comp.instructions:
            op = inst.opcode
            if op == "while":
                trips = analysis.trip_count(inst, comp).count
                if trips is None:
                    warnings.append(f"{module.name}: while loop {inst.name!r} has no known trip count (none in "
                                    "backend_config, and its condition is not a counter compared with a "
                                    "constant); its body's multiplier is NaN and per-step totals count it once")
                inner = mult * trips if trips is not None else math.nan
                for key, pos in (("condition", 0), ("body", 1)):
                    sub = analysis.called(inst, key, pos)
                    if sub is not None:
                        children.append((sub, inner))
            elif op in ("conditional", "call"):
                for name in inst.called_computations:
                    sub = comps.get(name)
                    if sub is not None:
                        children.append((sub, mult))
        stack.extend(reversed(children))
    return out


def _dominant_contraction(inst: Instruction, analysis: ModuleAnalysis):
    """(opcode, operand shapes) of the heaviest dot/convolution/GEMM call inside a fusion, or None."""
    fused = analysis.called(inst, "calls")
    if fused is None:
        return None
    best, best_flops = None, -1.0
    for sub in fused.instructions:
        if sub.opcode in ("dot", "convolution", "ragged-dot", "scaled-dot") or (sub.opcode == "custom-call"):
            flops = analysis.own_cost(sub, fused).flops
            if flops > best_flops:
                best, best_flops = (sub.opcode, analysis.operand_shapes(sub, fused)), flops
    return best


def instruction_costs(module: HloModule, devices_per_slice: int | None = None) -> pd.DataFrame:
    """One row per instruction of every op-level computation (see :data:`COLUMNS`).

    ``devices_per_slice`` (e.g. chips per TPU slice) lets ``crosses_dcn`` say
    whether a collective's groups span slices; without it that column is None.
    Warnings (unknown opcodes or targets, unknown trip counts) are in
    ``df.attrs["warnings"]``.
    """
    rows, warnings = instruction_rows(module, devices_per_slice)
    df = costs_frame(rows)
    df.attrs["warnings"] = warnings
    return df


def instruction_rows(module: HloModule, devices_per_slice: int | None = None) -> tuple[list[tuple], list[str]]:
    """:func:`instruction_costs` as row tuples in :data:`COLUMNS` order, and its warnings (several
    modules' rows make one frame at once with :func:`costs_frame`)."""
    analysis = ModuleAnalysis(module)
    warnings: list[str] = []
    rows: list[tuple] = []
    odd_types: set[str] = set()
    for comp, mult in _op_computations(module, analysis, warnings):
        for inst in comp.instructions:
            rows.append(_row(module, comp, inst, mult, analysis, devices_per_slice))
            odd_types |= unknown_element_types(inst.shape)
    warnings.extend(_analysis_warnings(module, analysis))
    if odd_types:
        warnings.append(f"{module.name}: unknown element types {', '.join(sorted(odd_types))}; "
                        "their arrays count as zero bytes")
    kind_at, groups_at, size_at = (list(COLUMNS).index(c) for c in ("collective_kind", "groups", "group_size"))
    unsized = [r for r in rows if r[kind_at] and r[groups_at] is None and np.isnan(r[size_at])]
    if unsized:
        warnings.append(f"{module.name}: {len(unsized)} collectives run over all devices but the module does not "
                        "say how many (no num_partitions/replica_count); their group_size is unknown")
    return rows, warnings


def costs_frame(rows: list[tuple], extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """The :data:`COLUMNS` frame (typed) of row tuples; ``extra`` names columns the tuples carry after them."""
    columns = list(COLUMNS) + list(extra)
    df = pd.DataFrame.from_records(rows, columns=columns) if rows else pd.DataFrame(
        {k: pd.Series(dtype=COLUMNS.get(k, "object")) for k in columns})
    return df.astype({k: v for k, v in COLUMNS.items() if v != "object"})


def _collective(inst: Instruction, comp: Computation, operands: list, analysis: ModuleAnalysis, module: HloModule,
                devices_per_slice: int | None) -> tuple[CollectiveInfo | None, Instruction | None]:
    """The collective an instruction runs (itself, or the op an async pair wraps) and that wrapped op."""
    op = inst.opcode
    if op.startswith("async-"):
        found = wrapped_op(inst, analysis, comp)
        if found is None:
            return None, None
        wrapped, wrapped_comp = found
        if op == "async-start":
            shapes = analysis.operand_shapes(wrapped, wrapped_comp)
            return collective_info(wrapped, shapes, module, devices_per_slice), wrapped
        return collective_info(wrapped, [], module, devices_per_slice, wrapped.opcode + "-done"), wrapped
    if op.endswith("-done") and inst.operands:  # a -done names its groups only through its -start
        start = analysis.index(comp).by_name.get(inst.operands[0], inst)
        return collective_info(start, [], module, devices_per_slice, op), None
    return collective_info(inst, operands, module, devices_per_slice), None


def _row(module: HloModule, comp: Computation, inst: Instruction, mult: float, analysis: ModuleAnalysis,
         devices_per_slice: int | None) -> tuple:
    cost: Cost = analysis.own_cost(inst, comp)
    operands = analysis.operand_shapes(inst, comp) if inst.opcode not in ("parameter", "constant") else []
    coll, wrapped = _collective(inst, comp, operands, analysis, module, devices_per_slice)
    cat = category(wrapped or inst)
    dominant = _dominant_contraction(inst, analysis) if inst.opcode == "fusion" else None
    dtype = math_dtype(wrapped or inst, operands if wrapped is None else [], dominant)
    md = inst.metadata
    line = md.get("source_line")
    # A kernel costed by its shapes alone has no FLOP figure: unknown (NaN), never 0 (docs/architecture.md).
    flops = np.nan if cost.lower_bound else cost.flops
    return (module.name, module.program_id, comp.name, inst.name, inst.opcode, cat, shape_text(inst.shape), dtype,
            flops, cost.transcendentals, cost.bytes_read, cost.bytes_written, cost.bytes_accessed, mult,
            flops * mult, cost.bytes_accessed * mult,
            coll.kind if coll else "", coll.payload_bytes if coll else 0.0,
            np.nan if coll is None or coll.group_size is None else float(coll.group_size),
            coll.groups if coll else None, coll.crosses_dcn if coll else None,
            float(coll.ring_directions) if coll and coll.ring_directions else np.nan, cost.unknown, cost.note,
            md.get("source_file", ""), float(line) if line and line.isdigit() else np.nan, inst.fusion_kind or "",
            _trips(inst, comp, analysis), execution_thread(inst, analysis, comp), cost.lower_bound,
            _is_contraction(wrapped or inst, dominant), md.get("op_name", ""), md.get("source_function", ""),
            _precision(wrapped or inst, analysis), _partial_access(inst, analysis))


def _trips(inst: Instruction, comp: Computation, analysis: ModuleAnalysis) -> float:
    if inst.opcode != "while":
        return np.nan
    count = analysis.trip_count(inst, comp).count
    return float(count) if count is not None else np.nan


# the dot algorithm that keeps full f32 (XLA's ALG_DOT_F32_F32_F32, as HLO text prints it)
_FULL_F32 = "dot_f32_f32_f32"


def _precision(inst: Instruction, analysis: ModuleAnalysis) -> str:
    """``"highest"`` when the op's contraction asks for full f32 precision (``operand_precision={highest,...}``
    or ``algorithm=dot_f32_f32_f32`` on it or a fused dot / convolution / library call, or a HIGHEST operand
    or an F32_F32_F32 algorithm in a library call's config), else ``""`` (XLA's DEFAULT / HIGH: an f32 dot
    that a GPU with TF32 tensor cores runs as TF32)."""
    parts = [inst]
    if inst.opcode == "fusion" and (fused := analysis.called(inst, "calls")) is not None:
        parts += [sub for sub in fused.instructions if sub.opcode in ("dot", "convolution", "custom-call", "fusion")]
    for part in parts:
        own, library = part.typed.precision, part.typed.backend_precision
        if "highest" in own.operands + library.operands or _FULL_F32 in (own.algorithm, library.algorithm):
            return "highest"
    return ""


_IN_PLACE = frozenset({"scatter", "dynamic-update-slice"})
_PART_READ = frozenset({"slice", "dynamic-slice", "gather"})


def _partial_access(inst: Instruction, analysis: ModuleAnalysis) -> str:
    """Why the op may touch fewer bytes than XLA's cost analysis counts (``""``: no such reason): an in-place
    update (scatter, dynamic-update-slice) writes only its updates but is counted over the whole buffer; a
    slice or gather behind a bitcast or reshape reads part of an operand that is counted whole. Shown for an
    op measured faster than its roofline."""
    inner = [inst]
    if inst.opcode == "fusion" and (fused := analysis.called(inst, "calls")) is not None:
        inner = fused.instructions
    opcodes = {sub.opcode for sub in inner}
    if opcodes & _IN_PLACE:
        return (f"updates a buffer in place ({', '.join(sorted(opcodes & _IN_PLACE))}): XLA's cost counts the whole "
                "buffer, the kernel touches only the updated part")
    if opcodes & _PART_READ:
        return (f"reads part of an operand ({', '.join(sorted(opcodes & _PART_READ))}): XLA's cost counts the "
                "whole operand where the slice sits behind a bitcast or reshape")
    return ""


def _is_contraction(inst: Instruction, dominant) -> bool:
    """Whether the op's FLOPs are a matrix contraction (dot, convolution, a GEMM library call, or a
    fusion holding one): the work that runs on a TPU's MXU / a GPU's tensor cores, where a precision
    rule (f32 as bf16 passes) applies."""
    if inst.opcode in ("dot", "convolution", "ragged-dot"):
        return True
    if inst.opcode == "custom-call":
        return is_library_call(inst.custom_call_target)
    return dominant is not None


def _analysis_warnings(module: HloModule, analysis: ModuleAnalysis) -> list[str]:
    out = []
    if analysis.unknown_opcodes:
        listed = ", ".join(f"{k} (x{len(v)})" for k, v in sorted(analysis.unknown_opcodes.items()))
        out.append(f"{module.name}: no cost rule for opcodes {listed}; counted as zero and marked unknown")
    if analysis.lower_bound_kernels:
        names = sorted(n for v in analysis.lower_bound_kernels.values() for n in v)
        targets = ", ".join(f"{k} (x{len(v)})" for k, v in sorted(analysis.lower_bound_kernels.items()))
        shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
        out.append(f"{module.name}: {len(names)} custom kernels have no cost estimate ({targets}): FLOPs unknown "
                   f"(null; FLOP totals leave them out), bytes of their operands and results are a lower bound, judged against the memory roofline: "
                   f"{shown}")
    if analysis.malformed:
        name, err = next(iter(analysis.malformed.items()))
        out.append(f"{module.name}: {len(analysis.malformed)} instructions could not be costed (e.g. {name}: "
                   f"{err}); counted as zero and marked unknown")
    if analysis.missing_operands:
        some = ", ".join(sorted(analysis.missing_operands)[:5])
        out.append(f"{module.name}: {len(analysis.missing_operands)} operands name no instruction "
                   f"(e.g. {some}); their sizes count as zero")
    return out


def module_totals(module: HloModule) -> dict:
    """Module FLOPs, transcendentals and bytes as XLA's HloCostAnalysis defines them for the entry
    computation (what ``compiled.cost_analysis()`` reports: while bodies counted once), plus
    ``*_per_step`` figures with while bodies multiplied by their known trip counts, and ``warnings``.

    ``flops`` sums the ops that have a FLOP figure; ``flops_unknown_ops`` names the custom kernels
    left out because they have none (no cost estimate; a warning says so too). When those kernels
    are the module's only math (the sum is 0), ``flops`` and ``flops_per_step`` are None."""
    analysis = ModuleAnalysis(module)
    warnings: list[str] = []
    entry = module.entry_computation()
    once, step = Cost(), Cost()
    if entry is not None:
        once, step = analysis.computation_cost(entry), analysis.computation_cost(entry, per_step=True)
    else:
        warnings.append(f"{module.name}: no ENTRY computation; totals sum the computations nothing calls "
                        "and are incomplete")
        for comp in _roots(module):
            once.add(analysis.computation_cost(comp))
            step.add(analysis.computation_cost(comp, per_step=True))
    _op_computations(module, analysis, warnings)  # trip-count warnings
    warnings.extend(_analysis_warnings(module, analysis))
    unknown_ops = sorted(n for v in analysis.lower_bound_kernels.values() for n in v)
    # Kernels with no FLOP figure are left out of the sums; when nothing else does any math, the
    # module's FLOPs are unknown (None), not 0.
    flops = None if unknown_ops and once.flops == 0 else once.flops
    flops_per_step = None if unknown_ops and step.flops == 0 else step.flops
    return {"module": module.name, "flops": flops, "transcendentals": once.transcendentals,
            "bytes_accessed": once.bytes_accessed, "flops_per_step": flops_per_step,
            "transcendentals_per_step": step.transcendentals, "bytes_accessed_per_step": step.bytes_accessed,
            "unknown": once.unknown, "lower_bound": once.lower_bound, "flops_unknown_ops": unknown_ops,
            "warnings": warnings}


def fused_instruction_costs(module: HloModule, fusion_name: str) -> pd.DataFrame:
    """The instructions inside one fusion with their own FLOPs (bytes inside a fusion are not memory
    traffic, so only the fusion row of :func:`instruction_costs` carries bytes)."""
    analysis = ModuleAnalysis(module)
    for comp in module.computations.values():
        for inst in comp.instructions:
            if inst.name == fusion_name and inst.opcode == "fusion":
                fused = analysis.called(inst, "calls")
                if fused is None:
                    break
                rows = []
                for sub in fused.instructions:
                    c = analysis.cost(sub, fused)
                    ops = analysis.operand_shapes(sub, fused) if sub.opcode not in ("parameter", "constant") else []
                    rows.append((module.name, fused.name, sub.name, sub.opcode, category(sub), shape_text(sub.shape),
                                 math_dtype(sub, ops), c.flops, c.transcendentals, c.unknown))
                return pd.DataFrame.from_records(rows, columns=["module", "computation", "name", "opcode", "category",
                                                                "shape", "dtype", "flops", "transcendentals",
                                                                "unknown"])
    raise UserError(f"{module.name}: no fusion named {fusion_name!r}")
