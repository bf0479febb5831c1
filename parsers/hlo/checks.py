"""Checks every HLO module passes before anything walks it: no call cycles, bounded depths, possible shapes.

Both readers (text and proto) end with :func:`check_module`, so the cost model
and reports may recurse over called computations and tuple shapes without
guarding against cycles, unbounded nesting or arrays no machine could hold.
"""

from __future__ import annotations

from traceview.errors import HloError
from traceview.parsers.hlo.model import HloModule, Shape

# Deeper than anything XLA emits (its own tuple shapes and call graphs stay within a few dozen levels),
# shallow enough that recursive walks stay far from Python's recursion limit.
MAX_TUPLE_DEPTH = 64
MAX_CALL_DEPTH = 64
MAX_RANK = 64
# No array holds more elements than this (2^48 is 256 T elements, 1 PiB of f32): larger dims are corrupt.
MAX_ELEMENTS = 1 << 48


def shape_problem(shape: Shape) -> str | None:
    """Why `shape` is impossible (negative or overflowing dims, too deep a tuple), or None."""
    stack: list[tuple[Shape, int]] = [(shape, 1)]
    while stack:
        s, depth = stack.pop()
        if depth > MAX_TUPLE_DEPTH:
            return f"tuple shape nested more than {MAX_TUPLE_DEPTH} deep"
        if s.is_tuple:
            stack.extend((t, depth + 1) for t in s.tuple_shapes)
            continue
        if len(s.dims) > MAX_RANK:
            return f"rank {len(s.dims)} above {MAX_RANK}"
        elements = 1
        for k, d in enumerate(s.dims):
            dynamic = bool(s.dynamic) and k < len(s.dynamic) and s.dynamic[k]
            if d < 0 and not (dynamic and d == -1):  # -1: an unbounded dynamic dim (``?``)
                return f"negative dimension {d}"
            elements *= max(d, 1)
            if elements > MAX_ELEMENTS:
                return f"more than 2^48 elements (dims {list(s.dims)[:8]})"
    return None


def check_module(module: HloModule, where: str) -> None:
    """Raise HloError (naming `where` and the instruction) for impossible shapes, call cycles or too deep calls."""
    for comp in module.computations.values():
        for inst in comp.instructions:
            problem = shape_problem(inst.shape)
            if problem:
                raise HloError(f"{where}: instruction {inst.name!r} in {comp.name!r} has an impossible "
                               f"shape: {problem}")
    _check_calls(module, where)


def _check_calls(module: HloModule, where: str) -> None:
    """Called computations form a DAG no deeper than MAX_CALL_DEPTH (iterative DFS, no recursion)."""
    comps = module.computations
    calls = {name: sorted({c for inst in comp.instructions for c in inst.called_computations if c in comps})
             for name, comp in comps.items()}
    depth: dict[str, int] = {}       # finished: longest call chain below
    on_path: dict[str, int] = {}     # name -> position on the current path
    for start in comps:
        if start in depth:
            continue
        path = [start]
        on_path[start] = 0
        iters = [iter(calls[start])]
        while iters:
            node = path[-1]
            nxt = next(iters[-1], None)
            if nxt is None:
                depth[node] = 1 + max((depth[c] for c in calls[node]), default=0)
                if depth[node] > MAX_CALL_DEPTH:
                    raise HloError(f"{where}: computations call each other more than {MAX_CALL_DEPTH} levels "
                                   f"deep (below {node!r})")
                del on_path[node]
                path.pop()
                iters.pop()
                continue
            if nxt in on_path:
                cycle = path[on_path[nxt]:] + [nxt]
                raise HloError(f"{where}: computation {nxt!r} calls itself "
                               f"({' -> '.join(cycle[:6])}{' -> ...' if len(cycle) > 6 else ''})")
            if nxt in depth:
                continue
            on_path[nxt] = len(path)
            path.append(nxt)
            iters.append(iter(calls[nxt]))
