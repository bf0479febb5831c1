"""How many hops a ring makes and what one hop moves, counted from its permutes.

A ring passes each K/V block X − 1 or X times. Written as a loop of its own, each iteration is one hop (or
two, when XLA unrolled the body once); unrolled, the hops are a chain of permutes, each reading what the
one before delivered; inside a scan over layers, the chain (or the inner loop) runs once per layer. One hop
moves one block of each array that travels (K and V apart, or one stacked K/V buffer): the permutes that
start a chain.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from traceview.parallelism.loops import Loop
from traceview.parsers.hlo.model import HloModule

if TYPE_CHECKING:
    from traceview.parallelism.roles import Classified

VIEWS = ("bitcast", "copy", "reshape", "convert", "get-tuple-element", "collective-permute-done",
         "optimization-barrier", "async-done", "copy-done", "copy-start")


def in_backward(row: Classified) -> bool:
    """A collective of the backward pass (JAX names it ``transpose(jvp(...))``)."""
    inst = row.attribution.site.instruction
    return "transpose(" in (inst.metadata.get("op_name", "") if inst is not None else "")


def ring_passes(modules: dict[str, HloModule], rows: list[tuple[Classified, Loop | None, bool]]
                ) -> tuple[int | None, float, str]:
    """(hops of one block per attention, bytes of one hop, how): from the K/V passes of one axis, each with
    its enclosing loop and whether that loop is the ring's own."""
    forward = [r for r in rows if not in_backward(r[0])] or rows
    groups: dict[tuple[str, str | None], list[tuple[Classified, Loop | None, bool]]] = defaultdict(list)
    for r in forward:
        groups[(r[0].attribution.site.module, r[1].name if r[1] is not None else None)].append(r)
    (module_name, _), group = max(groups.items(), key=lambda kv: len(kv[1]))
    module = modules.get(module_name)
    group = _one_per_array(group)
    names = {_name(r[0]) for r in group}
    starts = [r for r in group if module is None or not _continues(module, r[0], names)]
    hops = len(group) // max(len(starts), 1)
    loop, own = group[0][1], group[0][2]
    passes = hops * (loop.trips or 0) if own and loop is not None else hops
    where = (f"in loop {loop.name}, the ring's own, run {loop.trips} times" if own and loop is not None else
             f"inside loop {loop.name} (a scan over layers: the whole ring runs in each iteration)"
             if loop is not None else "outside any loop (the ring unrolled)")
    how = (f"{len(group)} forward K/V permute(s) {where}: {len(starts)} array(s) travel, {hops} hop(s) each per "
           f"{'iteration' if own and loop is not None else 'attention'}: {passes or None} pass(es)")
    return passes or None, float(sum(r[0].bytes for r in starts)), how


def _one_per_array(rows: list[tuple[Classified, Loop | None, bool]]) -> list[tuple[Classified, Loop | None, bool]]:
    """The sends of one hop of one array, once: XLA splits a ring's permute into its back edge and the rest,
    two sends of the same value, each device taking part in one."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for r in rows:
        site = r[0].attribution.site
        inst = site.instruction
        if site.kind == "send" and inst is not None and inst.operands:
            key = (site.module, site.computation, inst.operands[0])
            if key in seen:
                continue
            seen.add(key)
        out.append(r)
    return out


def _name(row: Classified) -> str:
    site = row.attribution.site
    return site.outer.name if site.outer is not None else site.name


def _continues(module: HloModule, row: Classified, names: set[str]) -> bool:
    """Whether the permute's operand is what another permute of the ring delivered (the next hop)."""
    site = row.attribution.site
    comp = module.computations.get(site.computation)
    inst = site.outer or site.instruction
    if comp is None or inst is None or not inst.operands:
        return False
    insts = comp.by_name()
    current = insts.get(inst.operands[0])
    for _ in range(16):
        if current is None:
            return False
        if current.name in names:
            return True
        if current.opcode not in VIEWS or not current.operands:
            return False
        current = insts.get(current.operands[0])
    return False
