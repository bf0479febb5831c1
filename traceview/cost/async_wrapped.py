"""What an async wrapper runs: ``async-start`` / ``async-update`` / ``async-done`` with ``calls=``.

XLA expresses many async ops as an ``async-start`` calling a computation on
some execution thread (``async_execution_thread="sparsecore"`` for work
offloaded to the TPU's SparseCore, "main" or none otherwise). The wrapped
computation's root may be the op itself, or a ``call`` to a further
computation (the SparseCore form), which may hold the collective among
other instructions. :func:`wrapped_op` finds the op the wrapper stands for:
the largest collective it holds, else the root it runs, seen through calls.
"""

from __future__ import annotations

from traceview.cost.collectives import collective_kind
from traceview.cost.model import ModuleAnalysis
from traceview.cost.shapes import byte_size
from traceview.parsers.hlo.model import Computation, Instruction

_MAX_NESTING = 16        # call / async-start levels followed inside one wrapper (hostile input)


def async_start_of(inst: Instruction, analysis: ModuleAnalysis, comp: Computation) -> Instruction:
    """The ``async-start`` an ``async-update`` / ``async-done`` belongs to (itself for a start)."""
    start, seen = inst, {inst.name}
    by_name = analysis.index(comp).by_name
    while start.opcode in ("async-done", "async-update") and start.operands:
        prev = by_name.get(start.operands[0])
        if prev is None or prev.name in seen:
            break
        seen.add(prev.name)
        start = prev
    return start


def _root(comp: Computation, analysis: ModuleAnalysis) -> Instruction | None:
    return analysis.index(comp).by_name.get(comp.root or "") or (comp.instructions[-1] if comp.instructions else None)


def _computations(start: Instruction, analysis: ModuleAnalysis) -> list[Computation]:
    """The wrapped computation and every computation it calls through ``call`` / nested async-start."""
    first = analysis.called(start, "calls")
    if first is None:
        return []
    out, seen, stack = [], set(), [(first, 0)]
    while stack:
        comp, depth = stack.pop()
        if comp.name in seen or depth > _MAX_NESTING:
            continue
        seen.add(comp.name)
        out.append(comp)
        for inst in comp.instructions:
            if inst.opcode in ("call", "async-start"):
                sub = analysis.called(inst, "to_apply" if inst.opcode == "call" else "calls")
                if sub is not None:
                    stack.append((sub, depth + 1))
    return out


def wrapped_op(inst: Instruction, analysis: ModuleAnalysis, comp: Computation
               ) -> tuple[Instruction, Computation] | None:
    """(op, its computation) that an async wrapper runs; None when it calls nothing readable.

    Collectives win over everything else (the largest by operand bytes when
    there are several); otherwise the wrapped root, followed through ``call``.
    """
    start = async_start_of(inst, analysis, comp)
    comps = _computations(start, analysis)
    if not comps:
        return None
    best: tuple[float, Instruction, Computation] | None = None
    for sub in comps:
        for candidate in sub.instructions:
            kind, done = collective_kind(candidate.opcode)
            if kind and not done:
                size = float(sum(byte_size(s) for s in analysis.operand_shapes(candidate, sub)))
                if best is None or size > best[0]:
                    best = (size, candidate, sub)
    if best is not None:
        return best[1], best[2]
    sub = comps[0]
    root = _root(sub, analysis)
    for _ in range(_MAX_NESTING):
        if root is None or root.opcode != "call":
            break
        inner = analysis.called(root, "to_apply")
        if inner is None:
            break
        sub, root = inner, _root(inner, analysis)
    return (root, sub) if root is not None else None


def execution_thread(inst: Instruction, analysis: ModuleAnalysis, comp: Computation) -> str:
    """The thread an op runs on: an async wrapper's ``async_execution_thread`` (or its wrapped
    computation's), else its own computation's; "" for the main thread."""
    if inst.opcode.startswith("async-"):
        start = async_start_of(inst, analysis, comp)
        thread = start.typed.async_execution_thread or ""
        if not thread:
            wrapped = analysis.called(start, "calls")
            thread = (wrapped.execution_thread or "") if wrapped is not None else ""
        return "" if thread == "main" else thread
    thread = inst.typed.async_execution_thread or comp.execution_thread or ""
    return "" if thread == "main" else thread
