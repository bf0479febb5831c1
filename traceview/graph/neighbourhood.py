"""An HLO instruction's neighbourhood: its operands and users to a depth, a fusion opened into its computation."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from traceview.cost.shapes import shape_text
from traceview.errors import UserError
from traceview.parsers.hlo.model import Computation, HloModule, Instruction

MAX_DEPTH = 10
MAX_NODES = 400   # a bound: a graph people can read, and a hostile module cannot blow up the renderer


@dataclass
class Node:
    id: str                      # unique in the graph: "<computation>/<name>"
    name: str
    opcode: str
    shape: str
    computation: str
    focus: bool = False
    fused_in: str | None = None  # id of the fusion node this instruction is inside
    bound: str | None = None     # compute | memory | communication | unknown (None: not measured)
    time_us: float | None = None
    gain_us: float | None = None


@dataclass
class OpGraph:
    module: str
    program_id: int | None
    focus: str                   # the focus node's id
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[tuple[str, str]] = field(default_factory=list)   # (operand, user)
    truncated: bool = False


def find_op(modules: list[HloModule], name: str, module: str | None = None) -> tuple[HloModule, Computation]:
    """The module and computation holding the instruction `name` (UserError naming it when absent or ambiguous)."""
    hits = []
    for m in modules:
        if module is not None and m.name != module and f"{m.name}({m.program_id})" != module:
            continue
        for comp in m.computations.values():
            if any(inst.name == name for inst in comp.instructions):
                hits.append((m, comp))
                break
    if not hits:
        where = f"module {module!r}" if module else f"{len(modules)} module(s)"
        raise UserError(f"no HLO instruction named {name!r} in {where}")
    distinct = {(m.name, m.program_id) for m, _ in hits}
    if len(distinct) > 1 and module is None:
        names = ", ".join(sorted(f"{n}({p})" if p is not None else n for n, p in distinct))
        raise UserError(f"{name!r} is in several modules ({names}): pick one with --module")
    return hits[0]


def _users(comp: Computation) -> dict[str, list[str]]:
    users: dict[str, list[str]] = {}
    for inst in comp.instructions:
        for op in dict.fromkeys(inst.operands):
            users.setdefault(op, []).append(inst.name)
    return users


def _node(inst: Instruction, comp: Computation, fused_in: str | None = None) -> Node:
    return Node(id=f"{comp.name}/{inst.name}", name=inst.name, opcode=inst.opcode, shape=shape_text(inst.shape),
                computation=comp.name, fused_in=fused_in)


def op_graph(modules: list[HloModule], name: str, depth: int = 1, module: str | None = None,
             expand: bool = True) -> OpGraph:
    """Operands and users of `name` up to `depth` hops each way; fusions among them opened when `expand`."""
    if not 0 <= depth <= MAX_DEPTH:
        raise UserError(f"--depth must be between 0 and {MAX_DEPTH}, got {depth}")
    mod, comp = find_op(modules, name, module)
    by_name = comp.by_name()
    users = _users(comp)
    graph = OpGraph(module=mod.name, program_id=mod.program_id, focus=f"{comp.name}/{name}")
    seen = {name: 0}
    queue = deque([(name, 0)])
    while queue:
        current, d = queue.popleft()
        inst = by_name[current]
        graph.nodes[f"{comp.name}/{current}"] = _node(inst, comp)
        if len(graph.nodes) >= MAX_NODES:
            graph.truncated = True
            break
        if d == depth:
            continue
        for other in list(dict.fromkeys(inst.operands)) + users.get(current, []):
            if other in by_name and other not in seen:
                seen[other] = d + 1
                queue.append((other, d + 1))
    graph.nodes[graph.focus].focus = True
    for node in list(graph.nodes.values()):
        for op in dict.fromkeys(by_name[node.name].operands):
            if f"{comp.name}/{op}" in graph.nodes:
                graph.edges.append((f"{comp.name}/{op}", node.id))
    if expand:
        focus = by_name[name]
        if focus.opcode == "fusion" and focus.called_computations:
            _expand(graph, mod, graph.focus, focus.called_computations[0])
    return graph


def _expand(graph: OpGraph, module: HloModule, fusion_id: str, computation: str) -> None:
    fused = module.computations.get(computation)
    if fused is None:
        return
    for inst in fused.instructions:
        if len(graph.nodes) >= MAX_NODES:
            graph.truncated = True
            return
        graph.nodes[f"{fused.name}/{inst.name}"] = _node(inst, fused, fused_in=fusion_id)
    for inst in fused.instructions:
        for op in dict.fromkeys(inst.operands):
            a, b = f"{fused.name}/{op}", f"{fused.name}/{inst.name}"
            if a in graph.nodes and b in graph.nodes:
                graph.edges.append((a, b))


def gain_of(record: dict) -> float | None:
    """Device time saved if the op ran at its roofline: the record's gain, else its gap (measured -
    roofline), at most its exposed time (async work hidden behind compute saves nothing)."""
    if record.get("gain_us") is not None:
        return record["gain_us"]
    gap, exposed = record.get("gap_us"), record.get("exposed_time_us")
    if gap is None:
        return None
    return max(0.0, min(gap, exposed)) if exposed is not None else max(0.0, gap)


def annotate(graph: OpGraph, records: list[dict]) -> None:
    """Bound, time and gain of each node from the op table's public rows (``analysis.public.op_rows``: the
    fields of ``Analysis.ops``, None where unknown)."""
    mine = [r for r in records if r.get("module") == graph.module
            and (graph.program_id is None or r.get("program_id") in (None, graph.program_id))]
    by_name = {str(r.get("name")): r for r in mine}
    for node in graph.nodes.values():
        r = by_name.get(node.name) if node.fused_in is None else None
        if r is None:
            continue
        node.bound = r.get("bound")
        # the time the op is judged by: its self time, or for an async start the time its transfer was in flight
        node.time_us = next((r[k] for k in ("judged_time_us", "self_time_us", "total_time_us")
                             if r.get(k) is not None), None)
        node.gain_us = gain_of(r)
