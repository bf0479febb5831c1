"""HLO text reader: real XLA output (CPU compiles, TPU v6e dumps), checked against XLA itself."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from traceview.errors import HloError, UserError
from traceview.parsers.hlo.proto import shape_to_text
from traceview.parsers.hlo.replica_groups import parse_replica_groups
from traceview.parsers.hlo.text import parse_hlo_text, read_hlo_text

TPU_FILES = ("reference_hlo_llama3_8b.txt", "reference_hlo_qwen3_1.7b.txt", "reference_hlo_deepseek3.txt")


def _kebab(opcode) -> str:
    """XLA's enum name (HloOpcode.kGetTupleElement) -> the text opcode (get-tuple-element)."""
    name = str(opcode).split(".")[-1][1:]
    special = {"TopK": "topk"}
    return special.get(name) or re.sub(r"(?<=[a-z0-9])([A-Z])", r"-\1", name).lower()


def _programs():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def matmul_tanh(x, w):
        return jnp.tanh(x @ w).sum()

    def loop_and_cond(x, k):
        y, _ = jax.lax.scan(lambda c, _: (c * 2.0 + 1.0, None), x, None, length=4)
        return jax.lax.cond(k > 0, lambda a: a * 2, lambda a: a - 1, y)

    def conv_gather_sort(x, idx):
        z = jax.lax.conv_general_dilated(x[None, None], jnp.ones((2, 1, 3, 3)), (2, 2), "SAME")
        return z.sum() + x[idx].sum() + jnp.sort(x, axis=0).sum() + jnp.zeros((32,)).at[idx].add(1.0).sum()

    x = jnp.ones((32, 32))
    return [(matmul_tanh, (x, jnp.ones((32, 16)))),
            (loop_and_cond, (x, 3)),
            (conv_gather_sort, (x, jnp.array([1, 3, 5])))]


@pytest.mark.parametrize("index", range(3))
def test_text_matches_xla_in_memory_module(index):
    """Names, opcodes, operands and shapes agree with XLA's own HloModule objects."""
    jax = pytest.importorskip("jax")
    fn, args = _programs()[index]
    compiled = jax.jit(fn).lower(*args).compile()
    module = parse_hlo_text(compiled.as_text(), f"{fn.__name__}.txt")
    reference = compiled.runtime_executable().hlo_modules()[0]
    assert module.name == reference.name
    assert module.warnings == []
    ref_comps = {c.name: c for c in reference.computations()}
    assert set(module.computations) == set(ref_comps)
    for name, comp in module.computations.items():
        ours = comp.by_name()
        ref_insts = ref_comps[name].instructions()
        assert set(ours) == {i.name for i in ref_insts}, name
        for ref in ref_insts:
            inst = ours[ref.name]
            assert inst.opcode == _kebab(ref.opcode), ref.name
            assert inst.operands == [o.name for o in ref.operands()], ref.name
            # XLA's one-line text of the instruction: "%name = SHAPE opcode(..."
            ref_text = ref.to_string()
            shape_text = ref_text.split(" = ", 1)[1].rsplit(f" {inst.opcode}(", 1)[0]
            assert shape_to_text(inst.shape) == shape_text, ref_text
    assert module.entry_computation() is not None and module.entry_computation().is_entry


def test_stack_frames_resolve_to_this_file():
    """stack_frame_id in metadata resolves, through the FileNames/StackFrames tables, to the
    Python line that made the op (found independently with inspect)."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def f(x):
        return jnp.sin(x) * 3.0  # the line looked up below

    text = jax.jit(f).lower(jnp.ones((8,))).compile().as_text()
    if "StackFrames" not in text:
        pytest.skip("this jax version prints no StackFrames table")
    module = parse_hlo_text(text)
    lines, start = inspect.getsourcelines(f)
    expected_line = start + next(i for i, line in enumerate(lines) if "jnp.sin" in line)
    sines = [i for c in module.computations.values() for i in c.instructions if i.opcode == "sine"]
    assert sines
    for inst in sines:
        assert "stack_frame_id" in inst.metadata
        assert inst.metadata["source_file"] == __file__
        assert int(inst.metadata["source_line"]) == expected_line
    assert __file__ in module.source_files


@pytest.mark.parametrize("name", TPU_FILES)
def test_truncated_tpu_dumps(shared_traces, name):
    path = shared_traces / "AI-Hypercomputer-maxtext" / name
    text = path.read_text()
    module = read_hlo_text(path)
    # independent count: instruction lines as the file spells them
    expected = len(re.findall(r"(?m)^\s+(?:ROOT )?%\S+ = ", text))
    assert sum(len(c.instructions) for c in module.computations.values()) == expected
    assert len(module.computations) == len(re.findall(r"(?m)^%\S+ .*\{$", text))
    assert module.entry is None
    joined = " ".join(module.warnings)
    assert "no ENTRY computation" in joined and "cut off" in joined
    assert module.name == "jit_train_step"
    assert module.attributes["is_scheduled"] == "true"
    # TPU layouts with tiling and memory space are kept verbatim
    layouts = {i.shape.layout for c in module.computations.values() for i in c.instructions}
    assert any(lay and ":T(8,128)" in lay for lay in layouts)
    assert any(lay and "S(1)" in lay for lay in layouts)
    # every closed computation's ROOT was found; every fusion calls a computation of the file
    for comp in list(module.computations.values())[:-1]:
        assert comp.root is not None, comp.name
    for comp in module.computations.values():
        for inst in comp.instructions:
            if inst.opcode == "fusion":
                assert inst.fusion_kind and inst.called_computations
            if inst.opcode in ("all-gather", "all-reduce", "reduce-scatter"):
                groups = parse_replica_groups(inst.attributes["replica_groups"])
                assert groups and all(len(g) == len(groups[0]) for g in groups)
                assert sorted(d for g in groups for d in g) == list(range(4))  # v6e-4


def test_deepseek_sparsecore_async(shared_traces):
    module = read_hlo_text(shared_traces / "AI-Hypercomputer-maxtext" / "reference_hlo_deepseek3.txt")
    sparse = [c for c in module.computations.values() if c.execution_thread == "sparsecore"]
    assert sparse
    starts = [i for c in module.computations.values() for i in c.instructions if i.opcode == "async-start"]
    on_sparsecore = [i for i in starts if i.attributes.get("async_execution_thread") == '"sparsecore"']
    assert on_sparsecore and len(on_sparsecore) < len(starts)  # the file also has main-thread async slices
    for inst in starts:
        assert inst.shape.is_tuple and inst.shape.tuple_shapes[0].is_tuple  # ((operands), result, context)
        (callee,) = inst.called_computations
        if inst in on_sparsecore:
            assert module.computations[callee].execution_thread == "sparsecore"
        else:
            assert module.computations[callee].execution_thread is None


def test_replica_group_forms_agree():
    """The iota and mesh forms XLA printed for the same groups give the same devices."""
    iota = parse_replica_groups("[4,2]<=[2,4]T(1,0)")
    mesh = parse_replica_groups("mesh['axis_0'=2,'axis_1'=4] {'axis_0'}")
    assert iota == mesh == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert parse_replica_groups("[2,4]<=[8]") == parse_replica_groups("mesh['a'=2,'b'=4] {'b'}")
    assert parse_replica_groups("{{0,1},{2,3}}") == [[0, 1], [2, 3]]
    assert parse_replica_groups("{}") == []


HEADER = "HloModule m, entry_computation_layout={(f32[4]{0})->f32[4]{0}}\n\n"


def test_syntax_not_in_the_real_files():
    """Syntax XLA prints that none of the real files happens to hold."""
    text = HEADER + """%cond (p: (s32[], f32[4])) -> pred[] {
  %p = (s32[], f32[4]{0}) parameter(0)
  ROOT %c = pred[] constant(true)
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0), sharding={devices=[2,2]<=[4] last_tile_dim_replicate}
  %tok = token[] after-all()
  %dyn = f32[<=4,2]{1,0} custom-call(%x, %tok), custom_call_target="MyKernel", backend_config={"a":{"b":[1,2]},"s":"x}, y=\\"{"}
  %nested = ((f32[4]{0}, /*index=1*/s32[]), token[]) custom-call(%x), custom_call_target="T"
  %ar = f32[4]{0} all-reduce(%x), channel_id=7, replica_groups=[2,2]<=[4], to_apply=%cond
  %cv = f32[1,4,4,2]{3,2,1,0} convolution(%x, %x), window={size=3x3 stride=2x2 pad=0_1x0_1}, dim_labels=b01f_01io->b01f
  ROOT %r = f32[4]{0} conditional(%x, %x, %x), branch_computations={%cond, %cond}
}
"""
    module = parse_hlo_text(text, "syntax.txt")
    entry = module.entry_computation().by_name()
    dyn = entry["dyn"]
    assert dyn.shape.dims == (4, 2) and dyn.shape.dynamic == (True, False)
    assert dyn.custom_call_target == "MyKernel"
    assert dyn.backend_config == '{"a":{"b":[1,2]},"s":"x}, y=\\"{"}'
    assert entry["tok"].shape.element_type == "token"
    nested = entry["nested"].shape
    assert nested.tuple_shapes[0].tuple_shapes[1].element_type == "s32"
    assert entry["ar"].attributes["replica_groups"] == "[2,2]<=[4]"
    assert entry["ar"].attributes["channel_id"] == "7"
    assert entry["cv"].attributes["window"] == "{size=3x3 stride=2x2 pad=0_1x0_1}"
    assert entry["r"].called_computations == ["cond", "cond"]
    assert entry["x"].attributes["sharding"] == "{devices=[2,2]<=[4] last_tile_dim_replicate}"
    assert module.entry_computation().root == "r"
    assert entry["cv"].line == 14


@pytest.mark.parametrize("body, line, words", [
    ("ENTRY %main () -> f32[] {\n  %a = f32[2 add(%b)\n}\n", 4, "bad shape"),
    ("ENTRY %main () -> f32[] {\n  %a = f32[] add(%b, %c)\n}\n", 4, "does not define"),
    ("this is not hlo\n", 3, "computation header"),
    ("ENTRY %main () -> f32[] {\n  %a = f32[] constant(1) junk\n  ROOT %b = f32[] negate(%a)\n}\n", 4,
     "expected ','"),
    (('ENTRY %main () -> f32[] {\n  %a = f32[] custom-call(), backend_config={"k":1\n'
      '  ROOT %b = f32[] negate(%a)\n}\n'), 4, "unbalanced"),
    ("ENTRY %main () -> f32[] {\n  ROOT %a = f32[] constant(1)\n}\n\nHloModule again\n", 7, "second"),
])
def test_malformed_text_names_file_and_line(body, line, words):
    with pytest.raises(HloError) as info:
        parse_hlo_text(HEADER + body, "bad.txt")
    assert str(info.value).startswith(f"bad.txt:{line}:")
    assert words in str(info.value)
    assert isinstance(info.value, UserError)


def test_instruction_split_over_lines():
    """A literal printed over several lines is one instruction, at its first line."""
    text = HEADER + """ENTRY %e () -> f32[2,2] {
  %k = f32[2,2]{1,0} constant({
    {1, 2},
    {3, 4} })
  ROOT %c = f32[2,2]{1,0} negate(%k)
}
"""
    entry = parse_hlo_text(text).entry_computation().by_name()
    assert entry["k"].attributes["literal"] == "{ {1, 2}, {3, 4} }" and entry["k"].line == 4
    assert entry["c"].operands == ["k"] and entry["c"].line == 7


def test_not_hlo_at_all():
    with pytest.raises(HloError, match="no 'HloModule' header"):
        parse_hlo_text("\n\n", "empty.txt")


def test_cut_anywhere_never_crashes(shared_traces, jax_hlo_dump):
    """A dump cut at any byte parses what is there and says so in a warning."""
    import random

    texts = [(shared_traces / "AI-Hypercomputer-maxtext" / "reference_hlo_deepseek3.txt").read_text()]
    texts += [p.read_text() for p in sorted((jax_hlo_dump / "dump").glob("*jit_ops*after_optimizations.txt"))]
    rng = random.Random(0)
    for text in texts:
        full = parse_hlo_text(text)
        for cut in sorted(rng.randrange(20, len(text)) for _ in range(150)):
            module = parse_hlo_text(text[:cut], "cut.txt")
            assert module.name == full.name
            if not text[:cut].rstrip().endswith("}"):
                assert module.warnings, cut
            # everything read before the cut is what the whole text holds
            for name, comp in module.computations.items():
                whole = full.computations[name].by_name()
                for inst in comp.instructions:
                    assert inst.opcode == whole[inst.name].opcode and inst.shape == whole[inst.name].shape


def test_async_sugar_becomes_the_proto_form():
    """Newer XLA prints an async pair wrapping one op as ``all-to-all-start``/``-done`` with the
    op's attributes inline; the reader rebuilds the async-start + wrapped computation form."""
    text = HEADER + """ENTRY %main (x: f32[4,8]) -> f32[4,8] {
  %x = f32[4,8]{1,0} parameter(0)
  %a2a-start = ((f32[4,8]{1,0}), f32[4,8]{1,0}) all-to-all-start(%x), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}, backend_config={"is_sync":false}
  ROOT %a2a-done = f32[4,8]{1,0} all-to-all-done(%a2a-start)
}
"""
    module = parse_hlo_text(text, "sugar.txt")
    entry = module.entry_computation().by_name()
    start, done = entry["a2a-start"], entry["a2a-done"]
    assert (start.opcode, done.opcode) == ("async-start", "async-done")
    assert start.backend_config == '{"is_sync":false}' and "replica_groups" not in start.attributes
    (callee,) = start.called_computations
    wrapped = module.computations[callee]
    op = wrapped.by_name()[wrapped.root]
    assert op.opcode == "all-to-all" and op.shape == parse_hlo_text(text).entry_computation().by_name()["x"].shape
    assert op.attributes == {"channel_id": "3", "replica_groups": "{{0,1,2,3}}", "dimensions": "{0}"}
    assert [i.opcode for i in wrapped.instructions] == ["parameter", "all-to-all"]
    assert op.operands == [wrapped.instructions[0].name]
    # native async opcodes stay as they are
    native = HEADER + """ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %s = (f32[4]{0}, f32[4]{0}) collective-permute-start(%x), source_target_pairs={{0,1},{1,0}}
  ROOT %d = f32[4]{0} collective-permute-done(%s)
}
"""
    ops = [i.opcode for i in parse_hlo_text(native).entry_computation().instructions]
    assert ops == ["parameter", "collective-permute-start", "collective-permute-done"]


def test_a_giant_source_file_name_is_cut_not_repeated_per_instruction(tmp_path):
    """A current GPU dump whose FileNames entry is 2 M characters: every instruction of the frame shares
    it, so printed whole it made a 608 MB hlo JSON; the name is cut in its middle instead."""
    import json as _json

    from traceview.api.hlo import hlo
    from traceview.parsers.hlo.model import MAX_SOURCE_NAME

    shared = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "h200" / "kernels" / "hlo"
    dumps = sorted(shared.glob("*jit_softmax*after_optimizations.txt"))
    if not dumps:
        pytest.skip(f"real GPU dumps not available in {shared}")
    text = dumps[0].read_text()
    match = re.search(r'^FileNames\n1 "([^"\n]*)"', text, flags=re.M)
    assert match, "the dump has a FileNames table"
    giant = "/" + "a" * 2_000_000 + "/model.py"
    path = tmp_path / dumps[0].name
    path.write_text(text[:match.start(1)] + giant + text[match.end(1):])
    module = parse_hlo_text(path.read_text(), str(path))
    assert module.source_files and all(len(f) <= MAX_SOURCE_NAME + 1 for f in module.source_files)
    assert module.source_files[0].endswith("/model.py")
    assert len(_json.dumps(hlo(path).to_json())) < 20 * path.stat().st_size
