"""The parallelism and serving views read HLO attributes from the typed record (``Instruction.typed``), so a
module gives the same view whether it was read from text or from a proto.

Two kinds of evidence: generated modules, each drawn once and written both as HLO text and as an
HloModuleProto (random replica groups in the list, iota and mesh forms, or none at all; random
source-target pairs, channels, global-id flags; random tiled, maximal, tuple and replicated shardings;
dots and matmul convolutions with random dimension numbers), where the drawn values are the truth; and
every sample module, whose views from the proto's typed fields equal those from the text the proto
reader writes beside them.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path

import numpy as np
import pytest

from tests.unit.test_hlo_proto_typed import _iota, _shape
from traceview.inference.programs import read_program
from traceview.parallelism.dots import dots
from traceview.parallelism.groups import collective_sites
from traceview.parallelism.mesh import group_mesh
from traceview.parallelism.shardings import parameter_shardings
from traceview.parsers.hlo.attributes import Attributes
from traceview.parsers.hlo.model import HloModule
from traceview.parsers.hlo.proto import parse_hlo_proto
from traceview.parsers.hlo.schema import message_class
from traceview.parsers.hlo.text import parse_hlo_text

REPO = Path(__file__).resolve().parents[2]


def _ints(values) -> str:
    return ",".join(map(str, values))


def _groups_text(groups) -> str:
    return "{" + ",".join("{" + _ints(g) + "}" for g in groups) + "}"


class _Drawn:
    """One generated module: its instructions as proto messages and as HLO text lines, and what the views
    must read from them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.protos: list = []
        self.lines: list[str] = []
        self.groups: dict[str, list[list[int]]] = {}       # collective -> its groups
        self.pairs: dict[str, list[tuple[int, int]]] = {}  # permute -> its pairs
        self.meshes: list[tuple[tuple[str, int], ...]] = []  # the mesh-form lists' meshes, in order
        self.tiles: dict[str, dict[int, list[list[int]]]] = {}  # parameter -> its split dimensions
        self._ids = iter(range(1, 100_000))

    def add(self, name: str, opcode: str, operands: list[str], text: str, **fields):
        ip = message_class("HloInstructionProto")(name=name, opcode=opcode, id=next(self._ids),
                                                  shape=_shape([4, 4]), **fields)
        ids = {p.name: p.id for p in self.protos}
        ip.operand_ids.extend(ids[o] for o in operands)
        self.protos.append(ip)
        args = ", ".join(f"%{o}" for o in operands)
        self.lines.append(f"  %{name} = f32[4,4]{{1,0}} {opcode}({args}){', ' + text if text else ''}")
        return ip


def _draw_sharding(d: _Drawn, ip) -> str:
    """A random sharding set on the parameter ``ip``; its text. Records the split groups it means."""
    rng = d.rng
    kind = rng.choice(("tiled", "tiled", "tiled", "replicated", "maximal", "tuple", "none"))
    sh = ip.sharding
    if kind == "none":
        ip.ClearField("sharding")
        return ""
    if kind == "replicated":
        sh.type = 0
        return "sharding={replicated}"
    if kind == "maximal":
        sh.type = 1
        sh.tile_assignment_devices.append(3)
        return "sharding={maximal device=3}"
    if kind == "tuple":
        sh.type = 2
        sh.tuple_shardings.add(type=0)
        sh.tuple_shardings.add(type=3, tile_assignment_dimensions=[2], tile_assignment_devices=[0, 1])
        return "sharding={{replicated}, {devices=[2]0,1}}"
    sh.type = 3
    tiles = [rng.choice((1, 2, 3)) for _ in range(rng.randint(1, 3))]
    replicate = rng.random() < 0.3
    if replicate:
        tiles.append(2)
    total = int(np.prod(tiles))
    sh.tile_assignment_dimensions.extend(tiles)
    if rng.random() < 0.5:
        dims = [total] if total < 4 or rng.random() < 0.3 else [tiles[0], total // tiles[0]]
        perm = list(range(len(dims)))
        rng.shuffle(perm)
        sh.iota_reshape_dims.extend(dims)
        sh.iota_transpose_perm.extend(perm)
        devices = np.arange(total).reshape(dims).transpose(perm).reshape(-1)
        spelled = f"<=[{_ints(dims)}]" + (f"T({_ints(perm)})" if perm != sorted(perm) else "")
    else:
        devices = np.asarray(rng.sample(range(total + 2), total))
        sh.tile_assignment_devices.extend(devices.tolist())
        spelled = _ints(devices.tolist())
    sh.replicate_on_last_tile_dim = replicate
    grid = devices.reshape(tiles)
    split = {}
    for i in range(len(tiles) - replicate):         # by the definition: vary tile index i, the others fixed
        if tiles[i] > 1:
            split[i] = [grid[tuple(slice(None) if j == i else k for j, k in enumerate(index))].tolist()
                        for index in np.ndindex(*[1 if j == i else t for j, t in enumerate(tiles)])]
    d.tiles[ip.name] = split
    return f"sharding={{devices=[{_ints(tiles)}]{spelled}{' last_tile_dim_replicate' if replicate else ''}}}"


def _draw_groups(d: _Drawn, ip, name: str) -> str:
    """A random device list set on the collective ``ip`` (or none); its text. Records the groups."""
    rng = d.rng
    form = rng.choice(("list", "iota", "iota_cdl", "mesh", "empty", "absent"))
    dims, perm, groups, n_groups, size = _iota(rng)
    if form in ("empty", "absent"):
        d.groups[name] = []                      # every device
        return "replica_groups={}" if form == "empty" else ""
    if form == "list":
        for g in groups:
            ip.replica_groups.add(replica_ids=g)
        d.groups[name] = groups
        return "replica_groups=" + _groups_text(groups)
    if form == "mesh":
        names = rng.sample(("data", "fsdp", "tp"), rng.randint(1, 3))
        sizes = [rng.choice((1, 2, 3)) for _ in names]
        chosen = sorted(rng.sample(range(len(names)), rng.randint(1, len(names))))
        mesh = ip.mesh_axes_replica_group_list
        for axis, n in zip(names, sizes):
            mesh.mesh.axes.add(name=axis, size=n)
        for i in chosen:
            mesh.axes.add(mesh_axis_index=i)
        other = [i for i in range(len(names)) if i not in chosen]
        width = int(np.prod([sizes[i] for i in chosen]))
        d.groups[name] = np.arange(int(np.prod(sizes))).reshape(sizes).transpose(other + chosen) \
            .reshape(-1, width).tolist()
        d.meshes.append(tuple(zip(names, sizes)))
        return ("replica_groups=mesh[" + ",".join(f"'{a}'={n}" for a, n in zip(names, sizes)) + "] {"
                + ",".join(f"'{names[i]}'" for i in chosen) + "}")
    iota = ip.iota_collective_device_list if form == "iota" else ip.collective_device_list.iota_replica_group_list
    iota.num_replica_groups, iota.num_devices_per_group = n_groups, size
    iota.iota_reshape_dims.extend(dims)
    iota.iota_transpose_perm.extend(perm)
    d.groups[name] = groups
    return f"replica_groups=[{n_groups},{size}]<=[{_ints(dims)}]" + \
        (f"T({_ints(perm)})" if perm != sorted(perm) else "")


def _draw(seed: int) -> tuple[HloModule, HloModule, _Drawn]:
    """A random module read from its proto and from its text."""
    rng = random.Random(seed)
    d = _Drawn(rng)
    for k in range(rng.randint(1, 4)):
        ip = d.add(f"p{k}", "parameter", [], "", parameter_number=k)
        text = _draw_sharding(d, ip)
        d.lines[-1] = d.lines[-1].replace("()", f"({k})") + (", " + text if text else "")
    for k in range(rng.randint(2, 6)):
        kind = rng.choice(("all-reduce", "all-gather", "reduce-scatter", "all-to-all"))
        channel = rng.choice((0, rng.randint(1, 1000)))
        global_ids = bool(channel) and kind != "all-to-all" and rng.random() < 0.5
        ip = d.add(f"c{k}", kind, ["p0"], "", channel_id=channel, use_global_device_ids=global_ids)
        attrs = [a for a in (f"channel_id={channel}" if channel else "", _draw_groups(d, ip, ip.name),
                             "use_global_device_ids=true" if global_ids else "") if a]
        d.lines[-1] += "".join(", " + a for a in attrs)
    for k in range(rng.randint(1, 3)):
        devices = rng.randint(2, 8)
        pairs = [(rng.randrange(devices), rng.randrange(devices)) for _ in range(rng.randint(0, devices))]
        channel = rng.randint(1, 1000)
        ip = d.add(f"cp{k}", "collective-permute", ["p0"],
                   f"channel_id={channel}, source_target_pairs=" + _groups_text(pairs), channel_id=channel)
        for s, t in pairs:
            ip.source_target_pairs.add(source=s, target=t)
        d.pairs[ip.name] = pairs
    for k in range(rng.randint(1, 3)):
        lc, rc, lb, rb = ([rng.randrange(2)] if rng.random() < 0.8 else [] for _ in range(4))
        ip = d.add(f"dot{k}", "dot", ["p0", "p0"],
                   f"lhs_batch_dims={{{_ints(lb)}}}, lhs_contracting_dims={{{_ints(lc)}}}, "
                   f"rhs_batch_dims={{{_ints(rb)}}}, rhs_contracting_dims={{{_ints(rc)}}}")
        n = ip.dot_dimension_numbers
        for field, values in (("lhs_contracting_dimensions", lc), ("rhs_contracting_dimensions", rc),
                              ("lhs_batch_dimensions", lb), ("rhs_batch_dimensions", rb)):
            getattr(n, field).extend(values)
        lhs, rhs, out = rng.choice(("bf", "fb")), rng.choice(("io", "oi")), rng.choice(("bf", "fb"))
        spatial = rng.random() < 0.3                       # a real convolution: no matmul
        labels = (f"{lhs}0_{rhs}0->{out}0" if spatial else f"{lhs}_{rhs}->{out}")
        ip = d.add(f"conv{k}", "convolution", ["p0", "p0"], f"dim_labels={labels}")
        c = ip.convolution_dimension_numbers
        c.input_batch_dimension, c.input_feature_dimension = lhs.index("b"), lhs.index("f")
        c.kernel_input_feature_dimension, c.kernel_output_feature_dimension = rhs.index("i"), rhs.index("o")
        c.output_batch_dimension, c.output_feature_dimension = out.index("b"), out.index("f")
        if spatial:
            c.input_spatial_dimensions.append(2)
            c.kernel_spatial_dimensions.append(2)
            c.output_spatial_dimensions.append(2)
    root = d.add("root", "tuple", ["p0"], "")
    d.lines[-1] = d.lines[-1].replace("%root = f32[4,4]{1,0}", "ROOT %root = (f32[4,4]{1,0})")
    root.shape.CopyFrom(message_class("ShapeProto")(element_type=13, tuple_shapes=[_shape([4, 4])]))
    module = message_class("HloModuleProto")(name="generated", entry_computation_name="main", id=1)
    module.computations.add(name="main", id=1, root_id=root.id).instructions.extend(d.protos)
    text = "HloModule generated\n\nENTRY %main {\n" + "\n".join(d.lines) + "\n}\n"
    return parse_hlo_proto(module.SerializeToString(), "generated"), parse_hlo_text(text), d


def _sites(module: HloModule) -> list[tuple]:
    return [(s.name, s.kind, s.mode, s.groups, s.pairs, s.note) for s in collective_sites(module)]


def _shardings(module: HloModule) -> list[tuple]:
    return [(s.name, s.dim_groups) for s in parameter_shardings(module)]


@pytest.mark.parametrize("seed", range(40))
def test_generated_views_equal_from_text_and_proto(seed):
    from_proto, from_text, drawn = _draw(seed)
    sites = _sites(from_proto)
    assert sites == _sites(from_text)
    assert {s[0]: s[3] for s in sites if s[4] is None} == drawn.groups   # the drawn groups, [] = every device
    assert {s[0]: s[4] for s in sites if s[4] is not None} == drawn.pairs
    assert {s[0]: s[2] for s in sites if s[0] in drawn.groups} == {
        i.name: ("cross-replica" if not i.channel_id else "cross-partition" if i.opcode == "all-to-all"
                 else "flattened-id" if i.use_global_device_ids else "cross-replica-and-partition")
        for i in drawn.protos if i.name in drawn.groups}
    shardings = _shardings(from_proto)
    assert shardings == _shardings(from_text)
    assert {name: groups for name, groups in shardings} == {n: g for n, g in drawn.tiles.items()}
    mesh = group_mesh(from_proto)
    assert (mesh.axes if mesh else None) == (mesh_t.axes if (mesh_t := group_mesh(from_text)) else None)
    assert (tuple(mesh.axes) if mesh else None) == (drawn.meshes[0] if drawn.meshes else None)
    assert list(dots(from_proto)) == list(dots(from_text))
    assert {dot.name for dot in dots(from_proto) if dot.name.startswith("conv")} == {
        i.name for i in drawn.protos if i.opcode == "convolution" and not i.convolution_dimension_numbers.input_spatial_dimensions}


def test_a_collective_without_a_group_list_runs_over_every_device():
    """The typed record reads a missing ``replica_groups`` as absent (None); this view reads it as every
    device, and an unreadable list as unknown, with a note."""
    text = ("HloModule m\n\nENTRY %main {\n  %p = f32[4]{0} parameter(0)\n"
            "  %a = f32[4]{0} all-reduce(%p), channel_id=1, use_global_device_ids=true\n"
            "  ROOT %b = f32[4]{0} all-reduce(%a), replica_groups=[3,3]<=[4]\n}\n")
    module = parse_hlo_text(text)
    by_name = {s.name: s for s in collective_sites(module)}
    assert module.computations["main"].by_name()["a"].typed.replica_groups is None
    assert (by_name["a"].groups, by_name["a"].mode, by_name["a"].note) == ([], "flattened-id", "")
    assert by_name["b"].groups is None and by_name["b"].note == "unreadable replica_groups '[3,3]<=[4]'"


def _text_twin(module: HloModule) -> HloModule:
    """The module with every instruction's typed attributes decoded from its attribute text instead."""
    twin = copy.deepcopy(module)
    for comp in twin.computations.values():
        for inst in comp.instructions:
            inst.typed = Attributes(inst.attributes, inst.backend_config)
    return twin


def _programs(module: HloModule):
    program = read_program(module)
    return [(p.number, p.role, p.output, p.aliased, p.writes) for p in program.parameters], program.paging


def test_sample_views_equal_from_the_proto_fields_and_from_their_text():
    protos = sorted((REPO / "sample_traces").glob("*/hlo/*.hlo.pb"))
    if not protos:
        pytest.skip("no sample HLO protos")
    seen = {"sites": 0, "shardings": 0, "dots": 0, "parameters": 0}
    for path in protos:
        module = parse_hlo_proto(path.read_bytes(), str(path))
        twin = _text_twin(module)
        sites = _sites(module)
        assert sites == _sites(twin), path.name
        assert _shardings(module) == _shardings(twin), path.name
        assert list(dots(module)) == list(dots(twin)), path.name
        assert _programs(module) == _programs(twin), path.name
        seen["sites"] += len(sites)
        seen["shardings"] += len(_shardings(module))
        seen["dots"] += len(list(dots(module)))
        seen["parameters"] += len(read_program(module).parameters)
    assert all(seen.values()), seen
