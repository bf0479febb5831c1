"""A generation loop inside one program: prefill, then a ``while`` over the decode steps.

A server that jits the whole generation (``lax.fori_loop`` or ``while_loop`` over the decode steps, the KV
cache and the last token in the loop's carry) runs one program per request batch: there is no separate decode
program to find. In the HLO such a loop reads:

* **KV cache**: a carry element of rank 3 or more the body returns updated in place (``dynamic-update-slice``
  or ``scatter`` on the way from the body's parameter to its root; a rank-2 one collects generated tokens);
* **last token**: an integer carry element of rank 1 or 2 (``s32[batch, 1]`` or ``s32[batch]``) the body
  recomputes (not passed on unchanged).

The loop is the decode phase: ``trip count × calls`` steps of one token per sequence; what the program runs
before the loop is the prefill (its token input, the prompt, gives its tokens per sequence). FLOPs per decode
step are the body's (XLA's cost analysis counts a body once); the prefill's are the rest of the program.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traceview.cost.model import ModuleAnalysis
from traceview.cost.shapes import leaf_bytes
from traceview.inference.programs import _TOKEN_TYPES, Parameter, Program, trace_to_parameter
from traceview.parsers.hlo.model import Computation, HloModule, Instruction


@dataclass
class DecodeLoop:
    """One decode loop of a program (see the module docstring)."""
    while_name: str
    trips: int | None
    body_ops: set[str]                    # the instructions its iterations run (body, nested computations)
    caches: list[Parameter]               # carry elements (number: the element index), role kv_cache
    token: Parameter                      # the last-token carry element, role tokens
    loop_flops: float                     # one iteration (the body once)
    rest_flops: float                     # the program without the loop: the prefill
    evidence: list[str] = field(default_factory=list)

    def decode_program(self, program: Program) -> Program:
        """The program as its decode loop sees it: its weights, the cache and the token of the carry."""
        weights = [p for p in program.parameters if p.role == "weight"]
        return Program(program.module, program.program_id, weights + self.caches + [self.token],
                       program.output_shapes)

    def prefill_program(self, program: Program) -> Program:
        """The program before its loop: its weights and prompt, the cache it fills (the loop's)."""
        return Program(program.module, program.program_id, list(program.parameters) + self.caches,
                       program.output_shapes)


def serves(module: HloModule, program: Program) -> bool:
    """Whether a program that ran is a serving program: it updates a KV cache parameter in place, or runs a
    decode loop inside itself."""
    if program.caches:
        return True
    return any(inst.opcode == "while" for inst in _entry(module)) and bool(decode_loops(module))


def _entry(module: HloModule) -> list[Instruction]:
    entry = module.entry_computation()
    return entry.instructions if entry is not None else []


def decode_loops(module: HloModule) -> list[DecodeLoop]:
    """The entry's while loops whose carry holds a KV cache and the last token."""
    entry = module.entry_computation()
    if entry is None:
        return []
    analysis = ModuleAnalysis(module)
    out = []
    for inst in entry.instructions:
        if inst.opcode != "while":
            continue
        body = analysis.called(inst, "body", 1)
        if body is None:
            continue
        found = _carry(module, body)
        if found is None:
            continue
        caches, token = found
        trips = analysis.trip_count(inst, entry).count
        loop_flops = float(analysis.cost(inst, entry).flops)
        total = float(analysis.computation_cost(entry).flops)
        writes = sorted({w.opcode for c in caches for w in c.writes})
        evidence = [f"loop {inst.name} of {module.name} runs {trips if trips else 'an unknown number of'} times "
                    f"per call; its carry holds a KV cache ({', '.join(f'element {c.number} {c.shape_text}' for c in caches)}, "
                    f"written by {' and '.join(writes)} each iteration) and the last token (element {token.number} "
                    f"{token.shape_text}, recomputed each iteration): a decode loop inside the program"]
        out.append(DecodeLoop(inst.name, trips, _instructions_under(module, body.name), caches, token, loop_flops,
                              max(total - loop_flops, 0.0), evidence))
    return out


def _instructions_under(module: HloModule, name: str) -> set[str]:
    """Names of the instructions of a computation and of every computation it calls."""
    out: set[str] = set()
    frontier, seen = [name], set[str]()
    while frontier and len(seen) < 4096:
        current = frontier.pop()
        comp = module.computations.get(current)
        if current in seen or comp is None:
            continue
        seen.add(current)
        for inst in comp.instructions:
            out.add(inst.name)
            frontier.extend(inst.called_computations)
    return out


def entry_instructions(module: HloModule) -> set[str]:
    entry = module.entry_computation()
    return {i.name for i in entry.instructions} if entry is not None else set()


def _carry(module: HloModule, body: Computation) -> tuple[list[Parameter], Parameter] | None:
    """(the cache elements, the last-token element) of a loop body's carry, or None."""
    names = body.by_name()
    root = names.get(body.root or "")
    if root is None or root.opcode != "tuple":
        return None
    caches, tokens = [], []
    for j, name in enumerate(root.operands):
        inst = names.get(name)
        if inst is None or inst.shape.is_tuple:
            continue
        number, writes, index = trace_to_parameter(module, body, inst)
        if number == 0 and index == j and writes and len(inst.shape.dims) >= 3:   # rank 2: generated tokens
            caches.append(Parameter(j, f"carry element {j}", inst.shape, leaf_bytes(inst.shape), "kv_cache",
                                    writes=writes))
        elif inst.shape.element_type in _TOKEN_TYPES and 1 <= len(inst.shape.dims) <= 2 and \
                (len(inst.shape.dims) == 1 or inst.shape.dims[1] == 1) and not _passed_on(names, inst, j):
            tokens.append(Parameter(j, f"carry element {j}", inst.shape, leaf_bytes(inst.shape), "tokens"))
    if not caches or not tokens:
        return None
    return caches, tokens[0]


def _passed_on(names: dict[str, Instruction], inst: Instruction, j: int) -> bool:
    """Whether root element ``j`` is the body parameter's element ``j`` unchanged (loop-invariant)."""
    while inst.opcode in ("copy", "bitcast") and inst.operands and inst.operands[0] in names:
        inst = names[inst.operands[0]]
    return inst.opcode == "get-tuple-element" and inst.typed.index == j
