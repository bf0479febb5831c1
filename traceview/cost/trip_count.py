"""Trip counts of while loops: from ``known_trip_count`` in backend_config, else from the loop's structure.

The structural rule is the one XLA's ``while_loop_analysis`` applies: the loop
carries a scalar integer counter at tuple index k that

* starts at a constant (the while's operand is a ``tuple`` whose element k is a
  constant, or constants added up, seen through copies, fusions and
  get-tuple-element/tuple chains, as XLA's evaluator folds it),
* is updated by the body as ``add(counter, constant)`` (either operand order)
  or ``subtract(counter, constant)``, or a chain of them (a double-buffered
  loop adds 1 twice), the body's root being a tuple, and
* is compared against a constant by the condition's root,
  ``compare(counter, N)`` or ``compare(N, counter)``, directly or through a
  fusion / call whose parameters map back to the condition's values.

XLA pattern-matches counting up (``LT``/``LE``) and brute-forces the rest (with
its evaluator, which is how it also sees through chained updates); here both directions (``LT``, ``LE``, ``GT``, ``GE``, ``NE``) are solved in closed
form. A loop that never ends (the counter moves away from the bound) has no
trip count. Anything else returns None: the caller warns, naming the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from traceview.parsers.hlo.model import Computation, Instruction

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
            number = inst.typed.parameter_number
            if env is None:
                return ("loop",) if number == 0 else None
            return env.get(number)
        if op == "constant":
            return _constant(inst)
        if op in _PASS_THROUGH and inst.operands:
            return self.term(comp, inst.operands[0], env, depth + 1)
        if op == "get-tuple-element" and inst.operands:
            base = self.term(comp, inst.operands[0], env, depth + 1)
            index = inst.typed.index
            if base == ("loop",):
                return ("iv", index)
            if base is not None and base[0] == "tuple" and 0 <= index < len(base[1]):
                return self.term(base[2], base[1][index], base[3], depth + 1)
            return None
        if op == "tuple":
            return ("tuple", list(inst.operands), comp, env)
        if op == "compare" and len(inst.operands) == 2:
            a, b = (self.term(comp, o, env, depth + 1) for o in inst.operands)
            direction = inst.typed.comparison_direction or ""
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
    """An integer scalar constant's value (the typed record decodes it from either source)."""
    value = inst.typed.integer_scalar
    return ("const", value) if value is not None else None


def _linear(term: Term | None, index: int) -> tuple[int, int] | None:
    """``term`` as ``coef * counter + offset`` when it is a sum of the counter and constants."""
    if term is None:
        return None
    if term == ("iv", index):
        return 1, 0
    if term[0] == "const":
        return 0, term[1]
    if term[0] in ("add", "sub"):
        a, b = _linear(term[1], index), _linear(term[2], index)
        if a is None or b is None:
            return None
        sign = 1 if term[0] == "add" else -1
        return a[0] + sign * b[0], a[1] + sign * b[1]
    return None


def _counter_index(term: Term | None) -> int | None:
    """The tuple index of the one loop element a term reads, if it reads exactly one."""
    if term is None:
        return None
    if term[0] == "iv":
        return term[1]
    found = {i for t in term[1:] if isinstance(t, tuple) for i in [_counter_index(t)] if i is not None}
    return found.pop() if len(found) == 1 else None


def _induction(cond: Term | None) -> tuple[int, str, int] | None:
    """(tuple index, direction as ``counter DIR bound``, bound) from the condition's term.

    Either side may add constants to the counter (``i + 1 < N`` reads as ``i < N - 1``)."""
    if cond is None or cond[0] != "cmp" or cond[1] not in _SWAP:
        return None
    _, direction, a, b = cond
    index = _counter_index(cond)
    if index is None:
        return None
    left, right = _linear(a, index), _linear(b, index)
    if left is None or right is None:
        return None
    if left[0] == 1 and right[0] == 0:
        return index, direction, right[1] - left[1]
    if left[0] == 0 and right[0] == 1:
        return index, _SWAP[direction], left[1] - right[1]
    return None


def _step(update: Term | None, index: int) -> int | None:
    """The constant the body adds to the counter (``i + 1 + 1`` after double buffering gives 2)."""
    linear = _linear(update, index)
    return linear[1] if linear is not None and linear[0] == 1 else None


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
    init = _linear(r.term(init_tuple[2], init_tuple[1][index], init_tuple[3]), -1)  # constants only
    if init is None or init[0] != 0:
        return None
    return solve(init[1], step, direction, bound)


def while_trip_count(inst: Instruction, parent: Computation, cond: Computation | None, body: Computation | None,
                     called: Callable[[Instruction, str, int], Computation | None],
                     by_name: Callable[[Computation], dict[str, Instruction]]) -> TripCount:
    """``known_trip_count`` from backend_config when XLA wrote one, else the structural count."""
    known = inst.typed.known_trip_count
    if known is not None:
        return TripCount(known, "backend_config")
    inferred = structural_trip_count(inst, parent, cond, body, called, by_name)
    return TripCount(inferred, "loop structure" if inferred is not None else "")
