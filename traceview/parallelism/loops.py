"""Which while loop each computation runs in, and how many times that loop runs.

A collective inside a loop body (or in a computation the body calls) runs once
per iteration: its loop's trip count is what turns bytes per execution into
bytes per step, and what an SPMD pipeline's schedule is read from. Trip
counts are the cost model's (XLA's ``known_trip_count``, else the loop's
structure).
"""

from __future__ import annotations

from dataclasses import dataclass

from traceview.cost.model import ModuleAnalysis
from traceview.parsers.hlo.model import HloModule

MAX_NESTING = 64      # computations followed from a loop body (hostile input)


@dataclass(frozen=True)
class Loop:
    computation: str         # the computation holding the while instruction
    name: str                # the while instruction
    body: str
    trips: int | None        # None: not known


def enclosing_loops(module: HloModule) -> dict[str, Loop]:
    """Computation name -> the innermost while loop whose body runs it (directly or through calls)."""
    analysis = ModuleAnalysis(module)
    out: dict[str, Loop] = {}
    loops: list[Loop] = []
    for comp in module.computations.values():
        for inst in comp.instructions:
            if inst.opcode != "while":
                continue
            body = analysis.called(inst, "body", 1)
            if body is not None:
                loops.append(Loop(comp.name, inst.name, body.name, analysis.trip_count(inst, comp).count))
    # a body's walk stops at nested while instructions: each computation is reached from its innermost loop
    for loop in loops:
        frontier, seen = [loop.body], set[str]()
        while frontier and len(seen) < MAX_NESTING * 16:
            name = frontier.pop()
            if name in seen:
                continue
            seen.add(name)
            out[name] = loop
            called = module.computations.get(name)
            for inst in called.instructions if called else []:
                if inst.opcode != "while":
                    frontier.extend(inst.called_computations)
    return out

