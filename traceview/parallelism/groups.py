"""Every collective of an HLO module, with the global device ids each of its groups holds.

A ``replica_groups`` attribute lists replica ids, partition ids or global
device ids depending on the collective's group mode, which XLA derives from
``channel_id`` and ``use_global_device_ids`` (``GetCollectiveOpGroupMode`` in
XLA's collective_ops_utils):

* no channel_id: cross-replica (the groups hold replica ids, the same groups
  in every partition);
* channel_id on an op without a use_global_device_ids field (all-to-all,
  collective-permute): cross-partition (partition ids, in every replica);
* channel_id and ``use_global_device_ids=false``: cross-replica-and-partition
  (replica ids; each group takes every partition of those replicas);
* channel_id and ``use_global_device_ids=true`` (what JAX's SPMD partitioner
  emits): flattened ids, ``replica * num_partitions + partition``.

The groups, pairs, channel and flag are the instruction's typed attributes
(``Instruction.typed``: decoded once by the HLO reader, from text in any of the
three forms, explicit, iota and mesh, or from the proto's fields). One rule is
this view's own: a collective that names no group list at all runs over every
device (the typed record reads it as absent).
"""

from __future__ import annotations

from dataclasses import dataclass

from traceview.cost.collectives import collective_kind
from traceview.parallelism.p2p import is_host_transfer, send_recv_pairs
from traceview.parsers.hlo.model import HloModule, Instruction

POINT_TO_POINT = ("collective-permute", "send", "recv")
WITH_GLOBAL_IDS = ("all-reduce", "all-gather", "reduce-scatter")


@dataclass
class CollectiveSite:
    module: str
    computation: str
    name: str
    kind: str                                  # all-reduce, all-gather, ... (no -start)
    mode: str                                  # flattened-id, cross-replica, cross-partition, ...
    groups: list[list[int]] | None             # global device ids; [] = all devices; None unknown
    pairs: list[tuple[int, int]] | None = None  # (source, target) for point-to-point kinds
    instruction: Instruction | None = None      # the collective (for an async-start: the op it wraps)
    note: str = ""
    outer: Instruction | None = None            # the instruction in `computation` (the async-start itself)


def group_mode(inst: Instruction, kind: str) -> str:
    typed = inst.typed
    if typed.channel_id is None:
        return "cross-replica"
    if kind not in WITH_GLOBAL_IDS:      # all-to-all, permutes: no use_global_device_ids field
        return "cross-partition"
    return "flattened-id" if typed.use_global_device_ids else "cross-replica-and-partition"


def _groups(inst: Instruction) -> tuple[tuple[int, ...], ...] | None:
    """A collective's device groups; () (every device) when it names no group list, as XLA reads a missing
    one; None when the list it names is unreadable."""
    decoded = inst.typed.replica_groups
    if decoded is None and "replica_groups" not in inst.attributes:
        return ()
    return decoded


def device_counts(module: HloModule) -> tuple[int | None, int | None]:
    """(replica_count, num_partitions) from the module header; None when the header does not say."""
    def read(key: str) -> int | None:
        try:
            return int(module.attributes[key]) if key in module.attributes else None
        except ValueError:
            return None
    return read("replica_count"), read("num_partitions")


def to_device_ids(groups: list[list[int]], mode: str, replicas: int | None,
                  partitions: int | None) -> tuple[list[list[int]] | None, str]:
    """Groups of global device ids (``replica * partitions + partition``), and a note when unsure."""
    R, P = replicas or 1, partitions or 1
    if mode == "flattened-id" or not groups:
        return groups, ""
    if mode == "cross-replica":
        if P == 1:
            return groups, ""
        return [[r * P + p for r in g] for p in range(P) for g in groups], ""
    if mode == "cross-partition":
        if R == 1:
            return groups, "" if partitions else "num_partitions unknown: partition ids taken as device ids"
        return [[r * P + p for p in g] for r in range(R) for g in groups], ""
    # cross-replica-and-partition
    if partitions is None:
        return groups, "num_partitions unknown: replica ids taken as device ids"
    return [[r * P + p for r in g for p in range(P)] for g in groups], ""


def collective_sites(module: HloModule) -> list[CollectiveSite]:
    """One site per collective instruction (the ``-start`` of an async pair; ``-done`` skipped; a send or recv
    to or from the host is no collective)."""
    replicas, partitions = device_counts(module)
    out: list[CollectiveSite] = []
    async_bodies = {c for comp in module.computations.values() for inst in comp.instructions
               if inst.opcode == "async-start" for c in inst.called_computations}
    for comp in module.computations.values():
        if comp.name in async_bodies:      # the async-start that calls it is the site
            continue
        for inst in comp.instructions:
            opcode, outer = inst.opcode, inst
            if opcode in ("async-start",) and inst.called_computations:
                wrapped = module.computations.get(inst.called_computations[0])
                root = wrapped.by_name().get(wrapped.root or "") if wrapped else None
                if root is None:
                    continue
                inst, opcode = root, root.opcode
            kind, done = collective_kind(opcode)
            if not kind or done or (kind in ("send", "recv") and is_host_transfer(inst)):
                continue
            mode = group_mode(inst, kind)
            site = CollectiveSite(module.name, comp.name, outer.name, kind, mode, None, instruction=inst,
                                  outer=outer)
            if kind in POINT_TO_POINT:
                if kind in ("send", "recv"):
                    site.pairs = send_recv_pairs(inst) or None
                    site.note = "" if site.pairs else "the send/recv names no source-target pairs"
                else:
                    site.pairs = [(p[0], p[1]) for p in inst.typed.source_target_pairs]
                if site.pairs is not None and mode == "cross-partition" and replicas and replicas > 1 and partitions:
                    site.note = "point-to-point pairs of partitions in a multi-replica program: replica 0 shown"
            else:
                decoded = _groups(inst)
                if decoded is None:
                    site.note = f"unreadable replica_groups {inst.attributes.get('replica_groups')!r}"
                else:
                    site.groups, site.note = to_device_ids([list(g) for g in decoded], mode, replicas, partitions)
            out.append(site)
    return out
