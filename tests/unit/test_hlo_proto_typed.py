"""Typed attributes decoded straight from an HloInstructionProto's fields equal those decoded from text.

Three references: the text dump XLA wrote of the same module (the samples' ``*.txt`` beside their
``*.hlo.pb``; the H200 captures' dumps beside the xplanes that carry the protos); the attribute text the
proto reader still writes for display, decoded by the text decoders (the route every proto took before
the typed values were read from the fields), for every HLO proto available; and generated instructions
whose dims, windows, groups and pairs are drawn at random, where the drawn values are the truth.
"""

from __future__ import annotations

import json
import lzma
import pickle
import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from traceview.cost.trip_count import _constant
from traceview.parsers.hlo.attributes import (
    NO_PRECISION,
    Attributes,
    ConvDims,
    Precision,
    WindowDim,
    input_output_alias,
)
from traceview.parsers.hlo.model import HloModule
from traceview.parsers.hlo.proto import modules_from_trace_protos, parse_hlo_proto
from traceview.parsers.hlo.schema import DOT_ALGORITHMS, PRECISION_NAMES, message_class
from traceview.parsers.hlo.sharding import Sharding
from traceview.parsers.hlo.text import read_hlo_text

REPO = Path(__file__).resolve().parents[2]
_DEFAULTS = Attributes({}, None).as_dict()


def _instructions(module: HloModule):
    for comp in module.computations.values():
        for inst in comp.instructions:
            yield comp.name, inst


def _text_route(inst) -> dict:
    """The typed values decoded from the attribute text the proto reader writes (the former route)."""
    return inst.text_attributes().as_dict()


def _sample_pairs():
    """(proto file, text dump of the same module) of every sample."""
    for proto in sorted((REPO / "sample_traces").glob("*/hlo/*.hlo.pb")):
        text = proto.with_name(proto.name[: -len(".hlo.pb")] + ".txt")
        if text.exists():
            yield proto, text


def _assert_same_as_text(proto_module: HloModule, text_module: HloModule, where: str) -> Counter:
    """Every instruction both modules name has equal typed attributes, and the modules equal donated
    outputs; the non-default fields seen."""
    seen: Counter = Counter()
    assert proto_module.aliases == text_module.aliases, where
    seen["aliases"] += len(proto_module.aliases)
    for comp_name, inst in _instructions(proto_module):
        comp = text_module.computations.get(comp_name)
        other = comp.by_name().get(inst.name) if comp is not None else None
        if other is None:  # text desugars async ops into computations of its own naming
            continue
        mine = inst.typed.as_dict()
        assert mine == other.typed.as_dict(), (where, comp_name, inst.name)
        seen.update(k for k, v in mine.items() if v != _DEFAULTS[k])
        seen["instructions"] += 1
    return seen


def test_samples_proto_equals_their_text_dump():
    pairs = list(_sample_pairs())
    if not pairs:
        pytest.skip("no sample HLO dumps")
    seen: Counter = Counter()
    for proto, text in pairs:
        seen += _assert_same_as_text(parse_hlo_proto(proto.read_bytes(), str(proto)), read_hlo_text(text), proto.name)
    assert seen["instructions"] > 5000
    for field in ("parameter_number", "index", "dimensions", "lhs_contracting_dims", "lhs_batch_dims", "calls",
                  "comparison_direction", "replica_groups", "channel_id", "frontend_attributes", "window",
                  "use_global_device_ids", "sharding", "integer_scalar", "aliases"):
        assert seen[field], field  # the comparison covered it


def test_h200_trace_protos_equal_the_dumps_beside_them(shared_traces):
    """The H200 captures carry each program's HloProto in the xplane and XLA's text dump beside it."""
    pairs = 0
    seen: Counter = Counter()
    for xplane in sorted((shared_traces / "h200").glob("*/plugins/profile/*/*.xplane.pb")):
        from traceview.parsers.xspace.reader import read_xplane

        modules, warnings = modules_from_trace_protos(read_xplane(xplane).hlo_protos, str(xplane))
        assert warnings == []
        dumps = xplane.parents[3] / "hlo"
        for module in modules:
            for text in dumps.glob(f"module_*.{module.name}.*_gpu_after_optimizations.txt"):
                seen += _assert_same_as_text(module, read_hlo_text(text), f"{xplane.parts[-5]}:{module.name}")
                pairs += 1
    assert pairs >= 5 and seen["instructions"] > 3000
    assert seen["backend_config"] and seen["calls"] and seen["lhs_contracting_dims"]
    assert seen["precision"] and seen["backend_precision"]  # dot algorithms, gemm configs' precision
    assert seen["integer_scalar"]  # loop counters' bounds and steps


def _every_proto(shared: Path | None):
    """(name, bytes) of every HLO proto available: the samples' files and the ones inside their xplanes;
    with the shared traces, their proto files, dumps and the protos inside every xplane."""
    from traceview.parsers.xspace.reader import read_xplane

    yield from ((str(p), p.read_bytes()) for p in sorted((REPO / "sample_traces").glob("*/hlo/*.hlo.pb")))
    xplanes = sorted((REPO / "sample_traces").glob("*/plugins/profile/*/*.xplane.pb"))
    if shared is not None:
        for p in sorted(shared.rglob("*.hlo.pb.xz")):
            yield str(p), lzma.decompress(p.read_bytes())
        yield from ((str(p), p.read_bytes()) for p in sorted(shared.rglob("*.hlo_proto.pb")))
        xplanes += sorted(shared.rglob("*.xplane.pb"))
    for xplane in xplanes:
        for key, data in read_xplane(xplane).hlo_protos.items():
            yield f"{xplane}:{key}", data


@pytest.mark.parametrize("with_shared", [False, True], ids=["samples", "shared"])
def test_every_proto_equals_its_attribute_text(with_shared, request):
    shared = request.getfixturevalue("shared_traces") if with_shared else None
    protos = instructions = scalars = 0
    for name, data in _every_proto(shared):
        module = parse_hlo_proto(data, name)
        protos += 1
        assert module.aliases == input_output_alias(module.attributes.get("input_output_alias")), name
        for comp_name, inst in _instructions(module):
            typed = inst.typed.as_dict()
            assert typed == _text_route(inst), (name, comp_name, inst.name)
            instructions += 1
            scalars += typed["integer_scalar"] is not None
    assert protos >= (400 if with_shared else 30) and instructions > (100_000 if with_shared else 10_000)
    assert scalars  # integer scalar constants were compared


# ---------------------------------------------------------------------------
# generated instructions

def _shape(dims: list[int]):
    return message_class("ShapeProto")(element_type=11, dimensions=dims)  # f32


def _window_dims(rng: random.Random, n: int) -> list[WindowDim]:
    return [WindowDim(rng.randint(1, 7), rng.randint(1, 4), rng.randint(-2, 3), rng.randint(-2, 3),
                      rng.choice((1, 1, 2, 3)), rng.choice((1, 1, 2))) for _ in range(n)]


def _set_window(window, dims: list[WindowDim]) -> None:
    for w in dims:
        window.dimensions.add(size=w.size, stride=w.stride, padding_low=w.pad_low, padding_high=w.pad_high,
                              base_dilation=w.lhs_dilate, window_dilation=w.rhs_dilate)


def _layout(rng: random.Random, n_spatial: int) -> tuple[int, int, tuple[int, ...]]:
    order = list(range(n_spatial + 2))
    rng.shuffle(order)
    return order[0], order[1], tuple(order[2:])


def _iota(rng: random.Random) -> tuple[list[int], list[int], list[list[int]], int, int]:
    """Random iota reshape dims and transpose, and the groups they mean (the definition, by numpy)."""
    dims = [rng.choice((1, 2, 3, 4)) for _ in range(rng.randint(1, 3))]
    perm = list(range(len(dims)))
    rng.shuffle(perm)
    total = int(np.prod(dims))
    size = rng.choice([d for d in range(1, total + 1) if total % d == 0])
    groups = np.arange(total).reshape(dims).transpose(perm).reshape(total // size, size).tolist()
    return dims, perm, groups, total // size, size


_SHARDING_KINDS = {"replicated": 0, "maximal": 1, "tuple": 2, "other": 3, "manual": 4}


def _sharding(rng: random.Random, sh) -> Sharding:
    """Fill the OpSharding ``sh`` at random; the sharding it means (tile devices by numpy)."""
    kind = rng.choice(("other", "other", "other", "replicated", "maximal", "tuple", "manual"))
    sh.type = _SHARDING_KINDS[kind]
    if kind == "maximal":
        device = rng.randrange(8)
        sh.tile_assignment_devices.append(device)
        return Sharding(kind, devices=(device,))
    if kind == "tuple":
        sh.tuple_shardings.add(type=0)
        return Sharding(kind)
    if kind != "other":
        return Sharding(kind)
    tiles = [rng.choice((1, 2, 4)) for _ in range(rng.randint(1, 4))]
    total = int(np.prod(tiles))
    sh.tile_assignment_dimensions.extend(tiles)
    if rng.random() < 0.5:                      # iota: a random factoring of the count, transposed
        dims = [total] if total == 1 or rng.random() < 0.3 else [2, total // 2]
        perm = list(range(len(dims)))
        rng.shuffle(perm)
        sh.iota_reshape_dims.extend(dims)
        sh.iota_transpose_perm.extend(perm)
        devices = tuple(np.arange(total).reshape(dims).transpose(perm).reshape(-1).tolist())
    else:
        devices = tuple(rng.sample(range(total + 3), total))
        sh.tile_assignment_devices.extend(devices)
    replicate = rng.random() < 0.3
    sh.replicate_on_last_tile_dim = replicate
    last = ("manual",) if not replicate and rng.random() < 0.2 else ()
    sh.last_tile_dims.extend(_SHARDING_KINDS[k] for k in last)
    return Sharding(kind, tuple(tiles), devices, replicate, last)


def _mesh_list(rng: random.Random, mesh_list) -> tuple[tuple, tuple, int]:
    """A random mesh-form device list (whole axes, over iota or over listed devices) in ``mesh_list``;
    its groups and mesh (by the definition: move the listed axes last and cut into rows) and size."""
    names = rng.sample(("data", "fsdp", "tp", "x"), rng.randint(1, 3))
    sizes = [rng.choice((1, 2, 3)) for _ in names]
    total = int(np.prod(sizes))
    chosen = sorted(rng.sample(range(len(names)), rng.randint(1, len(names))))
    for name, size in zip(names, sizes):
        mesh_list.mesh.axes.add(name=name, size=size)
    for i in chosen:
        mesh_list.axes.add(mesh_axis_index=i)
    ids = np.arange(total)
    if rng.random() < 0.3:                      # listed device ids: text spells out the groups
        ids = np.asarray(rng.sample(range(total), total))
        mesh_list.mesh.device_ids.extend(ids.tolist())
    other = [i for i in range(len(names)) if i not in chosen]
    size = int(np.prod([sizes[i] for i in chosen]))
    groups = ids.reshape(sizes).transpose(other + chosen).reshape(-1, size).tolist()
    mesh = () if mesh_list.mesh.device_ids else tuple(zip(names, sizes))
    return tuple(map(tuple, groups)), mesh, total


_PRECISIONS = {name: number for number, name in PRECISION_NAMES.items()}


def _gemm_config(rng: random.Random) -> tuple[dict, Precision]:
    """A gemm's backend config ({} for none), wrapped or flat, with or without a precision config, and
    the precision it carries."""
    form = rng.choice(("none", "wrapped", "flat", "no_precision"))
    if form == "none":
        return {}, NO_PRECISION
    gemm: dict = {"alpha_real": 1}
    want = NO_PRECISION
    if form != "no_precision":
        operands = [rng.choice(("DEFAULT", "HIGH", "HIGHEST")) for _ in range(rng.randint(0, 2))]
        algorithm = rng.choice(("ALG_UNSET", *("ALG_" + name.upper() for name in DOT_ALGORITHMS.values())))
        gemm["precision_config"] = {"operand_precision": operands, "algorithm": algorithm}
        if operands or algorithm != "ALG_UNSET":
            want = Precision(tuple(p.lower() for p in operands),
                             algorithm[len("ALG_"):].lower() if algorithm != "ALG_UNSET" else None)
    return ({"gemm_backend_config": gemm} if form == "wrapped" else gemm), want


def _generated(rng: random.Random):
    """A module of random instructions, and per instruction the typed values it must read as."""
    HloInstructionProto = message_class("HloInstructionProto")
    insts, want = [], {}
    next_id = iter(range(1, 10_000))

    def add(name: str, opcode: str, expect: dict, **fields):
        ip = HloInstructionProto(name=name, opcode=opcode, id=next(next_id), shape=_shape([4, 4]), **fields)
        insts.append(ip)
        want[name] = expect
        return ip

    n_params = rng.randint(1, 4)
    for k in range(n_params):
        ip = add(f"p{k}", "parameter", {"parameter_number": k}, parameter_number=k)
        if rng.random() < 0.7:
            want[ip.name]["sharding"] = _sharding(rng, ip.sharding)
    p0 = insts[0].id
    for k in range(rng.randint(1, 5)):
        n = rng.randint(1, 3)
        win = _window_dims(rng, n)
        lhs, rhs, out = _layout(rng, n), _layout(rng, n), _layout(rng, n)
        conv = ConvDims(lhs[0], lhs[1], lhs[2], rhs[0], rhs[1], rhs[2], out[0], out[1], out[2])
        fg, bg = rng.choice((1, 2, 4)), rng.choice((1, 1, 3))
        ip = add(f"conv{k}", "convolution", {"window": tuple(win), "conv_dims": conv, "feature_group_count": fg,
                                              "batch_group_count": bg},
                 operand_ids=[p0, p0], feature_group_count=fg, batch_group_count=bg)
        _set_window(ip.window, win)
        c = ip.convolution_dimension_numbers
        c.input_batch_dimension, c.input_feature_dimension = lhs[0], lhs[1]
        c.input_spatial_dimensions.extend(lhs[2])
        c.kernel_input_feature_dimension, c.kernel_output_feature_dimension = rhs[0], rhs[1]
        c.kernel_spatial_dimensions.extend(rhs[2])
        c.output_batch_dimension, c.output_feature_dimension = out[0], out[1]
        c.output_spatial_dimensions.extend(out[2])
        win = _window_dims(rng, rng.randint(1, 4))
        _set_window(add(f"rw{k}", "reduce-window", {"window": tuple(win)}, operand_ids=[p0]).window, win)
    for k in range(rng.randint(1, 4)):
        lc, rc = rng.sample(range(4), rng.randint(0, 2)), rng.sample(range(4), rng.randint(0, 2))
        lb, rb = rng.sample(range(4), rng.randint(0, 2)), rng.sample(range(4), rng.randint(0, 2))
        ip = add(f"dot{k}", "dot", {"lhs_contracting_dims": tuple(lc), "rhs_contracting_dims": tuple(rc),
                                    "lhs_batch_dims": tuple(lb), "rhs_batch_dims": tuple(rb)}, operand_ids=[p0, p0])
        d = ip.dot_dimension_numbers
        d.lhs_contracting_dimensions.extend(lc)
        d.rhs_contracting_dimensions.extend(rc)
        d.lhs_batch_dimensions.extend(lb)
        d.rhs_batch_dimensions.extend(rb)
        perm = rng.sample(range(5), rng.randint(1, 5))
        add(f"t{k}", rng.choice(("transpose", "broadcast", "reduce", "reverse")), {"dimensions": tuple(perm)},
            operand_ids=[p0], dimensions=perm)
        lengths = [rng.choice((8, 16, 64)) for _ in range(rng.randint(1, 3))]
        add(f"fft{k}", "fft", {"fft_length": tuple(lengths)}, operand_ids=[p0], fft_length=lengths, fft_type=2)
        index = rng.randint(0, 5)
        add(f"gte{k}", "get-tuple-element", {"index": index}, operand_ids=[p0], tuple_index=index)
    for k in range(rng.randint(2, 6)):
        form = rng.choice(("list", "iota", "iota_cdl", "mesh", "empty"))
        dims, perm, groups, n_groups, size = _iota(rng)
        channel = rng.choice((0, 0, rng.randint(1, 1 << 40)))
        global_ids = rng.random() < 0.5
        expect: dict[str, Any] = {"replica_groups": tuple(map(tuple, groups)) if form != "empty" else ()}
        if channel:
            expect["channel_id"] = channel
        if global_ids:
            expect["use_global_device_ids"] = True
        ip = add(f"ar{k}", rng.choice(("all-reduce", "all-gather", "reduce-scatter", "all-to-all")), expect,
                 operand_ids=[p0], channel_id=channel, use_global_device_ids=global_ids)
        if form == "mesh":
            expect["replica_groups"], mesh, _ = _mesh_list(rng, ip.mesh_axes_replica_group_list)
            if mesh:
                expect["replica_group_mesh"] = mesh
        elif form == "list":
            for g in groups:
                ip.replica_groups.add(replica_ids=g)
        elif form != "empty":
            iota = ip.iota_collective_device_list if form == "iota" else \
                ip.collective_device_list.iota_replica_group_list
            iota.num_replica_groups, iota.num_devices_per_group = n_groups, size
            iota.iota_reshape_dims.extend(dims)
            iota.iota_transpose_perm.extend(perm)
    for k in range(rng.randint(1, 4)):
        devices = rng.randint(2, 9)
        pairs = [(rng.randrange(devices), rng.randrange(devices)) for _ in range(rng.randint(1, devices))]
        frontend = {f"_k{j}.x": rng.choice(("true", "{{0,1},{1,2}}", 'say "hi"', "a\\b", "x,y", "line\nnext"))
                    for j in range(rng.randint(0, 3))}
        host = rng.random() < 0.3
        expect = {"source_target_pairs": tuple(pairs), "is_host_transfer": host, "channel_id": k + 1}
        if frontend:
            expect["frontend_attributes"] = frontend
        ip = add(f"cp{k}", rng.choice(("collective-permute", "send", "recv")), expect, operand_ids=[p0],
                 channel_id=k + 1, is_host_transfer=host)
        for s, t in pairs:
            ip.source_target_pairs.add(source=s, target=t)
        for key, value in frontend.items():
            ip.frontend_attributes.map[key] = value
    for k in range(rng.randint(1, 4)):  # precision configs: the op's own, and a library call's backend config
        operands = [rng.choice(tuple(_PRECISIONS)) for _ in range(rng.randint(0, 3))]
        algorithm = rng.choice((0, 0, *DOT_ALGORITHMS, 99))  # 99: a number XLA has no name for, not printed
        expect = {"lhs_contracting_dims": (1,), "rhs_contracting_dims": (0,)}
        if any(p != "default" for p in operands) or algorithm in DOT_ALGORITHMS:
            expect["precision"] = Precision(tuple(operands) if any(p != "default" for p in operands) else (),
                                            DOT_ALGORITHMS.get(algorithm))
        ip = add(f"pdot{k}", "dot", expect, operand_ids=[p0, p0])
        ip.dot_dimension_numbers.lhs_contracting_dimensions.append(1)
        ip.dot_dimension_numbers.rhs_contracting_dimensions.append(0)
        ip.precision_config.operand_precision.extend(_PRECISIONS[p] for p in operands)
        ip.precision_config.algorithm = algorithm
        config, library = _gemm_config(rng)
        expect = {"backend_config": config, "backend_precision": library} if config else {}
        add(f"gemm{k}", "custom-call", expect, operand_ids=[p0, p0], custom_call_target="__cublas$gemm",
            backend_config=json.dumps(config).encode() if config else b"")
        thread = rng.choice(("", "main", "sparsecore", "host"))
        add(f"start{k}", "async-start", {"async_execution_thread": thread} if thread not in ("", "main") else {},
            operand_ids=[p0], async_execution_thread=thread)
    for k in range(rng.randint(1, 3)):
        direction = rng.choice(("LT", "LE", "EQ", "NE", "GT", "GE"))
        add(f"cmp{k}", "compare", {"comparison_direction": direction}, operand_ids=[p0, p0],
            comparison_direction=direction)
        trips = rng.randint(0, 1 << 40)
        add(f"while{k}", "while", {"calls": {"condition": ("cond",), "body": ("body",)}, "known_trip_count": trips,
                                   "backend_config": {"known_trip_count": {"n": str(trips)}}},
            operand_ids=[p0], called_computation_ids=[2, 3],  # XLA lists the body first
            backend_config=f'{{"known_trip_count":{{"n":"{trips}"}}}}'.encode())
        add(f"reduce{k}", "reduce", {"calls": {"to_apply": ("body",)}, "dimensions": (1,)}, operand_ids=[p0, p0],
            called_computation_ids=[2], dimensions=[1])
    add("root", "tuple", {}, operand_ids=[p0])
    module = message_class("HloModuleProto")(name="generated", entry_computation_name="main", id=1)
    module.computations.add(name="main", id=1, root_id=insts[-1].id).instructions.extend(insts)
    aliases: dict[int, int] = {}
    for _ in range(rng.randint(0, 4)):   # donated outputs; a negative number or index is corrupt: left out
        output = [rng.randint(-1, 3)] + [rng.randint(-1, 2) for _ in range(rng.randint(0, 1))]
        number, inner = rng.randint(-1, n_params), [rng.randint(-1, 2) for _ in range(rng.randint(0, 1))]
        module.input_output_alias.entries.add(output_shape_index=output, parameter_number=number,
                                              parameter_shape_index=inner, kind=rng.choice((1, 2)))
        if min(output + inner + [number]) >= 0:
            aliases[output[0]] = number
    want[""] = aliases
    for cid, name in ((2, "body"), (3, "cond")):
        ip = HloInstructionProto(name=f"{name}.p", opcode="parameter", id=next(next_id), shape=_shape([]))
        module.computations.add(name=name, id=cid, root_id=ip.id).instructions.append(ip)
    return module.SerializeToString(), want


@pytest.mark.parametrize("seed", range(25))
def test_generated_instructions_round_trip(seed):
    """Random values set in the proto's fields come back as the typed values, and the text the reader
    writes for them decodes to the same."""
    data, want = _generated(random.Random(seed))
    module = parse_hlo_proto(data, f"generated-{seed}")
    insts = module.computations["main"].by_name()
    aliases = want.pop("")
    assert module.aliases == aliases == input_output_alias(module.attributes.get("input_output_alias"))
    assert set(want) == set(insts)
    for name, expect in want.items():
        inst = insts[name]
        typed = inst.typed.as_dict()
        assert typed == {**_DEFAULTS, **expect}, name
        assert typed == _text_route(inst), name
    # the while loop's called computations: condition, then body, in either form
    assert insts["while0"].called_computations == ["cond", "body"]
    # modules travel between processes: the records survive pickling
    copy = pickle.loads(pickle.dumps(module)).computations["main"].by_name()
    assert {n: copy[n].typed.as_dict() for n in want} == {n: insts[n].typed.as_dict() for n in want}


def test_absent_attributes_read_as_defaults_from_either_source():
    data, _ = _generated(random.Random(0))
    root = parse_hlo_proto(data, "generated").computations["main"].by_name()["root"]
    assert root.typed.as_dict() == _DEFAULTS == _text_route(root)
    assert set(_DEFAULTS) == set(Attributes.FIELDS)


# ---------------------------------------------------------------------------
# integer scalar constants (the trip count's counter bounds)

# integer element type -> (primitive type number, the LiteralProto array it is stored in, its numpy dtype when
# that array is bytes, bits, signed)
_INTEGER_TYPES = {"s8": (2, "s8s", "<i1", 8, True), "s16": (3, "s16s", "<i2", 16, True), "s32": (4, "s32s", None, 32, True),
                  "s64": (5, "s64s", None, 64, True), "u8": (6, "u8s", "<u1", 8, False),
                  "u16": (7, "u16s", "<u2", 16, False), "u32": (8, "u32s", None, 32, False),
                  "u64": (9, "u64s", None, 64, False)}
# float element type -> (primitive type number, array, numpy dtype when bytes): integral values print as
# integers (``f32[] constant(0)``) and must not read as integer constants
_FLOAT_TYPES = {"f32": (11, "f32s", None), "f64": (12, "f64s", None), "f16": (10, "f16s", "<f2"),
                "bf16": (16, "bf16s", "bf16")}


def _old_constant(inst) -> tuple | None:
    """The trip count's constant rule before the typed field, on the attribute text (the reference)."""
    if inst.shape.is_tuple or inst.shape.dims or inst.shape.element_type[:1] not in ("s", "u"):
        return None
    try:
        return ("const", int(inst.attributes.get("literal", "").strip()))
    except ValueError:
        return None


def _set_literal(lit, array: str, dtype: str | None, values: list) -> None:
    if dtype == "bf16":
        bits = np.asarray(values, np.float32).view(np.uint32) >> 16
        setattr(lit, array, bits.astype("<u2").tobytes())
    elif dtype is not None:
        setattr(lit, array, np.asarray(values, dtype).tobytes())
    else:
        getattr(lit, array).extend(values)


def _constants(rng: random.Random):
    """A module of random constants, as an HloModuleProto and as the text XLA prints; per constant the
    integer_scalar it must read as."""
    HloInstructionProto, ShapeProto = message_class("HloInstructionProto"), message_class("ShapeProto")
    insts, lines, want = [], [], {}
    for k in range(rng.randint(8, 20)):
        name, kind = f"c{k}", rng.choice(("int", "int", "int", "float", "vector", "pred", "empty"))
        if kind in ("int", "vector", "empty"):
            etype = rng.choice(tuple(_INTEGER_TYPES))
            number, array, dtype, bits, signed = _INTEGER_TYPES[etype]
            low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
            values: list = [rng.choice((low, high, 0, 1, -1 if signed else 2, rng.randint(low, high)))
                      for _ in range(1 if kind != "vector" else rng.randint(1, 4))]
        elif kind == "float":
            etype = rng.choice(tuple(_FLOAT_TYPES))
            number, array, dtype = _FLOAT_TYPES[etype]
            values = [float(rng.choice((0, 1, -2, 3, 64)))]
        else:
            etype, number, array, dtype, values = "pred", 1, "preds", None, [rng.random() < 0.5]
        dims = [len(values)] if kind == "vector" else []
        ip = HloInstructionProto(name=name, opcode="constant", id=k + 1,
                                 shape=ShapeProto(element_type=number, dimensions=dims))
        if kind != "empty":
            _set_literal(ip.literal, array, dtype, values)
        insts.append(ip)
        want[name] = values[0] if kind == "int" else None
        if kind == "empty":
            continue  # XLA prints no constant without its value
        printed = [("true" if v else "false") if kind == "pred" else str(int(v)) for v in values]
        literal = "{" + ", ".join(printed) + "}" if dims else printed[0]
        shape = f"{etype}[{len(values)}]" if dims else f"{etype}[]"
        lines.append(f"  %{name} = {shape} constant({literal})")
    root = HloInstructionProto(name="root", opcode="tuple", id=len(insts) + 1, shape=_shape([]),
                               operand_ids=[insts[0].id])
    module = message_class("HloModuleProto")(name="constants", entry_computation_name="main", id=1)
    module.computations.add(name="main", id=1, root_id=root.id).instructions.extend([*insts, root])
    first = lines[0].split(" = ")[0].strip().lstrip("%") if lines else None
    body = "\n".join(lines + ([f"  ROOT %root = ({lines[0].split(' = ')[1].split(' ')[0]}) tuple(%{first})"]
                              if first else []))
    text = f"HloModule constants\n\nENTRY %main () -> () {{\n{body}\n}}\n"
    return module.SerializeToString(), text, want


@pytest.mark.parametrize("seed", range(40))
def test_integer_scalar_constants_from_proto_equal_text_equal_drawn(seed, tmp_path):
    """An integer scalar constant's value reads as drawn (negatives and the type's bounds included) from
    the LiteralProto's arrays, from the text the proto reader writes, and from the text XLA prints; float
    constants that print as integers, vectors, preds and empty literals read as None. The trip count's
    constant reads the field, and agrees with its former rule on the attribute text."""
    data, text, want = _constants(random.Random(seed))
    insts = parse_hlo_proto(data, f"constants-{seed}").computations["main"].by_name()
    path = tmp_path / "constants.txt"
    path.write_text(text)
    printed = read_hlo_text(path).computations["main"].by_name()
    for name, value in want.items():
        inst = insts[name]
        assert inst.typed.integer_scalar == value == inst.text_attributes().integer_scalar, (name, text)
        assert inst.typed.as_dict() == _text_route(inst), name
        expect = ("const", value) if value is not None else None
        assert _constant(inst) == _old_constant(inst) == expect, name
        if name in printed:
            assert printed[name].typed.integer_scalar == value, (name, text)
            assert _constant(printed[name]) == _old_constant(printed[name]) == expect, name


def test_the_drawn_constants_cover_each_case():
    seen: Counter = Counter()
    for seed in range(40):
        _, text, want = _constants(random.Random(seed))
        for line in text.splitlines():
            if " constant(" in line:
                seen[line.split(" = ")[1].split("[")[0]] += 1
        seen.update("negative" for v in want.values() if v is not None and v < 0)
        seen.update("none" for v in want.values() if v is None)
    assert {*_INTEGER_TYPES, *_FLOAT_TYPES, "pred", "negative", "none"} <= set(seen)
