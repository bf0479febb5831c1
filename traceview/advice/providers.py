"""The providers of advice: each turns one view's findings into :class:`Advice` items.

Savings are device time per device (a total over devices divided by the active devices), so that
``saving / span`` is the share of the run it would remove. Thresholds (docs/advice.md):

- ops: the :data:`TOP_OPS` ops with the largest gain, each at least :data:`MIN_SHARE` of the span;
- mesh axes: exposed communication at least :data:`MIN_SHARE` of the span;
- idle causes: at least :data:`IDLE_NOTABLE` of the span (XProf's input-pipeline analysis calls a
  step moderately input-bound above 5%);
- memory: peak above :data:`MEMORY_TIGHT` of the chip's capacity (too close), or below
  :data:`MEMORY_ROOMY` (headroom); never quantified.

Each provider reads one typed report from the context: the op table, the mesh report, the idle causes,
the memory report, the scope tree (its nodes' ``self_gain_us``) or the serving phases (their step time
against their floor).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np

from traceview.advice.findings import UNQUANTIFIED, Advice, AdviceContext, short_name
from traceview.analysis.public import shared_module_names
from traceview.scopes.tree import dominant_bound
from traceview.units import counted, fmt_bytes, fmt_pct, fmt_share, fmt_si, fmt_time_us
from traceview.vocabulary import COLLECTIVE_PATTERNS, PATTERN_OF, collective_pattern

TOP_OPS = 3
MIN_SHARE = 0.01
IDLE_NOTABLE = 0.05
MEMORY_TIGHT = 0.90
MEMORY_ROOMY = 0.50
RESULT_SHAPE = re.compile(r"[a-z][a-z0-9]*\[[0-9,]*\]")     # an HLO array shape: bf16[8192,8192]
ROOFLINE_RULE = ("roofline (How to Scale Your Model, ch. 1): T_min = max(FLOPs / peak FLOP/s, bytes / HBM "
                 "bandwidth, collective bytes / link bandwidth); saving = measured - T_min (the op's gain), "
                 "at most its exposed time")
OP_FIX = {
    "compute": "compute-bound below its peak: check the matmul shapes fill the MXU / tensor cores (multiples "
               "of 128), use bf16 inputs, avoid padding",
    "memory": "memory-bound: fuse it with its producer or consumer, read fewer bytes (lower precision, no "
              "layout copies), or raise its arithmetic intensity (larger batch)",
    "communication": "communication-bound: overlap it with compute (async collectives, scheduling), or move "
                     "fewer bytes (lower precision)",
    "unknown": "no roofline verdict: the cost model lacks a figure for it",
}
# A compute-bound matmul on a chip without MXU or tensor cores, and compute-bound work that is no matmul.
CPU_COMPUTE_FIX = ("compute-bound below the CPU's peak: larger matmuls (batch small ones together) keep its "
                   "vector units busy; MXU / tensor-core advice does not apply to a CPU")
CHIP_COMPUTE_FIX = {
    "TPU": "compute-bound below its peak: check the matmul shapes fill the MXU (multiples of 128), use bf16 "
           "inputs, avoid padding",
    "GPU": "compute-bound below its peak: check the matmul shapes fill the tensor cores (matrix cores on AMD; "
           "multiples of 128), use bf16 inputs, avoid padding",
    "CPU": CPU_COMPUTE_FIX,
}
ELEMENTWISE_COMPUTE_FIX = ("compute-bound elementwise work: fewer transcendentals (exp, tanh, an approximate "
                           "GELU) or lower precision")
ELEMENTWISE = ("loop fusion", "input fusion", "data formatting", "other")
LAYOUT_FIX = ("memory-bound layout change (copy / transpose): give the producer or the consumer the layout the "
              "other wants, so that the copy disappears")
# A collective or a host transfer, whatever its bound: what moves it off the critical path, by pattern.
COLLECTIVE_FIX = {
    "all-reduce": "an all-reduce: overlap it with compute (async collectives, scheduling), or move fewer bytes "
                  "(a reduce-scatter where each device needs only its shard, lower precision)",
    "all-gather": "an all-gather: overlap it with compute (gather the next layer's parameters while this one "
                  "computes), or gather fewer bytes (lower precision)",
    "reduce-scatter": "a reduce-scatter: overlap it with the rest of the backward pass (async collectives, "
                      "scheduling), or move fewer bytes (lower-precision gradients)",
    "all-to-all": "an all-to-all (token routing): overlap it with the experts' compute, or send fewer bytes (a "
                  "lower capacity factor, lower precision)",
    "permute": "a point-to-point transfer (pipeline stages, a ring): overlap it with compute (the next "
               "microbatch or ring step), or send fewer bytes (lower-precision activations)",
    "host-transfer": "a copy between device and host memory (host offload): keep the tensor in device memory "
                     "if it fits, offload less, or start the copy earlier so that it runs behind compute",
}
AXIS_FIX = "overlap the axis' collectives with compute (async collectives, scheduling), or move fewer bytes over it"
IDLE_ADVICE = {
    "host": ("the devices wait for the host (input pipeline, Python between steps)",
             "prefetch the next batch while the step runs (a background thread, tf.data / grain prefetch, "
             "jax.device_put of the next batch ahead); move preprocessing off the step's critical path"),
    "launch": ("the devices wait on dispatch: launch overhead and the runtime handing back control",
               "larger steps and fewer dispatches: more work per jit call (jax.lax.scan over micro-steps), "
               "no per-step host sync (float(loss), block_until_ready) so dispatch runs ahead"),
    "transfer": ("the devices wait for host<->device copies",
                 "keep data on the device; fetch metrics every N steps rather than every step; start copies "
                 "early (device_put ahead, copy_to_host_async)"),
    "sync": ("the devices wait for each other (a peer still busy at a collective or barrier)",
             "balance the work between devices; look at the straggler below"),
    "unknown": ("the devices are idle with no traced host activity to explain it",
                "capture again with host tracing on (jax.profiler host_tracer_level / python tracer)"),
}


def op_fix(bound: str, category: object = None, collective: object = None, chip_kind: object = None) -> str:
    """What to change for an op, by what it is: a collective or host transfer by its pattern (whatever bound
    it got: an all-to-all judged memory-bound is still moved, not fused), a layout copy, elementwise work, a
    matmul by the chip's matrix units (none on a CPU); else by its bound."""
    pattern = collective_pattern(collective)
    if pattern not in COLLECTIVE_PATTERNS:
        pattern = PATTERN_OF.get(str(category).lower(), "") if isinstance(category, str) else ""
    if pattern in COLLECTIVE_FIX and bound in ("compute", "memory", "communication"):
        return ("judged memory-bound (its bytes take longer through memory than over the link), but it is a "
                "transfer, not work to fuse: " if bound == "memory" else "") + COLLECTIVE_FIX[pattern]
    if bound == "memory" and category == "data formatting":
        return LAYOUT_FIX
    if bound == "compute":
        if category in ELEMENTWISE:
            return ELEMENTWISE_COMPUTE_FIX
        return CHIP_COMPUTE_FIX.get(str(chip_kind), OP_FIX["compute"])
    return OP_FIX.get(bound, OP_FIX["unknown"])


def _op_key(values) -> tuple[str, ...]:
    """An op's (program, module, op) as strings: NaN program ids compare equal."""
    return tuple(str(v) for v in values)


def _op_groups(context: AdviceContext):
    """The op table summed per (program, module, op), largest gain first (None without judged ops)."""
    ops = context.pipeline.ops
    if ops.empty or "gain_ps" not in ops.columns:
        return None
    frame = ops.assign(gain=ops["gain_ps"].astype(float).fillna(0.0))
    removable = "exposed_time_ps" if "exposed_time_ps" in frame.columns else "self_time_ps"
    frame = frame.assign(removable=frame[removable].astype(float).fillna(frame["self_time_ps"].astype(float)))
    keys = [k for k in ("program_id", "module", "op") if k in frame.columns]
    measured = "judged_time_ps" if "judged_time_ps" in frame.columns else "self_time_ps"
    extra = {name: (name, "first") for name in ("shape", "category", "collective_kind") if name in frame.columns}
    grouped = frame.groupby(keys, sort=False, observed=True, dropna=False).agg(
        gain=("gain", "sum"), removable=("removable", "sum"), time=(measured, "sum"),
        roofline=("roofline_time_ps", "sum"), bound=("bound", "first"), occurrences=("occurrences", "sum"),
        **extra).reset_index().sort_values("gain", ascending=False)
    return grouped, keys


def _listed_ops(context: AdviceContext):
    """The op groups that become items: the TOP_OPS with most gain whose saving holds MIN_SHARE of the span."""
    found = _op_groups(context)
    if found is None:
        return None, []
    grouped, keys = found
    rows = []
    for row in grouped.head(TOP_OPS).itertuples(index=False):
        saving = context.wall_per_device(float(row.gain))
        if saving > 0 and saving >= MIN_SHARE * context.span_ps:
            rows.append((row, saving))
    return (grouped, keys), rows


def _rows_of(ops, keys: list[str], wanted: set[tuple[str, ...]]):
    """The op table's rows (positions) whose key is one of ``wanted``, with their keys: the few rows of the
    listed ops, found without a Python step per row of a large table."""
    mask = np.ones(len(ops), dtype=bool)
    for i, column in enumerate(keys):
        mask &= ops[column].astype(str).isin({key[i] for key in wanted}).to_numpy()
    where = np.flatnonzero(mask)
    found = [(int(at), _op_key(values)) for at, values in
             zip(where, ops[keys].iloc[where].itertuples(index=False, name=None))]
    return [(at, key) for at, key in found if key in wanted]


def _op_scopes(context: AdviceContext, keys: list[str], wanted: set[tuple[str, ...]]
               ) -> dict[tuple[str, ...], tuple] | None:
    """Per listed op (its key), the named scope its rows are placed at, where the scope tree places them all
    at one path of two components or more (a program alone is no place in the model); None without a tree."""
    tree = context.scopes()
    ops = context.pipeline.ops
    paths = getattr(tree, "op_paths", None)
    if tree is None or paths is None or len(paths) != len(ops) or not keys:
        return None
    values = paths.to_numpy()
    found: dict[tuple[str, ...], set] = {}
    for at, key in _rows_of(ops, keys, wanted):
        path = values[at]
        found.setdefault(key, set()).add(tuple(path) if path is not None else None)
    return {key: next(iter(p)) for key, p in found.items() if len(p) == 1 and None not in p
            and len(next(iter(p))) > 1}


def op_provider(context: AdviceContext) -> Iterable[Advice]:
    """The ops with the most time to gain at their roofline."""
    found, listed = _listed_ops(context)
    if found is None or not listed:
        return []
    grouped, keys = found
    names = Counter(zip(grouped["module"].astype(str), grouped["op"].astype(str)))
    shared = shared_module_names(context.pipeline.ops)
    judged = getattr(context.pipeline, "judged", None)
    chip_kind = getattr(getattr(judged, "chip", None), "kind", None)
    scopes = _op_scopes(context, keys, {_op_key(getattr(row, k) for k in keys) for row, _ in listed})
    out = []
    for row, saving in listed:
        bound = str(row.bound) if isinstance(row.bound, str) else "unknown"
        efficiency = row.roofline / row.time if row.time and np.isfinite(row.roofline) else None
        where = _op_where(row, names[(str(row.module), str(row.op))] > 1, str(row.module) in shared)
        title = f"op {row.op} ({where}): {bound}-bound" + (
            f" at {fmt_pct(efficiency)} of its roofline" if efficiency is not None else "")
        scope = (scopes or {}).get(_op_key(getattr(row, k) for k in keys))
        out.append(Advice(
            kind="op", title=title, saving_ps=saving, removable_ps=context.wall_per_device(float(row.removable)),
            rule=ROOFLINE_RULE, tab="Ops",
            fix=op_fix(bound, getattr(row, "category", None), getattr(row, "collective_kind", None), chip_kind),
            evidence=(f"measured {fmt_time_us(row.time / 1e6)} over {int(row.occurrences)} runs (all devices), "
                      f"roofline {fmt_time_us(row.roofline / 1e6)}{context.op_time_note(float(row.gain))}"
                      + (f"; in scope {'/'.join(map(str, scope))}" if scope else ""),)))
    return out


def _op_where(row, ambiguous: bool, shared_module: bool = False) -> str:
    """The module an op belongs to; where several programs share the module's name (a benchmark's jit_dot
    compiled for each shape), also which program, and where they also share the op's name, the op's shape,
    so that two items of the list cannot read the same and each can be found in the op table."""
    if not ambiguous and not shared_module:
        return str(row.module)
    where = [str(row.module)]
    program = getattr(row, "program_id", None)
    if program is not None and program == program:
        where.append(f"program {int(program) if float(program).is_integer() else program}")
    shape = getattr(row, "shape", None)
    result = RESULT_SHAPE.search(shape) if ambiguous and isinstance(shape, str) else None
    if result is not None:            # a custom call's tuple: its result, not the library's workspace
        where.append(result.group(0))
    return ", ".join(where)


def axis_provider(context: AdviceContext) -> Iterable[Advice]:
    """Mesh axes whose communication is exposed (not hidden behind compute). Overlapped perfectly, a step
    takes max(T_math, T_comms) rather than their sum (How to Scale Your Model, ch. 1), so hiding an
    axis' exposed time saves at most the busy time it could hide behind: the device time not bound by
    communication. Without that split the exposed time itself is the bound."""
    report = context.parallelism()
    if report is None:
        return []
    judged = context.pipeline.judged
    by_bound = (judged.summary.get("time_by_bound_ps") if judged is not None else None) or {}
    behind = [by_bound.get(b) for b in ("compute", "memory", "unknown")]
    hideable = context.per_device(float(sum(b or 0 for b in behind))) if any(b is not None for b in behind) \
        else None
    out = []
    for axis in report.axes:
        if not axis.exposed_ps:
            continue
        exposed = context.per_device(float(axis.exposed_ps))
        saving = exposed if hideable is None else min(exposed, hideable)
        if saving < MIN_SHARE * context.span_ps:
            continue
        role = axis.role.role if axis.role is not None and axis.role.role else "role unknown"
        verdict = axis.verdict.verdict or "not judged"
        evidence = [f"{axis.collectives} collectives, {fmt_si(axis.bytes or 0, 'B')} moved, exposed "
                    f"{fmt_time_us(exposed / 1e6)} per device"
                    + (f"; at most {fmt_time_us(hideable / 1e6)} of busy time to hide it behind"
                       if hideable is not None and hideable < exposed else ""), f"the book's rule: {verdict}"]
        if axis.measured:
            evidence.append(axis.measured)
        suggestions = list(axis.verdict.suggestions)
        out.append(Advice(kind="axis", title=f"mesh axis '{axis.name}' ({role}, size {axis.size}): exposed "
                          f"communication", saving_ps=saving, removable_ps=exposed, tab="Parallelism",
                          rule=axis.verdict.rule or "exposed communication: in-flight time not overlapped by compute",
                          evidence=tuple(evidence), fix="; ".join(suggestions) or (
                              COLLECTIVE_FIX["host-transfer"] if role == "host offload" else AXIS_FIX)))
    return out


def idle_provider(context: AdviceContext) -> Iterable[Advice]:
    """Idle causes that hold a notable share of the span."""
    idle = context.idle
    if idle is None or idle.reason and not idle.causes:
        return []
    stragglers = context.stragglers
    out = []
    for cause, total in idle.causes.items():
        saving = context.per_device(float(total))
        if saving <= 0 or saving < IDLE_NOTABLE * context.span_ps:
            continue
        what, fix = IDLE_ADVICE[cause]
        evidence = [f"{fmt_pct(total / idle.idle_ps)} of the idle time; in the gaps: " + ", ".join(
            f"{short_name(e['name'])} {fmt_time_us(e['time_ps'] / 1e6)}" for e in idle.evidence.get(cause, [])[:3])
            if idle.evidence.get(cause) else f"{fmt_pct(total / idle.idle_ps)} of the idle time"]
        if cause == "sync" and stragglers is not None and stragglers.most_often_last:
            evidence.append(f"{stragglers.most_often_last} finished last in {stragglers.device_late_steps} "
                            f"of {len(stragglers.steps)} steps")
        out.append(Advice(kind="idle", title=f"idle: {cause}: {what}", saving_ps=saving, removable_ps=saving,
                          tab="Timeline", evidence=tuple(evidence), fix=fix,
                          rule="measured: device gaps (span - union of ops) while the host did this "
                               "(docs/advice.md); saving = that idle time, per device"))
    return out


def memory_provider(context: AdviceContext) -> Iterable[Advice]:
    """Memory too close to the chip's capacity, or much room left (never quantified in time)."""
    report = context.memory()
    if report is None:
        return []
    peaks: list[tuple[str, Any]] = []
    for peak in report.memories:
        room = report.memory_headroom(peak)
        if room is not None and room.capacity_bytes:
            peaks.append((f"allocator {peak.device}", room))
    if not peaks:
        for module in report.modules:
            room = report.module_headroom(module)
            if room is not None and room.capacity_bytes:
                peaks.append((f"module {module.name} (buffer assignment)", room))
    if not peaks:
        return []
    where, room = max(peaks, key=lambda p: p[1].peak_bytes / p[1].capacity_bytes)
    used = room.peak_bytes / room.capacity_bytes
    evidence = (f"{where}: peak {fmt_bytes(room.peak_bytes)} of {fmt_bytes(room.capacity_bytes)} on "
                f"{room.target} ({fmt_share(used)})", UNQUANTIFIED)
    fixes = {True: "rematerialise (jax.checkpoint), shard the optimizer state (FSDP), or offload to the host",
             False: "raise the batch (or the sequence length) until the peak nears capacity, or rematerialise less"}
    rule = (f"measured peak / HBM capacity (hardware database); above {fmt_pct(MEMORY_TIGHT)}: too close, "
            f"below {fmt_pct(MEMORY_ROOMY)}: headroom")
    if used > MEMORY_TIGHT:
        title = f"memory: peak at {fmt_pct(used)} of capacity: too close (a larger batch will not fit)"
    elif used < MEMORY_ROOMY:
        title = (f"memory: peak at {fmt_share(used)} of capacity ({fmt_bytes(room.headroom_bytes)} free): "
                 "headroom for a larger batch or less rematerialisation")
    else:
        return []
    return [Advice(kind="memory", title=title, saving_ps=None, rule=rule, evidence=evidence, tab="Memory",
                   fix=fixes[used > MEMORY_TIGHT])]


def scopes_provider(context: AdviceContext) -> Iterable[Advice]:
    """Named scopes whose own ops have the most time to gain (the scope tree's nodes: ``path``,
    ``self_gain_us`` and ``self_us`` summed over devices, as ops' are). A scope's own ops are those placed
    at it, not below it: the scopes' own gains partition the ops' gain, so no item repeats another's time,
    and each names the most precise place (a parent's gain is only its children's). A program alone (a
    path of one) is no place in the model: its ops are the op items. A scope whose own gain is almost all
    in ops the op items list (what is left under MIN_SHARE of the span) would repeat their time: it is left
    out, and those op items name it. Without a target nothing is judged: no gain, no item."""
    tree = context.scopes()
    if tree is None or not tree.judged or tree.nodes.empty:
        return []
    nodes = [n for n in tree.nodes.to_dict("records") if _number(n["self_gain_us"]) > 0 and len(n["path"]) > 1]
    listed = _listed_gain_per_path(context, tree)
    out = []
    for node in sorted(nodes, key=lambda n: -_number(n["self_gain_us"]))[:TOP_OPS]:
        saving = context.wall_per_device(_number(node["self_gain_us"]) * 1e6)
        if saving < MIN_SHARE * context.span_ps:
            continue
        path = tuple(map(str, node["path"]))
        in_items, op_names = listed.get(path, (0.0, []))
        rest = context.wall_per_device(max(_number(node["self_gain_us"]) * 1e6 - in_items, 0.0))
        if op_names and rest < MIN_SHARE * context.span_ps:
            continue
        removable = context.wall_per_device(_number(node["self_us"]) * 1e6) or None
        bound = dominant_bound(node)
        bound_text = f"{bound}-bound, " if bound is not None else ""
        also = (f"; it holds op {', '.join(op_names)} of the list (their gain counts in both)" if op_names else "")
        out.append(Advice(kind="scope", title=f"scope {'/'.join(path)}: {bound_text}time to gain "
                          "at the roofline", saving_ps=saving, removable_ps=removable, rule=ROOFLINE_RULE,
                          tab="Model",
                          evidence=(f"its own ops: gain {fmt_time_us(saving / 1e6)} per device of "
                                    f"{fmt_time_us((removable or 0) / 1e6)} (wall time)"
                                    f"{context.op_time_note(_number(node['self_gain_us']) * 1e6)}{also}",),
                          fix="open the scope's ops (traceview scopes, the Model tab): each op's bound says "
                              "what to change"))
    return out


def _listed_gain_per_path(context: AdviceContext, tree) -> dict[tuple[str, ...], tuple[float, list[str]]]:
    """Per scope path: the gain (op time, summed over devices) of its own ops that the op items list, and
    those ops' names."""
    found, listed = _listed_ops(context)
    paths = getattr(tree, "op_paths", None)
    ops = context.pipeline.ops
    if found is None or not listed or paths is None or len(paths) != len(ops):
        return {}
    _, keys = found
    wanted = {_op_key(getattr(row, k) for k in keys): str(row.op) for row, _ in listed}
    gains = ops["gain_ps"].astype(float).fillna(0.0).to_numpy()
    values = paths.to_numpy()
    out: dict[tuple[str, ...], tuple[float, list[str]]] = {}
    for at, key in _rows_of(ops, keys, set(wanted)):
        path = values[at]
        if path is None:
            continue
        name = wanted[key]
        total, names = out.get(tuple(map(str, path)), (0.0, []))
        out[tuple(map(str, path))] = (total + float(gains[at]), names if name in names else [*names, name])
    return out


def serving_provider(context: AdviceContext) -> Iterable[Advice]:
    """Serving phases above their inference floor, and decode batches below the critical batch (the
    inference report's phases and critical batch)."""
    report = context.serving()
    if report is None or not report.phases:
        return []
    out = []
    critical = _number(report.critical_batch)
    for phase in report.phases:
        step, floor, steps = _number(phase.step_time_us), _number(phase.floor_us), _number(phase.steps)
        name = f"{phase.phase} ({phase.module})"
        if step > 0 and floor > 0 and steps > 0 and step > floor:
            saving = (step - floor) * steps * 1e6
            if saving >= MIN_SHARE * context.span_ps:
                out.append(Advice(kind="serving", title=f"serving: {name} at {fmt_pct(floor / step)} of its floor",
                                  saving_ps=saving, removable_ps=step * steps * 1e6, tab="Inference",
                                  rule="inference floor (How to Scale Your Model, 'All About Transformer "
                                       "Inference'): max(FLOPs / peak, (parameter + KV cache bytes) / HBM bandwidth)",
                                  evidence=(f"{counted(int(steps), 'step')} of "
                                            f"{fmt_time_us(step)} against a floor of "
                                            f"{fmt_time_us(floor)} ({phase.floor_bound}-bound)",),
                                  fix="close the gap to the floor: the phase's ops by gain show where"))
        batch = _number(phase.batch)
        if phase.phase == "decode" and critical > 0 and 0 < batch < critical:
            out.append(Advice(kind="serving", title=f"serving: decode batch {int(batch)} below the critical batch "
                              f"{critical:.0f}: more sequences per step cost little time (weights are read "
                              "once per step either way)", saving_ps=None, tab="Inference",
                              rule="critical batch B* = peak FLOP/s / HBM bandwidth (How to Scale Your Model, "
                                   "inference chapter): below it decode is memory-bound on the weights",
                              evidence=(UNQUANTIFIED,),
                              fix="batch more sequences per decode step, toward the critical batch"))
    return out


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


DEFAULT_PROVIDERS = (op_provider, axis_provider, idle_provider, memory_provider, scopes_provider,
                     serving_provider)
