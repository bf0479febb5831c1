"""Today's step, as the projection needs it: the mesh by role, the batch, and the measured step time split
into terms that each scale with one thing (per-chip FLOPs, per-chip bytes, one role's collectives, idle).

Everything is read from the pipeline result and the parallelism view's typed report (roles, axes, exposed
times, the per-chip batch), never re-derived: the roles are the parallelism view's. Times are per device
and per step (the mean over the trace's steps), in picoseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceview.cost.shapes import byte_size, leaves
from traceview.hardware.chips import Chip
from traceview.parallelism.dots import state_shapes, weight_shapes
from traceview.parallelism.report import Parallelism
from traceview.parallelism.updates import find_updates, weight_values
from traceview.parsers.hlo.model import HloModule
from traceview.whatif.book import batch_ways, parameter_ways
from traceview.whatif.host import SharedHost, not_collective, shared_host
from traceview.whatif.widths import state_widths

BUCKETS = ("compute", "memory", "communication", "unknown", "idle")


@dataclass
class RoleMeasure:
    """One role's collectives in the trace, per device and per step."""
    role: str
    size: int
    time_ps: float | None             # in flight
    exposed_ps: float | None          # not hidden behind compute
    link_bandwidth: float | None      # W of the axis (the parallelism view's link)


@dataclass
class Baseline:
    mesh: dict[str, int]
    chips: int
    chip: Chip | None
    steps: int
    step_ps: float | None
    buckets: dict[str, float]                    # per device and step; they add up to step_ps
    # columns: module, op, bound, time_ps, scale (what its time scales with: flops, activation bytes, parameter
    # shard bytes, gathered parameter bytes; docs/whatif.md)
    ops: pd.DataFrame
    roles: dict[str, RoleMeasure]
    batch_tokens: float | None                   # global tokens per step
    batch_how: str
    param_bytes: float | None                    # the state a step updates, all chips together (one copy)
    activation_bytes_per_token: float | None     # bytes per token crossing a tensor axis per step (book)
    ffn: float | None                            # the MLP width F (the widest 2-D weight dimension)
    mfu: float | None
    dtype: str
    memory: dict[str, float] | None = None       # per chip at the static peak, by what it scales with
    memory_how: str = ""
    pipeline_bubble: float | None = None
    pipeline_microbatches: int | None = None
    host: SharedHost | None = None               # the devices are threads of one host process (whatif.host)
    warnings: list[str] = field(default_factory=list)


def measure(pipeline, parallelism: Parallelism, memory=None) -> Baseline:
    """Today's step from a pipeline result (traceview.analysis.build.PipelineResult), its parallelism report
    and (optionally) its memory report."""
    warnings: list[str] = []
    mesh, roles = _mesh_by_role(parallelism, warnings)
    chips = math.prod(mesh.values()) if mesh else 1
    steps = pipeline.steps
    n_steps = max(1, len(steps))
    # op and axis times are summed over every device the trace shows: per device, divide by those
    devices = int(steps["devices"].max()) if "devices" in steps and not steps.empty else chips
    if devices != chips:
        warnings.append(f"the roles cover {chips} of the {devices} devices the trace shows: the others are "
                        "kept as they are in every config")
    step_ps = float(steps["time_ps"].mean()) if not steps.empty else None
    buckets = {b: float(steps[f"{b}_ps"].mean()) if f"{b}_ps" in steps else 0.0 for b in BUCKETS}
    main = _main_module(pipeline)
    gathered = [tuple(r.dims) for r in parallelism.collectives
                if r.attribution.site.kind == "all-gather" and main is not None
                and r.attribution.site.module == main.name]
    state = state_shapes(main) if main is not None else set()
    weights = weight_shapes(main, gathered) if main is not None else set()
    own = pipeline.ops[not_collective(pipeline.ops)] if not pipeline.ops.empty else pipeline.ops
    flow = WeightFlow.of(main)
    ops = _op_terms(own, state, weights, devices * n_steps, flow)
    ops["weight_bytes"] = _weight_operand_bytes(own, main, weights, n_steps, flow)   # weights include the state
    role_measures = _role_measures(parallelism, roles, devices * n_steps)
    tokens = parallelism.per_chip_tokens
    batch = None if tokens is None or tokens.value is None else float(tokens.value) * batch_ways(mesh)
    how = tokens.how if tokens is not None else "no per-chip batch read from the dots"
    tensor_width = next((float(a.verdict.value) for a in parallelism.axes if a.role.role == "tensor"
                         and a.verdict.value), None)
    param_bytes, act, ffn = _shapes(main, state, mesh, tensor_width, warnings)
    judged = pipeline.judged
    summary = judged.summary if judged is not None else {}
    # the chip the step was measured on (a re-targeted analysis keeps it as the judgement's measured_on)
    chip = (judged.measured_on or judged.chip) if judged is not None else None
    dtype = str(summary.get("mfu_dtype") or "bf16")
    base = Baseline(mesh, chips, chip, len(steps), step_ps, buckets, ops, role_measures, batch, how,
                    param_bytes, act, ffn, summary.get("mfu"), dtype, warnings=warnings)
    base.host = shared_host(pipeline, chips)
    _pipeline_figures(base, parallelism)
    _memory(base, memory, main, state, weights)
    return base


def _mesh_by_role(parallelism: Parallelism, warnings: list[str]) -> tuple[dict[str, int], dict[str, list]]:
    """Role -> ways, from the axes' main roles. Axes over several mesh axes ("context+data") add their
    collectives to their role but no ways (their axes are counted one by one); a mesh axis with no role of its
    own takes the role of the combined axes it is part of, when they agree on one (the ring sample's data
    axis carries the weights' gradient all-reduce only together with the context axis)."""
    combined: dict[str, set[str]] = {}
    for axis in parallelism.axes:
        if "+" in axis.name and axis.role.role:
            for name in axis.name.split("+"):
                combined.setdefault(name, set()).add(axis.role.role)
    mesh: dict[str, int] = {}
    axes: dict[str, list] = {}
    for axis in parallelism.axes:
        role = axis.role.role
        if "+" in axis.name:
            if role:
                axes.setdefault(role, []).append(axis)
            continue
        if role is None and len(combined.get(axis.name, ())) == 1:
            (role,) = combined[axis.name]
        if role is None:
            warnings.append(f"axis {axis.name} ({axis.size} ways) has no role: kept as it is in every config")
            continue
        mesh[role] = mesh.get(role, 1) * axis.size
        axes.setdefault(role, []).append(axis)
    return mesh, axes


def _main_module(pipeline) -> HloModule | None:
    """The module that holds most of the measured op time: the training step."""
    ops = pipeline.ops
    if ops.empty or not pipeline.hlo.ran:
        return None
    top = str(ops.groupby("module")["total_time_ps"].sum().idxmax())
    return next((m for m in pipeline.hlo.ran if m.name == top), pipeline.hlo.ran[0])


def _dims(shape: object) -> tuple[int, ...] | None:
    text = str(shape or "")
    if "[" not in text or text.startswith("("):
        return None
    inner = text[text.index("[") + 1: text.index("]")] if "]" in text else ""
    try:
        return tuple(sorted(int(d) for d in inner.split(",") if d.strip()))
    except ValueError:
        return None


@dataclass(frozen=True)
class WeightFlow:
    """The main module's state, weights and gradients by data flow (parallelism.updates), for its entry
    computation's instructions: where an activation has a weight's shape the shape alone would put it with the
    weights. A gradient (what feeds an update: an embedding's scattered gradient, its zeroed buffer) has its
    weight's size whatever the batch, and counts with the weights."""
    computation: str
    updates: frozenset[str]
    weights: frozenset[str]
    gradients: frozenset[str] = frozenset()

    @staticmethod
    def of(main: HloModule | None) -> WeightFlow | None:
        found = find_updates(main) if main is not None else None
        values = weight_values(main) if main is not None else None
        if found is None or values is None:
            return None
        entry = {name for comp, name in values if comp == found.computation}
        return WeightFlow(found.computation, found.updates, frozenset(entry), found.feeding)

    def is_weight(self, computation: str, name: str) -> bool | None:
        """Whether an instruction's value is the state, its update, a weight made from it (gathered, copied,
        sliced) or a gradient; None outside the entry computation (the shape decides)."""
        if computation != self.computation:
            return None
        return name in self.updates or name in self.weights or name in self.gradients


def _op_terms(own: pd.DataFrame, state: set, weights: set, device_steps: int,
              flow: WeightFlow | None = None) -> pd.DataFrame:
    """Per op (``own``: the op table's rows that are not collectives): its time per device and step, its bound,
    what its time scales with. A weight's shape says state or gathered weight unless the data flow says the
    op's value is neither (an activation of a weight's shape)."""
    columns = ["module", "op", "bound", "time_ps", "scale"]
    if own.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    modules = own["module"].astype(str) if "module" in own else pd.Series("", index=own.index)
    comps = own["computation"].astype(str) if "computation" in own else pd.Series("", index=own.index)
    for module, comp, op, bound, time, shape in zip(modules, comps, own["op"], own["bound"], own["total_time_ps"],
                                                     own["shape"]):
        dims = _dims(shape)
        weight = flow.is_weight(comp, str(op)) if flow is not None and (dims in state or dims in weights) else None
        if bound == "compute":
            scale = "flops"
        elif weight is False:
            scale = "activation bytes"
        elif dims in state:
            scale = "parameter shard bytes"
        elif dims in weights:
            scale = "gathered parameter bytes"
        else:
            scale = "activation bytes"
        rows.append((module, str(op), str(bound), float(time) / device_steps, scale))
    return pd.DataFrame(rows, columns=columns)


def _weight_operand_bytes(own: pd.DataFrame, main: HloModule | None, weights: set, steps: int,
                          flow: WeightFlow | None = None) -> list[float]:
    """Per op of ``own`` (the rows _op_terms reads, in order): the bytes per step, over all devices, of its
    operands and result that are weights (a shard of the state or a gathered weight, by sorted dims, unless the
    data flow says the value is neither: their size does not change with the batch). 0 for an op outside the
    main module or without such an operand."""
    insts: dict = {}
    where: dict[str, str] = {}
    for comp in main.computations.values() if main is not None else []:
        named = comp.by_name()
        insts.update(named)
        where.update(dict.fromkeys(named, comp.name))

    def weight(name: str) -> bool:
        shape = insts[name].shape
        if not any(tuple(sorted(a.dims)) in weights for a in leaves(shape)):
            return False
        return flow is None or flow.is_weight(where[name], name) is not False

    out = []
    for module, op, runs in zip(own["module"].astype(str), own["op"].astype(str), own["occurrences"]):
        inst = insts.get(op) if main is not None and module == main.name else None
        names = [] if inst is None else [op] + [o for o in inst.operands if o in insts]
        size = sum(float(byte_size(a)) for name in names if weight(name) for a in leaves(insts[name].shape)
                   if tuple(sorted(a.dims)) in weights)
        out.append(size * float(runs) / steps)
    return out


def _role_measures(parallelism: Parallelism, roles: dict[str, list], device_steps: int) -> dict[str, RoleMeasure]:
    out = {}
    for role, axes in roles.items():
        size = math.prod(a.size for a in axes if "+" not in a.name) or 1
        time = _sum(a.time_ps for a in axes)
        exposed = _sum(a.exposed_ps for a in axes)
        link = next((a.link for a in axes if a.link is not None), None)
        out[role] = RoleMeasure(role, size, None if time is None else time / device_steps,
                                None if exposed is None else exposed / device_steps, link.bandwidth if link else None)
    return out


def _sum(values) -> float | None:
    vals = list(values)
    if not vals or any(v is None for v in vals):
        return None
    return float(sum(vals))


def _shapes(main: HloModule | None, state: set, mesh: dict[str, int], tensor_width: float | None,
            warnings: list[str]) -> tuple[float | None, float | None, float | None]:
    """(parameter bytes of one model copy, activation bytes per token crossing a tensor axis, F) from the
    state the step updates. From the state's full shapes where the shardings give them (whatif.widths: D the
    side most matrices share, F the widest other side); else each local shard times the ways parameters are
    split, F the tensor axis's per-shard width times its ways (the parallelism view's figure) or the widest
    local dimension (an unsplit one), and D = the median matrix's elements / F."""
    if main is None or not state:
        warnings.append("no state (entry parameters that are also results): parameter bytes unknown")
        return None, None, None
    entry = main.entry_computation()
    local, elements, mats, elem = 0.0, [], 0, 4
    widest = 0
    for inst in entry.instructions if entry is not None else []:
        if inst.opcode != "parameter":
            continue
        for a in leaves(inst.shape):
            if tuple(sorted(a.dims)) not in state:
                continue
            size = float(byte_size(a))
            local += size
            elem = int(size / max(1, int(np.prod(a.dims))))
            if len(a.dims) >= 2:          # a matrix, or a stack of them (scanned layers, stages)
                stack = int(np.prod(a.dims[:-2])) if len(a.dims) > 2 else 1
                mats += stack
                elements.append(float(a.dims[-1] * a.dims[-2]))
                widest = max(widest, *a.dims[-2:])
    full = state_widths(main, state)
    if full is not None:
        return full.state_bytes, 2.0 * max(1, full.matrices // 2) * full.d_model * elem, float(full.ffn)
    ways = parameter_ways(mesh)
    ffn = tensor_width * mesh.get("tensor", 1) if tensor_width else (float(widest) if widest else None)
    d_model = (sorted(elements)[len(elements) // 2] * ways / ffn) if elements and ffn else None
    act = None if d_model is None else 2.0 * max(1, mats // 2) * d_model * elem
    return local * ways, act, ffn


def _pipeline_figures(base: Baseline, parallelism: Parallelism) -> None:
    for axis in parallelism.axes:
        if axis.pipeline is not None and axis.pipeline.bubble_fraction is not None:
            base.pipeline_bubble = float(axis.pipeline.bubble_fraction)
            base.pipeline_microbatches = axis.pipeline.microbatches


def _memory(base: Baseline, memory, main: HloModule | None, state: set, weights: set) -> None:
    """Per-chip bytes at the main module's static peak (buffer assignment), split by what each buffer
    scales with: the state's shards, gathered weights, everything else (activations, temporaries)."""
    if memory is None or main is None:
        base.memory_how = "no memory report"
        return
    peak = next((m for m in memory.modules if m.name == main.name), None)
    if peak is None or not peak.buffers:
        base.memory_how = f"{main.name}: no buffer assignment (static peak) to read"
        return
    split = {"parameter shard bytes": 0.0, "gathered parameter bytes": 0.0, "activation bytes": 0.0}
    for buf in peak.buffers:
        dims = _dims(buf.shape)
        key = "parameter shard bytes" if dims in state else \
            "gathered parameter bytes" if dims in weights else "activation bytes"
        split[key] += float(buf.size_bytes)
    rest = float(peak.peak_bytes) - sum(split.values())
    split["activation bytes"] += max(0.0, rest)
    base.memory = split
    base.memory_how = f"{main.name}: static peak {peak.peak_bytes} B (buffer assignment), buffers by shape"
