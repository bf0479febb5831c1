"""Mesh, communication per axis and the book's verdict per axis: one report.

Reads the modules an Analysis found (the optimized HLO that ran, for the
groups, shapes and dots), the before-optimizations modules of a dump beside
it (for Shardy's axis names), and the Analysis's per-op times (in-flight and
exposed time of each collective, as traceview.timeline computes them for
every report; nothing is re-measured here).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from traceview.errors import UserError
from traceview.hardware.chips import Chip
from traceview.parallelism.attribution import Attribution, as_sets, attribute_all, axes_of_groups
from traceview.parallelism.context import block_of
from traceview.parallelism.dots import (
    Figure,
    consuming_dot,
    per_chip_tokens,
    producing_dot,
    state_shapes,
    weight_shapes,
)
from traceview.parallelism.expert import routed_tokens, router
from traceview.parallelism.groups import CollectiveSite, collective_sites, device_counts
from traceview.parallelism.mesh import Mesh, infer_mesh, named_mesh
from traceview.parallelism.mpmd import MeasuredSchedule, may_have_stages, measure_mpmd
from traceview.parallelism.p2p import transfer_key
from traceview.parallelism.report import AxisReport, Parallelism, RoleReport
from traceview.parallelism.roles import PATTERN_ROLE, AxisRole, Classified, axis_roles, classify, gathered_arrays
from traceview.parallelism.rules import (
    AxisVerdict,
    Link,
    axis_link,
    judge,
    judge_context,
    judge_expert,
    judge_pipeline,
)
from traceview.parallelism.shardings import ParameterSharding, parameter_shardings
from traceview.parallelism.spmd_bubble import device_number, measure_spmd
from traceview.parallelism.structure import Structures, kv_gather_reader, measured_pipeline, read_structures
from traceview.parallelism.times import collective_key, collective_times, fill_times, host_transfers
from traceview.parallelism.updates import weight_values
from traceview.parsers.hlo.model import HloModule


@dataclass
class DiagnoseInputs:
    """What a parallelism report is made from: the optimized modules, and what else is known."""
    modules: list[HloModule]
    before: list[HloModule] = field(default_factory=list)   # before-optimizations modules (mesh names)
    ops: pd.DataFrame | None = None     # the Analysis's per-op times
    span_ps: float | None = None        # the device span the exposed shares are of
    chip: Chip | None = None
    device_count: int | None = None     # devices the trace shows
    ran: set[str] | None = None         # names of the modules the trace executed (others left out)
    costs: pd.DataFrame | None = None   # the HLO cost table (bytes per step through loop trip counts)
    target_source: str = ""
    executions: Callable[[], pd.DataFrame] | None = None   # the trace's op executions (read when needed)
    # the distinct (device, module, program_id) the executions ran, when known without reading them (None: unknown)
    device_programs: Callable[[], pd.DataFrame | None] | None = None
    measured_on: str | None = None      # the chip the trace ran on, when the target is another one

    @property
    def has_trace(self) -> bool:
        return self.ops is not None and not self.ops.empty


@dataclass
class _Program:
    """What the collectives and the dots say, before any axis is judged."""
    communicating: list[tuple[HloModule, list[CollectiveSite]]]
    sites: list[CollectiveSite]
    by_module: dict[str, HloModule]
    weights: dict[str, set[tuple[int, ...]]] = field(default_factory=dict)
    rows: list[Classified] = field(default_factory=list)
    tokens: Figure | None = None


def _communicating(modules: list[HloModule]) -> list[tuple[HloModule, list[CollectiveSite]]]:
    out = []
    for module in modules:
        sites = collective_sites(module)
        if sites:
            out.append((module, sites))
    return out


def _device_count(modules: list[HloModule]) -> int | None:
    counts = []
    for module in modules:
        replicas, partitions = device_counts(module)
        if replicas or partitions:
            counts.append((replicas or 1) * (partitions or 1))
    return max(counts) if counts else None


def diagnose(inputs: DiagnoseInputs) -> Parallelism:
    """The parallelism report of the given optimized modules (and the trace's op times, when given)."""
    warnings: list[str] = []
    modules = _modules_that_ran(inputs)
    program = _find_collectives(modules, warnings)
    params = _parameter_shardings(inputs.before, modules)
    mesh, why = _find_mesh(inputs, modules, program, params, warnings)
    attributions = _attribute(program.sites, mesh, why, warnings)
    _read_dots(program, attributions, warnings)
    report = Parallelism(mesh, [], program.rows, why, program.tokens, inputs.chip, inputs.has_trace, warnings,
                         params, inputs.target_source, inputs.measured_on)
    host = host_transfers(inputs.ops, inputs.chip, inputs.span_ps) if inputs.has_trace else None
    if mesh is not None:
        for param in params:
            param.axes = {dim: axes_of_groups(as_sets(groups), mesh)[0] for dim, groups in param.dim_groups.items()}
        report.axes = _judge_axes(inputs, mesh, attributions, program, params)
    report.axes = _with_measured_pipeline(inputs, report.axes)
    if mesh is not None:
        _measure_spmd_pipelines(inputs, mesh, report.axes, program.by_module)
    if mesh is None and any(a.pipeline is not None for a in report.axes):   # a program per stage, no collective
        report.warnings = [w for w in report.warnings if not w.startswith("mesh not determined")]
    report.axes += [host] if host else []
    return report


def _with_measured_pipeline(inputs: DiagnoseInputs, axes: list[AxisReport]) -> list[AxisReport]:
    """A pipeline whose stages run their own programs, its bubble measured in the trace (:mod:`mpmd`): it fills
    the axis whose point-to-points (send/recv between programs) gave no schedule, or adds a ``stage`` axis when
    no collective shows it (activations copied between the programs). Read only when several programs ran."""
    if inputs.executions is None or len(inputs.ran or ()) < 2:
        return axes
    programs = inputs.device_programs() if inputs.device_programs is not None else None
    if programs is not None and not may_have_stages(programs):
        return axes           # no stage split of the devices: the executions need not be read (a pod's hosts)
    schedule = measure_mpmd(inputs.executions())
    if schedule is None:
        return axes
    found = measured_pipeline(schedule)
    verdict = judge_pipeline(found)
    for axis in axes:
        if axis.pipeline is not None and axis.pipeline.bubble_fraction is None and axis.size == schedule.p:
            axis.pipeline = found
            axis.roles = [RoleReport(r.role, r.evidence, verdict if r.role == "pipeline" else r.verdict)
                          for r in axis.roles]
            axis.verdict = verdict if axis.role.role == "pipeline" else axis.verdict
            return axes
    evidence = [_stage_evidence(schedule)]
    role = AxisRole("pipeline", evidence, {"program per stage": schedule.p}, {"pipeline": evidence})
    return axes + [AxisReport("stage", schedule.p, role, None, verdict, roles=[RoleReport("pipeline", evidence,
                                                                                          verdict)], pipeline=found)]


def _measure_spmd_pipelines(inputs: DiagnoseInputs, mesh: Mesh, axes: list[AxisReport],
                            modules: dict[str, HloModule]) -> None:
    """An SPMD pipeline's bubble measured from its loop's ticks in the trace (:mod:`spmd_bubble`), beside the
    formula's; read only when the trace has executions and an SPMD pipeline was found."""
    names = [a.name for a in mesh.axes]
    wanted = [a for a in axes if a.pipeline is not None and a.pipeline.loop is not None and a.name in names]
    if not wanted or inputs.executions is None or not inputs.has_trace:
        return
    executions = inputs.executions()
    sizes = [a.size for a in mesh.axes]
    for axis in wanted:
        found = axis.pipeline
        assert found is not None and found.loop is not None
        module, body, trips = found.loop
        comp = modules[module].computations.get(body) if module in modules else None
        if comp is None:
            continue
        where = names.index(axis.name)

        def stage_of(device: str, where: int = where) -> int | None:
            number = device_number(device)
            ids = mesh.device_ids
            if number is None or number >= math.prod(sizes) or (ids is not None and number not in ids):
                return None
            position = ids.index(number) if ids is not None else number
            return int(np.unravel_index(position, sizes)[where])

        found.measured = measure_spmd(executions, module, {i.name for i in comp.instructions}, trips,
                                      found.stages, stage_of)


def _stage_evidence(schedule: MeasuredSchedule) -> str:
    held, checked = schedule.in_sequence
    stages = ", ".join(f"{'+'.join(s.programs)} on {'+'.join(s.devices)}" for s in schedule.stages)
    return (f"{schedule.p} stages each run their own program(s) ({stages}); stage s + 1's k-th execution starts "
            f"after stage s's k-th ends ({held} of {checked} in the trace)")


def _modules_that_ran(inputs: DiagnoseInputs) -> list[HloModule]:
    if inputs.ran:
        return [m for m in inputs.modules if m.name in inputs.ran] or inputs.modules
    return inputs.modules


def _find_collectives(modules: list[HloModule], warnings: list[str]) -> _Program:
    """Every collective of the modules; one warning per distinct note (unreadable groups, ...)."""
    communicating = _communicating(modules)
    sites = [site for _, found in communicating for site in found]
    notes = Counter(site.note for site in sites if site.note)
    for note, n in notes.items():
        noted = next(s for s in sites if s.note == note)
        warnings.append(f"{noted.module}/{noted.name}" + (f" and {n - 1} more collective(s)" if n > 1 else "")
                        + f": {note}")
    return _Program(communicating, sites, {m.name: m for m in modules})


def _parameter_shardings(before: list[HloModule], modules: list[HloModule]) -> list[ParameterSharding]:
    return [p for m in before for p in parameter_shardings(m)] or \
        [p for m in modules for p in parameter_shardings(m)]


def _find_mesh(inputs: DiagnoseInputs, modules: list[HloModule], program: _Program,
               params: list[ParameterSharding], warnings: list[str]) -> tuple[Mesh | None, str]:
    """The mesh: its shape from the collectives' groups and the parameters' tilings, names from Shardy."""
    named = named_mesh(list(inputs.before) + modules)
    count = _device_count([m for m, _ in program.communicating]) or _device_count(modules)
    group_sets = [s.groups for s in program.sites if s.groups]
    group_sets += [rings for pairs in _point_to_point_pairs(program) if (rings := _rings(pairs))]
    named_ids = [x for groups in group_sets for g in groups for x in g]
    named_ids += [x for s in program.sites for pair in (s.pairs or []) for x in pair]
    if count is None and named_ids:
        count = max(named_ids) + 1
        if inputs.device_count and count > inputs.device_count:
            warnings.append(f"the collectives name devices 0..{count - 1}: the program spans {count} devices, "
                            f"the trace shows {inputs.device_count}")
    count = count or inputs.device_count
    mesh, why = infer_mesh(group_sets + [g for p in params for g in p.dim_groups.values()], count, named)
    if mesh is not None:
        warnings += mesh.warnings
    else:
        why = _what_was_seen(inputs, modules, program) or why
        warnings.append(f"mesh not determined: {why}")
    return mesh, why


def _point_to_point_pairs(program: _Program) -> list[list[tuple[int, int]]]:
    """The (source, target) pairs of each point-to-point transfer: a permute's own; the sends and recvs that
    move one value (a ring XLA split into its back edge and the rest, :func:`p2p.transfer_key`) together."""
    out = [s.pairs for s in program.sites if s.pairs and not s.groups and s.kind not in ("send", "recv")]
    moved: dict[tuple[str, str, str], list[tuple[int, int]]] = {}
    for s in program.sites:
        module = program.by_module.get(s.module)
        if s.pairs and s.kind in ("send", "recv") and module is not None and s.instruction is not None:
            key = (s.module,) + transfer_key(module, s.computation, s.instruction)
            moved.setdefault(key, []).extend(p for p in s.pairs if p not in moved.get(key, []))
    return out + list(moved.values())


def _rings(pairs: list[tuple[int, int]]) -> list[list[int]]:
    """The devices a point-to-point's (source, target) pairs connect, as groups (the rings or chains it runs
    around): a permute over one mesh axis connects the devices of each row of that axis."""
    parent: dict[int, int] = {}

    def root(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        parent[root(a)] = root(b)
    groups: dict[int, list[int]] = {}
    for x in sorted(parent):
        groups.setdefault(root(x), []).append(x)
    found = sorted(groups.values())
    return found if len(found[0]) > 1 and len({len(g) for g in found}) == 1 else []


def _what_was_seen(inputs: DiagnoseInputs, modules: list[HloModule], program: _Program) -> str:
    """Without a mesh: the programs read and their collectives, and the programs that ran without HLO."""
    read = sorted({m.name for m in modules})
    blind = sorted((inputs.ran or set()) - {m.name for m in inputs.modules})
    shown = ", ".join(blind[:8]) + (f" and {len(blind) - 8} more" if len(blind) > 8 else "")
    lacking = (f"; no HLO for {len(blind)} program(s) that ran ({shown}): give --hlo DIR (an XLA dump) or the "
               "xplane.pb that holds their HLO" if blind else "")
    if not read:
        return f"no HLO for any program that ran ({shown}): their collectives and mesh cannot be read; give --hlo " \
               "DIR (an XLA dump) or the xplane.pb that holds their HLO" if blind else ""
    if program.sites:
        return ""
    names = ", ".join(read[:8]) + (f" and {len(read) - 8} more" if len(read) > 8 else "")
    return (f"no collective in the {len(read)} program(s) read ({names}) and no mesh in their HLO: "
            f"{'the program does' if len(read) == 1 else 'the programs do'} not communicate across devices{lacking}")


def _attribute(sites: list[CollectiveSite], mesh: Mesh | None, why: str, warnings: list[str]) -> list[Attribution]:
    attributions = attribute_all(sites, mesh, why)
    unattributed = [a for a in attributions if a.axes is None]
    if unattributed:
        first = unattributed[0]
        warnings.append(f"{len(unattributed)} collective(s) not attributed to a mesh axis "
                        f"(first: {first.site.module}/{first.site.name}: {first.reason})")
    return attributions


def _read_dots(program: _Program, attributions: list[Attribution], warnings: list[str]) -> None:
    """Weight shapes per module, each collective's pattern, and the per-chip batch from the main module's dots."""
    gathered: dict[str, list[tuple[int, ...]]] = {}
    state = {m.name: weight_shapes(m, []) for m, _ in program.communicating}
    for att in attributions:
        site = att.site
        if site.kind != "all-gather" or site.instruction is None:
            continue
        arrays = gathered_arrays(site.instruction)
        module = program.by_module.get(site.module)
        if module is not None and kv_gather_reader(module, site.computation, site.name, block_of(arrays),
                                                   state.get(site.module)) is not None:
            continue          # K/V gathered along the sequence (context parallelism): no weight
        gathered.setdefault(site.module, []).extend(tuple(a.dims) for a in arrays)
    program.weights = {m.name: weight_shapes(m, gathered.get(m.name, [])) for m, _ in program.communicating}
    program.rows = classify(attributions, program.by_module, program.weights)
    if not program.communicating:
        return
    main = max(program.communicating, key=lambda ms: len(ms[1]))[0]
    routing = router(main)
    routed = routed_tokens(main, program.weights[main.name], routing.experts) if routing.experts else None
    program.tokens = routed or per_chip_tokens(main, program.weights[main.name], weight_values(main))
    if not state_shapes(main):
        warnings.append(f"{main.name}: no entry parameter is also a result (not a training step?): weights are "
                        "only the all-gathered parameters")


@dataclass
class _AxisContext:
    """What every axis's verdict reads beside its own collectives."""
    mesh: Mesh
    chip: Chip | None
    dtype: str
    tokens: float | None
    widths: dict[str, float | None]
    full_width: float | None
    has_tp: bool
    structures: Structures


def _judge_axes(inputs: DiagnoseInputs, mesh: Mesh, attributions: list[Attribution], program: _Program,
                params: list[ParameterSharding]) -> list[AxisReport]:
    labels = _labels(mesh, attributions)
    structures = read_structures(program.rows, program.by_module, program.weights,
                                 {label: _label_size(mesh, label) for label in labels})
    roles = axis_roles(program.rows, labels)
    widths = {label: _tp_width(program.rows, label, program.by_module, program.weights) for label in labels}
    full_width = next((width * _label_size(mesh, lb) for lb in labels
                       if roles[lb].role == "tensor" and (width := widths[lb])), None)
    shared = _AxisContext(mesh, inputs.chip, _dtype(program.rows), program.tokens.value if program.tokens else None,
                          widths, full_width, any(r.role == "tensor" for r in roles.values()), structures)
    times = collective_times(inputs.ops, program.rows) if inputs.has_trace and inputs.ops is not None else {}
    per_step = _bytes_per_step(inputs.costs, program.by_module)
    out = []
    for label in labels:
        mine = [r for r in program.rows if r.attribution.label == label]
        axis = _axis_report(label, mine, roles[label], shared, times)
        axis.parameters = [f"{p.label} dim {dim}" for p in params for dim, axes in p.axes.items()
                           if axes and "+".join(axes) == label]
        known = [per_step[collective_key(r)] for r in mine if collective_key(r) in per_step]
        axis.bytes_per_step = float(sum(known)) if mine and len(known) == len(mine) else None
        _add_structure_evidence(axis, structures.notes.get(label, []))
        if axis.parameters:
            shown = ", ".join(axis.parameters[:4]) + (", ..." if len(axis.parameters) > 4 else "")
            axis.role.evidence.append(f"{len(axis.parameters)} parameter dimension(s) split over it ({shown})")
        if times:
            fill_times(axis, [times[collective_key(r)] for r in mine if collective_key(r) in times], inputs.span_ps)
        out.append(axis)
    return out


def _add_structure_evidence(axis: AxisReport, notes: list[str]) -> None:
    """Where the structural roles were read: the attention product that reads the K/V, how the ring's passes
    were counted, the pipeline's schedule; and why a loop's permutes were not called a pipeline."""
    for role in axis.roles:
        if role.role == "context" and axis.context is not None:
            role.evidence.extend(axis.context.how)
        elif role.role == "pipeline" and axis.pipeline is not None and axis.pipeline.schedule is None:
            role.evidence.append(axis.pipeline.how)
    axis.role.evidence.extend(notes[:3] + ([f"... and {len(notes) - 3} more"] if len(notes) > 3 else []))


def _axis_report(label: str, mine: list[Classified], role: AxisRole, shared: _AxisContext,
                 times: dict[tuple[str, str], dict]) -> AxisReport:
    """One axis: its link, a verdict per role (the main one first), the structural figures."""
    size = _label_size(shared.mesh, label)
    crosses = any(bool(times.get(collective_key(r), {}).get("crosses_dcn")) for r in mine)
    link = axis_link(shared.chip, crosses, 1, size) if shared.chip is not None else None
    found = shared.structures
    judged = [RoleReport(name, evidence, _verdict(name, label, link, shared))
              for name, evidence in role.roles.items()]
    main = judged[0].verdict if judged else judge(None, shared.chip, link, shared.dtype, None, None, None, False)
    if not mine:
        main.reason = "no role: no collective runs over this axis (its devices split the data or the parameters " \
                      "without communicating)"
    return AxisReport(label, size, role, link, main, collectives=len(mine),
                      bytes_per_execution=float(sum(r.bytes for r in mine)), crosses_dcn=crosses, roles=judged,
                      pipeline=found.pipeline.get(label), context=found.context.get(label),
                      expert=found.expert.get(label))


def _verdict(role: str, label: str, link: Link | None, shared: _AxisContext) -> AxisVerdict:
    """The book's verdict for one role of an axis."""
    found = shared.structures
    if role == "context" and label in found.context:
        return judge_context(shared.chip, link, shared.dtype, found.context[label])
    if role == "expert" and label in found.expert:
        return judge_expert(shared.chip, link, shared.dtype, found.expert[label])
    if role == "pipeline" and label in found.pipeline:
        return judge_pipeline(found.pipeline[label])
    return judge(role, shared.chip, link, shared.dtype, shared.tokens, shared.widths.get(label), shared.full_width,
                 shared.has_tp and role == "fsdp")


def _bytes_per_step(costs: pd.DataFrame | None, modules: dict[str, HloModule]) -> dict[tuple[str, str], float]:
    """(module, instruction) -> payload bytes x executions per step, from the HLO cost table. A module without
    an ENTRY (truncated text) gives none: the loops around its layers, and so their trip counts, are lost."""
    if costs is None or costs.empty or "payload_bytes" not in costs.columns:
        return {}
    whole = {name for name, m in modules.items() if m.entry_computation() is not None}
    rows = costs[(costs["collective_kind"].fillna("").astype(str) != "") & costs["module"].astype(str).isin(whole)]
    mult = rows["multiplier"] if "multiplier" in rows.columns else 1.0
    values = (rows["payload_bytes"].astype("float64") * mult).to_numpy()
    return {(str(m), str(n)): float(v) for m, n, v in zip(rows["module"], rows["name"], values) if v == v}


def _labels(mesh: Mesh, attributions: list[Attribution]) -> list[str]:
    """Every non-trivial mesh axis, then each combination of axes some collective runs over."""
    labels = [a.name for a in mesh.axes if a.size > 1]
    for att in attributions:
        if att.axes and len(att.axes) > 1 and att.label not in labels:
            labels.append(att.label)
    return labels


def _label_size(mesh: Mesh, label: str) -> int:
    sizes = {a.name: a.size for a in mesh.axes}
    return int(math.prod(sizes.get(part, 1) for part in label.split("+")))


def _tp_width(rows: list[Classified], label: str, modules: dict[str, HloModule],
              weights: dict[str, set[tuple[int, ...]]]) -> float | None:
    """F/Y: the contracting extent of the dot summed (or scattered) over the axis, else the weight's free
    extent in the dot reading an activation all-gather."""
    for r in rows:
        if r.attribution.label != label or not r.pattern.startswith("activation"):
            continue
        site, module = r.attribution.site, modules.get(r.attribution.site.module)
        if module is None or site.instruction is None:
            continue
        if site.kind in ("all-reduce", "reduce-scatter"):
            for operand in site.instruction.operands:
                dot = producing_dot(module, site.computation, operand)
                if dot is not None and dot.k > 1:
                    return float(dot.k)
        elif site.kind == "all-gather":
            dot = consuming_dot(module, site.computation, site.name)
            w = weights.get(module.name, set())
            if dot is not None:
                if tuple(sorted(dot.lhs)) in w:
                    return float(dot.free("lhs"))
                if tuple(sorted(dot.rhs)) in w:
                    return float(dot.free("rhs"))
    return None


def _dtype(rows: list[Classified]) -> str:
    counts = Counter(r.dtype for r in rows if r.pattern in ROLE_PATTERNS and r.dtype)
    return counts.most_common(1)[0][0] if counts else "bf16"


ROLE_PATTERNS = set(PATTERN_ROLE) | {"all-to-all", "point-to-point"}   # the dtype is the model's, not a scalar's


def naming_modules(dump: Path) -> list[HloModule]:
    """The before-optimizations modules of a dump, where mesh names survive. Their text form is read
    first: its header keeps the module's frontend attributes (Shardy's ``xla.sdy.meshes``)."""
    from traceview.parsers.hlo.dump import load_hlo_modules, read_hlo_file

    if dump.is_dir():
        texts = sorted(dump.glob("*before_optimizations.txt"))
        if texts:
            return [read_hlo_file(f) for f in texts[:20]]
    try:
        return load_hlo_modules(dump, stage="before")[0]
    except UserError:
        return []


def from_analysis(pipeline, hlo_path: str | Path | None = None) -> Parallelism:
    """The report of a pipeline result (its modules and op times), names from a dump's
    before-optimizations modules when one is beside the trace or given."""
    from traceview.analysis.modules import find_dump_dir

    dump = Path(hlo_path) if hlo_path else find_dump_dir(pipeline.profile.source.path)
    before = naming_modules(dump) if dump is not None else []
    ops = pipeline.ops
    ran = set(ops["module"].astype(str)) if not ops.empty and "module" in ops else None
    judged = pipeline.judged
    return diagnose(DiagnoseInputs(pipeline.hlo.every, before, ops, pipeline.span_ps or pipeline.device_time_ps,
                                   judged.chip if judged else None, len(pipeline.profile.devices) or None, ran,
                                   pipeline.hlo.every_costs, judged.source if judged else "", pipeline.profile.op_executions,
                                   _device_programs(pipeline),
                                   judged.measured_on.name if judged and judged.measured_on else None))


def _device_programs(pipeline) -> Callable[[], pd.DataFrame | None]:
    """The distinct (device, module, program_id) of the run's executions, from its merged host partials."""
    run = pipeline.run_ops
    return run.device_programs


def from_hlo(path: str | Path, chip: Chip | None = None, target_source: str = "--target") -> Parallelism:
    """The report of an HLO dump or file alone (no trace: no times)."""
    from traceview.parsers.hlo.dump import load_hlo_modules

    after, warnings = load_hlo_modules(path, stage="after")
    before = naming_modules(Path(path))
    from traceview.analysis.modules import cost_table

    report = diagnose(DiagnoseInputs(after, before, chip=chip, costs=cost_table(after)[0],
                                     target_source=target_source if chip is not None else ""))
    report.warnings = warnings + report.warnings + ["no trace: counts and shapes from the HLO only, no times"]
    return report
