"""HLO proto reader: real HloProto files, checked against a schema-free wire-format walk and
against the text form XLA dumped for the same module."""

from __future__ import annotations

import json
import lzma

import pytest

from traceview.errors import HloError
from traceview.parsers.hlo.proto import parse_hlo_proto, read_hlo_proto
from traceview.parsers.hlo.replica_groups import parse_replica_groups
from traceview.parsers.hlo.text import read_hlo_text

# ---------------------------------------------------------------------------
# A minimal protobuf wire-format reader/writer, independent of parsers/hlo/schema.py:
# field numbers from XLA's hlo.proto (HloProto.hlo_module=1, HloModuleProto.computations=3,
# HloComputationProto.instructions=2, HloInstructionProto.id=35).


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes):
    """(field number, wire type, value) for each field of one message."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + size], pos + size
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


def _raw_counts(data: bytes) -> dict[str, list[int]]:
    """Computation name -> instruction ids, read straight off the wire."""
    module = next(v for n, w, v in _fields(data) if n == 1 and w == 2)
    out: dict[str, list[int]] = {}
    for n, _w, comp in _fields(module):
        if n != 3:
            continue
        name = next(v for cn, cw, v in _fields(comp) if cn == 1).decode()
        ids = []
        for cn, _cw, inst in _fields(comp):
            if cn == 2:
                ids.append(next((v for fn, fw, v in _fields(inst) if fn == 35), 0))
        out[name] = ids
    return out


def _key(number: int, wire: int) -> bytes:
    return _enc_varint(number << 3 | wire)


def _enc_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _msg(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _enc_varint(len(payload)) + payload


def _int(number: int, value: int) -> bytes:
    return _key(number, 0) + _enc_varint(value)


# ---------------------------------------------------------------------------

def _real_protos(shared):
    files = sorted((shared / "AMD-AGI-TraceLens" / "jax_conv_minimal_legacy").glob("*.hlo_proto.pb"))
    files += sorted((shared / "NVIDIA-JAX-Toolbox").glob("*/dump/*.hlo.pb.xz"))
    return files


def test_every_real_proto_against_the_wire(shared_traces):
    files = _real_protos(shared_traces)
    assert len(files) == 12  # 8 profiler protos + H100 and A100 dumps, both stages
    for path in files:
        data = path.read_bytes()
        if path.suffix == ".xz":
            data = lzma.decompress(data)
        raw = _raw_counts(data)
        module = read_hlo_proto(path)
        assert module.warnings == [], path
        assert list(module.computations) == list(raw), path
        for name, comp in module.computations.items():
            assert sorted(i.id for i in comp.instructions) == sorted(raw[name]), (path, name)
            names = {i.name for i in comp.instructions}
            assert comp.root in names
            for inst in comp.instructions:
                assert set(inst.operands) <= names
                assert all(c in module.computations for c in inst.called_computations)
        assert module.entry_computation() is not None and module.entry_computation().is_entry


def test_stack_frame_table_agrees_with_inline_source(shared_traces):
    """The dumps carry both metadata.source_file/line and stack_frame_id: decoding the
    StackFrameIndex must land on the same file and line."""
    module = read_hlo_proto(next((shared_traces / "NVIDIA-JAX-Toolbox").glob(
        "maxtext*/dump/*after_optimizations.hlo.pb.xz")))
    checked = 0
    for comp in module.computations.values():
        for inst in comp.instructions:
            md = inst.metadata
            if "stack_frame_id" in md and "source_file" in md:
                file, line, _ = module.stack_frames[int(md["stack_frame_id"])]
                assert (file, line) == (md["source_file"], int(md["source_line"])), inst.name
                checked += 1
    assert checked > 1000


def test_h100_collectives_and_gemms(shared_traces):
    """FSDP over 4 H100s: every collective groups the 4 devices; cuBLAS GEMMs carry JSON configs."""
    module = read_hlo_proto(next((shared_traces / "NVIDIA-JAX-Toolbox").glob(
        "maxtext*/dump/*after_optimizations.hlo.pb.xz")))
    insts = [i for c in module.computations.values() for i in c.instructions]
    collectives = [i for i in insts if "replica_groups" in i.attributes]
    assert {i.opcode for i in collectives} >= {"all-gather-start", "all-reduce-start", "reduce-scatter"}
    for inst in collectives:
        assert parse_replica_groups(inst.attributes["replica_groups"]) == [[0, 1, 2, 3]], inst.name
    gemms = [i for i in insts if i.custom_call_target == "__cublas$gemm"]
    assert gemms
    for inst in gemms:
        assert "gemm_backend_config" in json.loads(inst.backend_config)
    loops = [i for i in insts if i.opcode == "while"]
    assert loops and all(json.loads(i.backend_config)["known_trip_count"]["n"] for i in loops)
    assert all(len(i.called_computations) == 2 for i in loops)


def test_proto_equals_text_of_the_same_module(jax_hlo_dump):
    """XLA dumped each module as text and as proto: both readers must agree on everything."""
    texts = sorted((jax_hlo_dump / "dump").glob("*_optimizations.txt"))
    assert len(texts) >= 4
    seen_forms = set()
    for text_path in texts:
        t = read_hlo_text(text_path)
        p = read_hlo_proto(text_path.with_name(text_path.name[:-4] + ".hlo.pb"))
        assert (t.name, t.entry, set(t.computations)) == (p.name, p.entry, set(p.computations))
        assert t.stack_frames == p.stack_frames
        assert t.attributes["entry_computation_layout"] == p.attributes["entry_computation_layout"]
        for name, ct in t.computations.items():
            cp = p.computations[name]
            assert (ct.root, ct.is_entry) == (cp.root, cp.is_entry)
            assert [i.name for i in ct.instructions] == [i.name for i in cp.instructions], name
            for it, ip in zip(ct.instructions, cp.instructions):
                for field in ("opcode", "shape", "operands", "attributes", "called_computations",
                              "metadata", "backend_config", "custom_call_target", "fusion_kind"):
                    assert getattr(it, field) == getattr(ip, field), (text_path.name, it.name, field)
                # typed values: decoded from the text by one reader, from the proto's fields by the other
                assert it.typed.as_dict() == ip.typed.as_dict(), (text_path.name, it.name)
                groups = it.attributes.get("replica_groups", "")
                seen_forms.add("mesh" if groups.startswith("mesh") else "iota" if "<=" in groups
                               else "list" if groups else None)
    assert {"mesh", "iota", "list"} <= seen_forms  # the dump exercises every replica-group form


def test_ids_above_2_31():
    """Instruction and computation ids are int64: build an HloProto by hand, off the wire."""
    big = 2**40 + 5
    shape = _int(2, 11) + _int(3, 4)                           # f32[4]
    p0 = _msg(1, b"x") + _msg(2, b"parameter") + _msg(3, shape) + _int(35, big)
    neg = (_msg(1, b"y") + _msg(2, b"negate") + _msg(3, shape) + _int(35, big + 1)
           + _int(36, big))                                     # operand_ids
    comp = (_msg(1, b"main") + _msg(2, p0) + _msg(2, neg) + _int(5, 2**33) + _int(6, big + 1))
    module = _msg(1, b"handmade") + _msg(2, b"main") + _msg(3, comp) + _int(6, 2**33)
    m = parse_hlo_proto(_msg(1, module), "handmade.pb")
    entry = m.entry_computation()
    assert entry.root == "y"
    y = entry.by_name()["y"]
    assert y.id == big + 1 and y.operands == ["x"]
    assert y.shape.element_type == "f32" and y.shape.dims == (4,)
    # the same module without the HloProto wrapper (HloModuleProto bytes)
    assert parse_hlo_proto(module, "bare.pb").entry_computation().by_name()["y"].operands == ["x"]


@pytest.mark.parametrize("data", [b"\xff\xff\xff\xff", b"", _msg(1, b"\x08")])
def test_corrupt_proto_is_a_user_error(data):
    with pytest.raises(HloError, match="^broken.pb: "):
        parse_hlo_proto(data, "broken.pb")


def test_dangling_operand_names_the_instruction():
    shape = _int(2, 11)
    inst = _msg(1, b"y") + _msg(2, b"negate") + _msg(3, shape) + _int(35, 2) + _int(36, 99)
    comp = _msg(1, b"main") + _msg(2, inst) + _int(6, 2)
    with pytest.raises(HloError, match="'y'.*99"):
        parse_hlo_proto(_msg(1, _msg(1, b"m") + _msg(2, b"main") + _msg(3, comp)), "dangling.pb")


def test_trace_protos_equal_the_files_beside_the_trace(shared_traces):
    """The legacy MI300X run holds each module twice: in the xplane's /host:metadata plane and
    as a ``name(id).hlo_proto.pb`` file. Both must give the same modules."""
    from traceview.parsers.hlo.dump import load_hlo_modules
    from traceview.parsers.hlo.proto import modules_from_trace_protos
    from traceview.parsers.xspace.reader import read_xplane

    folder = shared_traces / "AMD-AGI-TraceLens" / "jax_conv_minimal_legacy"
    trace = read_xplane(next(folder.glob("*.xplane.pb")))
    from_trace, warnings = modules_from_trace_protos(trace.hlo_protos, "legacy")
    from_files, _ = load_hlo_modules(folder)
    assert warnings == []
    assert sorted(m.program_id for m in from_trace) == sorted(m.program_id for m in from_files)
    files = {m.program_id: m for m in from_files}
    for m in from_trace:
        f = files[m.program_id]
        assert m.name == f.name
        assert {c: [(i.name, i.opcode, i.shape) for i in comp.instructions] for c, comp in m.computations.items()} \
            == {c: [(i.name, i.opcode, i.shape) for i in comp.instructions] for c, comp in f.computations.items()}


def test_tpu_trace_protos_keep_64_bit_program_ids(shared_traces):
    from traceview.parsers.hlo.proto import modules_from_trace_protos
    from traceview.parsers.xspace.reader import read_xplane

    trace = read_xplane(shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb")
    modules, warnings = modules_from_trace_protos(trace.hlo_protos)
    assert warnings == [] and len(modules) == len(trace.hlo_protos) == 4
    for key, m in zip(trace.hlo_protos, modules):
        assert key == f"{m.name}({m.program_id})"
    assert any(m.program_id > 2**63 for m in modules)  # fingerprints use the whole uint64 range
    broken, warnings = modules_from_trace_protos({"jit_x(1)": b"\xff\xff"}, "t.xplane.pb")
    assert broken == [] and warnings and warnings[0].startswith("t.xplane.pb: HLO proto jit_x(1)")


def test_unknown_element_type_is_a_warning():
    shape = _int(2, 99) + _int(3, 4)  # a PrimitiveType number no XLA had when this was written
    inst = _msg(1, b"x") + _msg(2, b"parameter") + _msg(3, shape) + _int(35, 1)
    comp = _msg(1, b"main") + _msg(2, inst) + _int(6, 1)
    m = parse_hlo_proto(_msg(1, _msg(1, b"m") + _msg(2, b"main") + _msg(3, comp)), "new.pb")
    assert m.entry_computation().instructions[0].shape.element_type == "unknown_type_99"
    assert len(m.warnings) == 1 and "'x'" in m.warnings[0]


def _xla_hlo_module_class():
    """jaxlib's binding of XLA's HloModule (private module; the test skips without it)."""
    for mod in ("jaxlib._hlo", "jax._src.lib"):
        try:
            module = __import__(mod, fromlist=["HloModule"])
        except ImportError:
            continue
        cls = getattr(module, "HloModule", None)
        if cls is not None and hasattr(cls, "from_serialized_hlo_module_proto"):
            return cls
    pytest.skip("this jaxlib exposes no HloModule.from_serialized_hlo_module_proto")


def _proto_and_xla_text(path):
    data = path.read_bytes()
    if path.suffix == ".xz":
        data = lzma.decompress(data)
    module_bytes = next(v for n, w, v in _fields(data) if n == 1 and w == 2)  # HloProto.hlo_module
    text = _xla_hlo_module_class().from_serialized_hlo_module_proto(module_bytes).to_string()
    return data, text


def _xla_reprinted_files(shared):
    files = sorted((shared / "AMD-AGI-TraceLens" / "jax_conv_minimal_legacy").glob("*.hlo_proto.pb"))
    return files + sorted((shared / "NVIDIA-JAX-Toolbox").glob("maxtext*/dump/*.hlo.pb.xz"))


def _assert_same(inst, other, rename, where, operands=True):
    assert (inst.opcode, inst.shape, inst.custom_call_target, inst.fusion_kind) == \
        (other.opcode, other.shape, other.custom_call_target, other.fusion_kind), where
    if operands:
        assert inst.operands == other.operands, where
    assert [rename.get(c, c) for c in inst.called_computations] == other.called_computations, where
    skip = ("metadata", "backend_config", "calls")
    assert {k: v for k, v in inst.attributes.items() if k not in skip} == \
        {k: v for k, v in other.attributes.items() if k not in skip}, where
    for key in ("op_name", "source_file", "source_line"):
        assert inst.metadata.get(key) == other.metadata.get(key), where
    if inst.backend_config and other.backend_config and inst.backend_config.startswith("{"):
        a, b = json.loads(inst.backend_config), json.loads(other.backend_config)
        assert {k: v for k, v in a.items() if k in b} == {k: v for k, v in b.items() if k in a}, where


def test_proto_reader_equals_xla_reprinting_the_proto(shared_traces):
    """XLA itself (jaxlib) loads each real proto and prints it as text; our text reader on that
    text and our proto reader on the bytes must give the same module. XLA renumbers stack
    frames and rewrites backend configs on load, so those are compared by meaning; the async
    ops newer XLA prints as ``reduce-scatter-start`` sugar are matched through their callee."""
    from traceview.parsers.hlo.text import parse_hlo_text

    files = _xla_reprinted_files(shared_traces)
    assert len(files) == 10
    desugared = 0
    for path in files:
        data, text = _proto_and_xla_text(path)
        ours = parse_hlo_proto(data, path.name)
        xla = parse_hlo_text(text, f"xla:{path.name}")
        assert xla.warnings == [] and (xla.name, xla.entry) == (ours.name, ours.entry)
        assert xla.attributes["entry_computation_layout"] == ours.attributes["entry_computation_layout"]
        rename = {}  # our text reader's names for desugared async computations -> the proto's
        for comp in xla.computations.values():
            for inst in comp.instructions:
                if inst.opcode == "async-start" and inst.called_computations[0] not in ours.computations:
                    theirs = ours.computations[comp.name].by_name()[inst.name]
                    rename[inst.called_computations[0]] = theirs.called_computations[0]
        desugared += len(rename)
        assert {rename.get(c, c) for c in xla.computations} == set(ours.computations), path.name
        for name, comp in xla.computations.items():
            mine = ours.computations[rename.get(name, name)]
            if name in rename:  # wrapped op and parameters: names are made up, structure is not
                root, other_root = comp.by_name()[comp.root], mine.by_name()[mine.root]
                _assert_same(root, other_root, rename, (path.name, name), operands=False)
                params = sorted((int(i.attributes["parameter_number"]), i.shape)
                                for i in comp.instructions if i.opcode == "parameter")
                assert params == sorted((int(i.attributes["parameter_number"]), i.shape)
                                        for i in mine.instructions if i.opcode == "parameter")
                continue
            assert [i.name for i in comp.instructions] == [i.name for i in mine.instructions]
            for inst, other in zip(comp.instructions, mine.instructions):
                _assert_same(inst, other, rename, (path.name, name, inst.name))
    assert desugared == 7  # the H100 module's reduce-scatter / all-to-all async pairs
