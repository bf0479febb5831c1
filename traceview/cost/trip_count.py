"""Trip counts of while loops: from ``known_trip_count`` in backend_config, else from the loop's structure.

The structural rule is the one XLA's ``while_loop_analysis`` applies: the loop
carries a scalar integer counter at tuple index k that

* starts at a constant (the while's operand is a ``tuple`` whose element k is a
  constant, seen through copies and get-tuple-element/tuple chains),
* is updated by the body as ``add(counter, constant)`` (either operand order)
  or ``subtract(counter, constant)``, the body's root being a tuple, and
* is compared against a constant by the condition's root,
  ``compare(counter, N)`` or ``compare(N, counter)``, directly or through a
  fusion / call whose parameters map back to the condition's values.

XLA pattern-matches counting up (``LT``/``LE``) and brute-forces the rest; here
both directions (``LT``, ``LE``, ``GT``, ``GE``, ``NE``) are solved in closed
form. A loop that never ends (the counter moves away from the bound) has no
trip count. Anything else returns None: the caller warns, naming the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from traceview.cost import attrs as A
from traceview.parsers.hlo_model import Computation, Instruction

# Ops that hand a scalar through unchanged (as far as the counter is concerned).
_PASS_THROUGH = frozenset({"copy", "bitcast", "reshape", "convert"})
_SWAP = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "NE": "NE", "EQ": "EQ"}
_MAX_DEPTH = 64          # expression nesting followed before giving up (hostile input)


@dataclass(frozen=True)
class TripCount:
    count: int | None
    source: str          # "backend_config", "loop structure", or "" when unknown


# Expression terms: ("iv", k) the loop tuple's element k; ("const", v); ("cmp", dir, a, b);
# ("add", a, b); ("sub", a, b); ("tuple", [names], comp, env) for a tuple instruction.
Term = tuple


class _Resolver:
    """Folds the scalar expression behind an instruction into a :data:`Term`."""

    def __init__(self, called: Callable[[Instruction, str, int], Computation | None],
                 by_name: Callable[[Computation], dict[str, Instruction]]):
        self.called = called
        self.by_name = by_name

    def term(self, comp: Computation, name: str, env: dict[int, Term] | None, depth: int = 0) -> Term | None:
        """``env`` maps parameter numbers to terms (None: parameter 0 is the loop tuple)."""
        if depth > _MAX_DEPTH:
            return None
        inst = self.by_name(comp).get(name)
        if inst is None:
            return None
        op = inst.opcode
        if op == "parameter":
            number = A.int_attr(inst.attributes, "parameter_number", 0)
            if env is None:
                return ("loop",) if number == 0 else None
            return env.get(number)
        if op == "constant":
            return _constant(inst)
        if op in _PASS_THROUGH and inst.operands:
            return self.term(comp, inst.operands[0], env, depth + 1)
        if op == "get-tuple-element" and inst.operands:
            base = self.term(comp, inst.operands[0], env, depth + 1)
            index = A.int_attr(inst.attributes, "index", -1)
            if base == ("loop",):
                return ("iv", index)
            if base is not None and base[0] == "tuple" and 0 <= index < len(base[1]):
                return self.term(base[2], base[1][index], base[3], depth + 1)
            return None
        if op == "tuple":
            return ("tuple", list(inst.operands), comp, env)
        if op == "compare" and len(inst.operands) == 2:
            a, b = (self.term(comp, o, env, depth + 1) for o in inst.operands)
            direction = inst.attributes.get("direction", "").strip()
            return ("cmp", direction, a, b) if a is not None and b is not None else None
        if op in ("add", "subtract") and len(inst.operands) == 2:
            a, b = (self.term(comp, o, env, depth + 1) for o in inst.operands)
            return ("add" if op == "add" else "sub", a, b) if a is not None and b is not None else None
        if op in ("fusion", "call"):
            sub = self.called(inst, "calls" if op == "fusion" else "to_apply", 0)
            if sub is None or not sub.root:
                return None
            inner: dict[int, Term] = {}
            for i, operand in enumerate(inst.operands):
                t = self.term(comp, operand, env, depth + 1)
                if t is not None:
                    inner[i] = t
            return self.term(sub, sub.root, inner, depth + 1)
        return None


def _constant(inst: Instruction) -> Term | None:
    if inst.shape.is_tuple or inst.shape.dims or inst.shape.element_type[:1] not in ("s", "u"):
        return None
    try:
        return ("const", int(inst.attributes.get("literal", "").strip()))
    except ValueError:
        return None


def _induction(cond: Term | None) -> tuple[int, str, int] | None:
    """(tuple index, direction as ``counter DIR bound``, bound) from the condition's term."""
    if cond is None or cond[0] != "cmp":
        return None
    _, direction, a, b = cond
    if a[0] == "iv" and b[0] == "const":
        return a[1], direction, b[1]
    if b[0] == "iv" and a[0] == "const" and direction in _SWAP:
        return b[1], _SWAP[direction], a[1]
    return None


def _step(update: Term | None, index: int) -> int | None:
    if update is None:
        return None
    counter = ("iv", index)
    if update[0] == "add":
        if update[1] == counter and update[2][0] == "const":
            return update[2][1]
        if update[2] == counter and update[1][0] == "const":
            return update[1][1]
    if update[0] == "sub" and update[1] == counter and update[2][0] == "const":
        return -update[2][1]
    return None


def solve(init: int, step: int, direction: str, bound: int) -> int | None:
    """Iterations of ``for (i = init; i DIR bound; i += step)``; None when it never ends or is not linear."""
    if step == 0:
        return None

    def holds(i: int) -> bool:
        return {"LT": i < bound, "LE": i <= bound, "GT": i > bound, "GE": i >= bound,
                "NE": i != bound, "EQ": i == bound}.get(direction, False)

    if direction not in ("LT", "LE", "GT", "GE", "NE", "EQ"):
        return None
    if not holds(init):
        return 0
    if direction == "EQ":
        return 1
    if direction == "NE":
        distance = bound - init
        return distance // step if distance % step == 0 and distance // step > 0 else None
    moving_up = step > 0
    if moving_up != (direction in ("LT", "LE")):
        return None  # the counter moves away from the bound: the loop never ends by this test
    last = bound - 1 if direction == "LT" else bound + 1 if direction == "GT" else bound
    return abs(last - init) // abs(step) + 1


def structural_trip_count(inst: Instruction, parent: Computation, cond: Computation | None,
                          body: Computation | None,
                          called: Callable[[Instruction, str, int], Computation | None],
                          by_name: Callable[[Computation], dict[str, Instruction]]) -> int | None:
    """The trip count a counted loop's structure implies (see the module docstring), or None."""
    if cond is None or body is None or not cond.root or not body.root or not inst.operands:
        return None
    r = _Resolver(called, by_name)
    found = _induction(r.term(cond, cond.root, None))
    if found is None:
        return None
    index, direction, bound = found
    body_root = r.term(body, body.root, None)
    if body_root is None or body_root[0] != "tuple" or not 0 <= index < len(body_root[1]):
        return None
    step = _step(r.term(body, body_root[1][index], None), index)
    init_tuple = r.term(parent, inst.operands[0], {})
    if step is None or init_tuple is None or init_tuple[0] != "tuple" or not 0 <= index < len(init_tuple[1]):
        return None
    init = r.term(init_tuple[2], init_tuple[1][index], init_tuple[3])
    if init is None or init[0] != "const":
        return None
    return solve(init[1], step, direction, bound)


def while_trip_count(inst: Instruction, parent: Computation, cond: Computation | None, body: Computation | None,
                     called: Callable[[Instruction, str, int], Computation | None],
                     by_name: Callable[[Computation], dict[str, Instruction]]) -> TripCount:
    """``known_trip_count`` from backend_config when XLA wrote one, else the structural count."""
    known = A.known_trip_count(inst.backend_config)
    if known is not None:
        return TripCount(known, "backend_config")
    inferred = structural_trip_count(inst, parent, cond, body, called, by_name)
    return TripCount(inferred, "loop structure" if inferred is not None else "")
