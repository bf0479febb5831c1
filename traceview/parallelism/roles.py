"""What each mesh axis is used for, inferred from the pattern of its collectives.

The book's strategies each leave a signature in the collectives (training
chapter, "How to Scale Your Model", section "Data parallelism" onwards):

* data parallelism: the gradients are all-reduced (a weight-shaped
  all-reduce);
* FSDP (ZeRO-3): the parameters are all-gathered before use and the gradients
  reduce-scattered back (a weight-shaped all-gather, and a reduce-scatter whose
  operand has the gathered weight's shape);
* tensor (model) parallelism: activations are all-gathered / reduce-scattered
  (or all-reduced) around the matmuls (collectives of non-weight shapes);
* expert parallelism: tokens are routed with all-to-all (after a top-k router);
* context parallelism: K/V blocks pass around a ring with collective-permute
  inside the attention loop, or K/V are all-gathered along the sequence;
* pipeline parallelism: activations pass between stages with
  collective-permute (in the schedule's loop) / send-recv.

Which point-to-point or all-gather is which is read from the program's
structure (:mod:`structure` re-labels them). An axis may carry several
strategies at once (MaxText shards parameters FSDP-style over the devices that
split the sequence): every role with evidence is kept; the main one is the
structural strategy (context, expert, pipeline) when there is one, since
parameter all-gathers over the same devices would otherwise outvote it.

Scalars (a loss or metric mean) say nothing about the strategy and are left out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from traceview.cost.shapes import byte_size, leaves
from traceview.parallelism.attribution import Attribution
from traceview.parallelism.dots import shape_map
from traceview.parallelism.updates import find_updates
from traceview.parsers.hlo.model import HloModule, Shape

SCALAR_BYTES = 1024   # below this a collective moves a loss or a metric, not a model tensor

PATTERN_ROLE = {
    "parameter all-gather": "fsdp", "gradient reduce-scatter": "fsdp",
    "gradient all-reduce": "data",
    "activation all-gather": "tensor", "activation reduce-scatter": "tensor", "activation all-reduce": "tensor",
    "expert all-to-all": "expert",
    "K/V ring pass": "context", "K/V all-gather": "context", "K/V gradient reduce-scatter": "context",
    "K/V gradient ring pass": "context", "stage activation pass": "pipeline",
}
STRUCTURAL = ("context", "expert", "pipeline")     # read from the program's structure: they lead
ROLE_NAMES = {"data": "data parallel", "fsdp": "FSDP", "tensor": "tensor parallel", "expert": "expert parallel",
              "pipeline": "pipeline", "context": "context parallel", "host offload": "host offload"}


@dataclass
class Classified:
    attribution: Attribution
    pattern: str
    dims: tuple[int, ...]
    dtype: str
    bytes: float                 # the array's bytes (all leaves), per execution


@dataclass
class AxisRole:
    role: str | None             # data, fsdp, tensor, expert, pipeline; None when no evidence
    evidence: list[str] = field(default_factory=list)
    patterns: dict[str, int] = field(default_factory=dict)
    roles: dict[str, list[str]] = field(default_factory=dict)   # every role with evidence -> its evidence


def gathered_arrays(inst) -> list[Shape]:
    """The result arrays of an all-gather (of an all-gather-start: the second tuple element)."""
    shape = inst.shape
    if inst.opcode.endswith("-start") and shape.is_tuple and len(shape.tuple_shapes) >= 2:
        shape = shape.tuple_shapes[1]
    return [a for a in leaves(shape) if a.element_type != "token"]


def _arrays(module: HloModule | None, attribution: Attribution) -> list[Shape]:
    """The arrays a collective moves: an all-gather's result, the others' operands."""
    site = attribution.site
    inst = site.instruction
    if inst is None:
        return []
    if site.kind == "all-gather":
        return gathered_arrays(inst)
    comp = module.computations.get(site.computation) if module else None
    shapes = shape_map(comp) if comp else {}
    reader = site.outer or inst          # an async-start reads the wrapped collective's operands
    out = [a for name in reader.operands if name in shapes for a in leaves(shapes[name])]
    return [a for a in out if a.element_type != "token"] or [a for a in leaves(inst.shape)]


def classify(attributions: list[Attribution], modules: dict[str, HloModule],
             weights: dict[str, set[tuple[int, ...]]]) -> list[Classified]:
    rows: list[Classified] = []
    pending = []
    for att in attributions:
        arrays = _arrays(modules.get(att.site.module), att)
        dims = tuple(arrays[0].dims) if arrays else ()
        dtype = arrays[0].element_type if arrays else ""
        size = float(sum(byte_size(a) for a in arrays))
        pending.append((att, arrays, dims, dtype, size))
    # an all-gather and a reduce-scatter over the same axes with the same shape: a parameter and its gradient
    gathered = {(a.site.module, a.label, tuple(sorted(d))) for a, _, d, _, _ in pending if a.site.kind == "all-gather"}
    scattered = {(a.site.module, a.label, tuple(sorted(d))) for a, _, d, _, _ in pending
                 if a.site.kind == "reduce-scatter"}
    for att, arrays, dims, dtype, size in pending:
        kind = att.site.kind
        w = weights.get(att.site.module, set())
        key = (att.site.module, att.label, tuple(sorted(dims)))
        weight_like = any(tuple(sorted(a.dims)) in w for a in arrays)
        if kind in ("all-to-all", "ragged-all-to-all"):
            pattern = "all-to-all"
        elif kind in ("collective-permute", "send", "recv", "collective-broadcast"):
            pattern = "point-to-point"
        elif size < SCALAR_BYTES:
            pattern = "scalar"
        elif kind == "all-gather":
            pattern = "parameter all-gather" if weight_like or key in scattered else "activation all-gather"
        elif kind == "reduce-scatter":
            gradient = (weight_like or key in gathered) and _feeds_update(att, modules) is not False
            pattern = "gradient reduce-scatter" if gradient else "activation reduce-scatter"
        elif kind == "all-reduce":
            # a vector is no activation (those are [tokens, features] at least): a replicated bias or norm
            # scale's gradient
            gradient = len(dims) <= 1 or (weight_like and _feeds_update(att, modules) is not False)
            pattern = "gradient all-reduce" if gradient else "activation all-reduce"
        else:
            pattern = kind
        rows.append(Classified(att, pattern, dims, dtype, size))
    return rows


def _feeds_update(att: Attribution, modules: dict[str, HloModule]) -> bool | None:
    """Whether a weight-shaped collective's result feeds the step's update of its state (a gradient): False
    tells an activation of a weight's shape from a gradient (updates.py); None where the data flow cannot say
    (no update in the program, or the collective outside the entry computation)."""
    site = att.site
    module = modules.get(site.module)
    found = find_updates(module) if module is not None else None
    inst = site.outer or site.instruction
    if found is None or inst is None:
        return None
    return found.feeds_update(site.computation, inst.name)


def axis_roles(rows: list[Classified], axis_names: list[str]) -> dict[str, AxisRole]:
    """Per axis (or axes label such as ``data+model``): every role its collectives show, with the evidence,
    and the main one (a structural strategy first, then FSDP when parameters are gathered, else the most bytes)."""
    out: dict[str, AxisRole] = {}
    for axis in axis_names:
        mine = [r for r in rows if r.attribution.label == axis]
        count = Counter(r.pattern for r in mine)
        by_role: dict[str, float] = defaultdict(float)
        evidence_of: dict[str, list[str]] = defaultdict(list)
        evidence = []
        for pattern, n in count.most_common():
            shapes = sorted({f"{r.dtype}[{','.join(map(str, r.dims))}]" for r in mine if r.pattern == pattern})
            shown = ", ".join(shapes[:3]) + (", ..." if len(shapes) > 3 else "")
            plural = ("es" if pattern.endswith("s") else "s") if n > 1 else ""
            line = f"{n} {pattern}{plural} ({shown})"
            evidence.append(line)
            role = PATTERN_ROLE.get(pattern)
            if role:
                evidence_of[role].append(line)
                by_role[role] += sum(max(r.bytes, 1.0) for r in mine if r.pattern == pattern)
        structural = [r for r in STRUCTURAL if r in by_role]
        if structural:
            chosen: str | None = max(structural, key=lambda k: by_role[k])
        elif by_role.get("fsdp") and count.get("parameter all-gather"):
            chosen = "fsdp"     # FSDP also all-reduces the gradients of small replicated tensors
        else:
            chosen = max(by_role, key=lambda k: by_role[k]) if by_role else None
        if chosen == "fsdp":
            by_role.pop("data", None)   # the small replicated tensors' gradient all-reduce is part of FSDP
            evidence_of["fsdp"] += evidence_of.pop("data", [])
        ordered = ([chosen] if chosen else []) + sorted((r for r in by_role if r != chosen), key=lambda k: -by_role[k])
        out[axis] = AxisRole(chosen, evidence, dict(count), {r: evidence_of[r] for r in ordered})
    return out
