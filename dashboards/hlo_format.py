"""Readable HLO for the op-detail panel: find an op's instruction and write it back as one HLO line."""

from __future__ import annotations

from collections.abc import Iterable

from traceview.cost.shapes import shape_text
from traceview.parsers.hlo.model import Computation, HloModule, Instruction, Shape
from traceview.parsers.tables.conventions import as_uint64

# Attributes shown elsewhere in the panel (or too long for one line).
_HIDDEN_ATTRIBUTES = {"metadata", "backend_config", "frontend_attributes", "statistics"}


def find_instruction(modules: Iterable[HloModule], module: str, op: str, program_id: int | None = None,
                     computation: str | None = None) -> tuple[HloModule, Computation, Instruction] | None:
    """The instruction an op row names: by module (and program id, when several share a name) and op name."""
    candidates = [m for m in modules if m.name == module]
    if program_id is not None and program_id != -1 and len(candidates) > 1:
        wanted = as_uint64(int(program_id))
        candidates = [m for m in candidates if m.program_id is None or as_uint64(int(m.program_id)) == wanted] \
            or candidates
    for m in candidates:
        comps = list(m.computations.values())
        if computation and computation in m.computations:
            comps.sort(key=lambda c: c.name != computation)   # the named one first
        for comp in comps:
            for inst in comp.instructions:
                if inst.name == op:
                    return m, comp, inst
    return None


def full_shape_text(shape: Shape) -> str:
    """A shape with its layout, as XLA prints it: ``f32[128,512]{1,0}``."""
    if shape.is_tuple:
        return "(" + ", ".join(full_shape_text(s) for s in shape.tuple_shapes) + ")"
    return shape_text(shape) + (shape.layout or "")


def instruction_text(inst: Instruction, comp: Computation | None = None) -> str:
    """``%name = shape opcode(%operand, ...), attr=value, ...`` as XLA prints it in its dumps, less the
    metadata and backend config (shown apart)."""
    operands = [f"%{name}" for name in inst.operands]
    hidden = set(_HIDDEN_ATTRIBUTES)
    # XLA writes a parameter's number and a constant's value where the operands go.
    for opcode, key in (("parameter", "parameter_number"), ("constant", "literal")):
        if inst.opcode == opcode and key in inst.attributes:
            operands, hidden = [inst.attributes[key]], hidden | {key}
    attrs = [f"{k}={v}" for k, v in inst.attributes.items() if k not in hidden]
    if inst.custom_call_target and "custom_call_target" not in inst.attributes:
        attrs.append(f'custom_call_target="{inst.custom_call_target}"')
    root = "ROOT " if comp is not None and comp.root == inst.name else ""
    text = f"{root}%{inst.name} = {full_shape_text(inst.shape)} {inst.opcode}({', '.join(operands)})"
    return text + "".join(f", {a}" for a in attrs)


def computation_text(comp: Computation) -> str:
    """Every instruction of a computation, one per line, as an HLO text block."""
    body = "\n".join("  " + instruction_text(inst, comp) for inst in comp.instructions)
    return f"%{comp.name} {{\n{body}\n}}"


def source_location(inst: Instruction) -> str | None:
    """``file:line`` from the instruction's metadata, when it has one."""
    file = inst.metadata.get("source_file")
    if not file:
        return None
    line = inst.metadata.get("source_line")
    return f"{file}:{line}" if line else file


def source_snippet(file: str, line: int, context: int = 3) -> str | None:
    """The lines around `line` of `file` when that file exists on this machine (traces name paths of the
    machine that ran the program)."""
    try:
        with open(file, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    if not 1 <= line <= len(lines):
        return None
    lo, hi = max(1, line - context), min(len(lines), line + context)
    return "\n".join(f"{'>' if n == line else ' '}{n:5d}  {lines[n - 1]}" for n in range(lo, hi + 1))
