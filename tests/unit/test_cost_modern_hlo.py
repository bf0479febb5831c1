"""Issue 12: modern XLA programs costed right.

Async wrappers on the SparseCore thread, counted loops without ``known_trip_count``
(up and down), HLO text with comments or without its header, Pallas kernels with
and without a cost estimate, and dump folders holding files that are not HLO.
Every figure is a hand calculation written out here, XLA's own annotation or
``compiled.cost_analysis()``; where traceview deliberately differs from XLA it says so.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from traceview.cost import instruction_costs, module_totals
from traceview.cost.trip_count import solve
from traceview.parsers.hlo.dump import load_hlo_modules
from traceview.parsers.hlo.syntax import strip_comments
from traceview.parsers.hlo.text import parse_hlo_text


def _row(df, name):
    rows = df[df["name"] == name]
    assert len(rows) == 1, f"{name}: {len(rows)} rows"
    return rows.iloc[0]


# ---------------------------------------------------------------------------------------------
# async wrappers on the SparseCore

# An FSDP step as XLA schedules it for a TPU with SparseCore offload: the all-gather sits in a
# computation called from the async computation (the form the MaxText reference HLO shows for
# SparseCore work), the reduce-scatter is the async computation's root, and one pair has an
# async-update between start and done.
SPARSECORE = """HloModule fsdp_step, is_scheduled=true, num_partitions=4

%ag_body (p0: bf16[1024,256]) -> bf16[4096,256] {
  %p0 = bf16[1024,256]{1,0} parameter(0)
  ROOT %ag = bf16[4096,256]{1,0} all-gather(%p0), channel_id=1, replica_groups=[1,4]<=[4], dimensions={0}, use_global_device_ids=true
}, execution_thread="sparsecore"

%ag_async (p: bf16[1024,256]) -> bf16[4096,256] {
  %p = bf16[1024,256]{1,0} parameter(0)
  ROOT %c = bf16[4096,256]{1,0} call(%p), to_apply=%ag_body
}, execution_thread="sparsecore"

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}, execution_thread="sparsecore"

%rs_async (q: f32[4096,256]) -> f32[1024,256] {
  %q = f32[4096,256]{1,0} parameter(0)
  ROOT %rs = f32[1024,256]{1,0} reduce-scatter(%q), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=%add
}, execution_thread="sparsecore"

ENTRY %main (w: bf16[1024,256], g: f32[4096,256]) -> (bf16[4096,256], f32[1024,256]) {
  %w = bf16[1024,256]{1,0} parameter(0)
  %g = f32[4096,256]{1,0} parameter(1)
  %ag-start = ((bf16[1024,256]{1,0}), bf16[4096,256]{1,0}, u32[]) async-start(%w), async_execution_thread="sparsecore", calls=%ag_async
  %ag-done = bf16[4096,256]{1,0} async-done(%ag-start)
  %rs-start = ((f32[4096,256]{1,0}), f32[1024,256]{1,0}) async-start(%g), async_execution_thread="sparsecore", calls=%rs_async
  %rs-update = ((f32[4096,256]{1,0}), f32[1024,256]{1,0}) async-update(%rs-start)
  %rs-done = f32[1024,256]{1,0} async-done(%rs-update)
  ROOT %t = (bf16[4096,256]{1,0}, f32[1024,256]{1,0}) tuple(%ag-done, %rs-done)
}
"""


def test_sparsecore_async_collectives_are_collectives():
    df = instruction_costs(parse_hlo_text(SPARSECORE))
    ag, rs = _row(df, "ag-start"), _row(df, "rs-start")
    # all-gather payload = the gathered result, bf16[4096,256] = 4096*256*2 B; 4 devices from [1,4]<=[4]
    assert (ag["collective_kind"], ag["payload_bytes"], ag["group_size"]) == ("all-gather", 4096 * 256 * 2, 4)
    assert ag["groups"] == [[0, 1, 2, 3]] and ag["category"] == "all-gather"
    # bytes as XLA counts the wrapped op: operand bf16[1024,256] + result bf16[4096,256]
    assert ag["bytes_accessed"] == 1024 * 256 * 2 + 4096 * 256 * 2
    # reduce-scatter payload = its full operand, f32[4096,256]; group from replica_groups={{0,1,2,3}}
    assert (rs["collective_kind"], rs["payload_bytes"], rs["group_size"]) == ("reduce-scatter", 4096 * 256 * 4, 4)
    assert ag["execution_thread"] == rs["execution_thread"] == "sparsecore"
    # the -update / -done halves name the kind but carry no payload, so nothing is counted twice
    for name, kind in (("ag-done", "all-gather"), ("rs-update", "reduce-scatter"), ("rs-done", "reduce-scatter")):
        row = _row(df, name)
        assert (row["collective_kind"], row["payload_bytes"], row["execution_thread"]) == (kind, 0, "sparsecore")
    assert df["payload_bytes"].sum() == 4096 * 256 * 2 + 4096 * 256 * 4
    assert _row(df, "t")["execution_thread"] == ""


SPARSECORE_SUGAR = """HloModule fsdp_sugar, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (w: bf16[1024,256], g: f32[4096,256]) -> (bf16[4096,256], f32[1024,256]) {
  %w = bf16[1024,256]{1,0} parameter(0)
  %g = f32[4096,256]{1,0} parameter(1)
  %ags = (bf16[1024,256]{1,0}, bf16[4096,256]{1,0}) all-gather-start(%w), async_execution_thread="sparsecore", channel_id=1, replica_groups=[1,4]<=[4], dimensions={0}, use_global_device_ids=true
  %agd = bf16[4096,256]{1,0} all-gather-done(%ags)
  %rss = ((f32[4096,256]{1,0}), f32[1024,256]{1,0}) reduce-scatter-start(%g), async_execution_thread="sparsecore", channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=%add
  %rsd = f32[1024,256]{1,0} reduce-scatter-done(%rss)
  ROOT %t = (bf16[4096,256]{1,0}, f32[1024,256]{1,0}) tuple(%agd, %rsd)
}
"""


def test_sparsecore_collectives_in_sugar_form():
    """The same step printed with XLA's async syntax sugar (``all-gather-start`` natively,
    ``reduce-scatter-start`` as sugar for an async-start wrapping the reduce-scatter)."""
    df = instruction_costs(parse_hlo_text(SPARSECORE_SUGAR))
    ag, rs = _row(df, "ags"), _row(df, "rss")
    assert (ag["collective_kind"], ag["payload_bytes"], ag["group_size"]) == ("all-gather", 4096 * 256 * 2, 4)
    assert (rs["collective_kind"], rs["payload_bytes"], rs["group_size"]) == ("reduce-scatter", 4096 * 256 * 4, 4)
    assert ag["execution_thread"] == rs["execution_thread"] == "sparsecore"
    assert df["payload_bytes"].sum() == 4096 * 256 * 2 + 4096 * 256 * 4


def test_async_pairs_through_updates():
    """The timeline judges an async op by its start-to-done time: a done reached through an
    async-update still pairs with its start."""
    from traceview.timeline.async_ops import async_pairs

    pairs = async_pairs([parse_hlo_text(SPARSECORE)])
    assert sorted(map(tuple, pairs[["start", "done"]].to_numpy())) == [("ag-start", "ag-done"), ("rs-start", "rs-done")]


def test_deepseek3_reference_sparsecore_and_kernels(shared_traces):
    """MaxText DeepSeek3 for TPU v6e (truncated at 2000 lines): SparseCore async work, a splash
    attention Pallas kernel without cost estimate, and plain all-gathers."""
    path = shared_traces / "AI-Hypercomputer-maxtext" / "reference_hlo_deepseek3.txt"
    text = path.read_text()
    (module,), _ = load_hlo_modules(path)
    df = instruction_costs(module)
    # The SparseCore copy offload (async-start -> call -> copy of s32[256]) runs on the sparsecore thread
    # and costs what the copy moves: 1024 B read, 1024 B written.
    sc = _row(df, "copy.2047.cloned.1.call-start")
    assert sc["execution_thread"] == "sparsecore" and sc["collective_kind"] == ""
    assert (sc["bytes_read"], sc["bytes_written"]) == (256 * 4, 256 * 4)
    # The splash attention kernel: no cost_estimate in its backend_config, so its operand and result
    # bytes are a lower bound and its FLOPs are unknown. Hand sizes from the text's shapes.
    splash = _row(df, "splash_mha_fwd_segmented_residuals.6")
    assert splash["cost_lower_bound"] and not splash["unknown"] and np.isnan(splash["flops"])
    result = 3 * 128 * 128 * 4 + 128 * 128 * 128 * 2 + 128 * 128 * 128 * 4   # 3 x f32[128,128], bf16 and f32 cubes
    assert splash["bytes_written"] == result and splash["bytes_read"] > 0
    warning = next(w for w in df.attrs["warnings"] if "no cost estimate" in w)
    assert "splash_mha_fwd_segmented_residuals.6" in warning and "tpu_custom_call" in warning
    # Collective bytes: the ten synchronous all-gathers, each its bf16 result (payload = gathered array).
    sizes = [2 * eval("*".join(dims.split(","))) for dims in
             re.findall(r"= bf16\[([\d,]+)\]\{[^}]*\} all-gather\(", text)]
    assert len(sizes) == 10
    assert df.loc[df["collective_kind"] == "all-gather", "payload_bytes"].sum() == sum(sizes)


# ---------------------------------------------------------------------------------------------
# loop trip counts

def _loop(init: int, update: str, step: int, compare: str, bound: int, known: str = "") -> str:
    return f"""HloModule loop

%body (p: (s32[], f32[64,64])) -> (s32[], f32[64,64]) {{
  %p = (s32[], f32[64,64]{{1,0}}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[64,64]{{1,0}} get-tuple-element(%p), index=1
  %k = s32[] constant({step})
  %next = s32[] {update}
  %y = f32[64,64]{{1,0}} dot(%x, %x), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT %r = (s32[], f32[64,64]{{1,0}}) tuple(%next, %y)
}}

%cond (c: (s32[], f32[64,64])) -> pred[] {{
  %c = (s32[], f32[64,64]{{1,0}}) parameter(0)
  %j = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant({bound})
  ROOT %lt = pred[] {compare}
}}

ENTRY %main (x0: f32[64,64]) -> f32[64,64] {{
  %x0 = f32[64,64]{{1,0}} parameter(0)
  %zero = s32[] constant({init})
  %t = (s32[], f32[64,64]{{1,0}}) tuple(%zero, %x0)
  %layers = (s32[], f32[64,64]{{1,0}}) while(%t), condition=%cond, body=%body{known}
  ROOT %out = f32[64,64]{{1,0}} get-tuple-element(%layers), index=1
}}
"""


LAYER = 2 * 64 * 64 * 64 + 2   # one layer: the matmul, plus the counter's add and the condition's compare


@pytest.mark.parametrize("init, update, step, compare, bound, trips", [
    # the 32-layer scan of the issue: i = 0; i < 32; i += 1
    (0, "add(%i, %k)", 1, "compare(%j, %n), direction=LT", 32, 32),
    # the constant first: 32 > i
    (0, "add(%k, %i)", 1, "compare(%n, %j), direction=GT", 32, 32),
    # counting down: i = 32; i > 0; i -= 1, and i = 31; i >= 0; i += -1
    (32, "subtract(%i, %k)", 1, "compare(%j, %n), direction=GT", 0, 32),
    (31, "add(%i, %k)", -1, "compare(%j, %n), direction=GE", 0, 32),
    # strides: i = 0; i <= 30; i += 3 -> 0, 3, ..., 30
    (0, "add(%i, %k)", 3, "compare(%j, %n), direction=LE", 30, 11),
    (0, "add(%i, %k)", 4, "compare(%j, %n), direction=NE", 32, 8),
])
def test_counted_loops_need_no_known_trip_count(init, update, step, compare, bound, trips):
    module = parse_hlo_text(_loop(init, update, step, compare, bound))
    df = instruction_costs(module)
    assert _row(df, "layers")["trip_count"] == trips
    assert not any("trip count" in w for w in df.attrs["warnings"])
    assert (df.loc[df["computation"] == "body", "multiplier"] == trips).all()
    totals = module_totals(module)
    # XLA's HloCostAnalysis counts a while body once; per step it runs `trips` times
    assert totals["flops"] == LAYER and totals["flops_per_step"] == trips * LAYER


FUSED_CONDITION = """HloModule fused_cond

%cmp (a: s32[], b: s32[]) -> pred[] {
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %ge = pred[] compare(%a, %b), direction=GE
}

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[8]{0} get-tuple-element(%p), index=1
  %m1 = s32[] constant(-2)
  %next = s32[] add(%m1, %i)
  %y = f32[8]{0} exponential(%x)
  ROOT %r = (s32[], f32[8]{0}) tuple(%next, %y)
}

%cond (c: (s32[], f32[8])) -> pred[] {
  %c = (s32[], f32[8]{0}) parameter(0)
  %j = s32[] get-tuple-element(%c), index=0
  %lo = s32[] constant(1)
  ROOT %f = pred[] fusion(%j, %lo), kind=kLoop, calls=%cmp
}

ENTRY %main (x0: f32[8]) -> f32[8] {
  %x0 = f32[8]{0} parameter(0)
  %start = s32[] constant(20)
  %start.copy = s32[] copy(%start)
  %t = (s32[], f32[8]{0}) tuple(%start.copy, %x0)
  %w = (s32[], f32[8]{0}) while(%t), condition=%cond, body=%body
  ROOT %out = f32[8]{0} get-tuple-element(%w), index=1
}
"""


def test_trip_count_through_a_fused_condition_and_a_copied_init():
    """i = 20; i >= 1; i += -2 -> 20, 18, ..., 2: 10 trips, with the compare inside a loop fusion
    and the counter's start copied (forms XLA's optimized modules have)."""
    module = parse_hlo_text(FUSED_CONDITION)
    df = instruction_costs(module)
    assert _row(df, "w")["trip_count"] == 10
    assert module_totals(module)["transcendentals_per_step"] == 10 * 8


def test_known_trip_count_wins_and_unknown_loops_are_named():
    known = _loop(0, "add(%i, %k)", 1, "compare(%j, %n), direction=LT", 32,
                  ', backend_config={"known_trip_count":{"n":"7"}}')
    assert _row(instruction_costs(parse_hlo_text(known)), "layers")["trip_count"] == 7
    # a loop whose counter moves away from its bound never ends by its test: no count, a warning naming it
    runaway = parse_hlo_text(_loop(0, "add(%i, %k)", 1, "compare(%j, %n), direction=GT", -5))
    df = instruction_costs(runaway)
    assert df.loc[df["computation"] == "body", "multiplier"].isna().all()
    assert any("'layers'" in w and "trip count" in w for w in df.attrs["warnings"])


def test_solve_matches_running_the_loop():
    """The closed forms against simply running ``for (i = init; i DIR bound; i += step)``."""
    ops = {"LT": int.__lt__, "LE": int.__le__, "GT": int.__gt__, "GE": int.__ge__, "NE": int.__ne__}
    for init, step, bound, direction in itertools.product(range(-6, 7), (-3, -2, -1, 1, 2, 3), range(-6, 7), ops):
        i, n = init, 0
        while ops[direction](i, bound) and n <= 100:
            i, n = i + step, n + 1
        expected = n if n <= 100 else None
        assert solve(init, step, direction, bound) == expected, (init, step, direction, bound)


@pytest.fixture(scope="module")
def jax_loops():
    """A fori_loop (counting up) and a while_loop counting down by 3, compiled by XLA on the CPU."""
    jax = pytest.importorskip("jax")
    jnp, lax = jax.numpy, jax.lax

    def up(x, w):
        return lax.fori_loop(0, 32, lambda i, c: jnp.tanh(c @ w), x)

    def down(x, w):
        return lax.while_loop(lambda c: c[0] > 0, lambda c: (c[0] - 3, jnp.tanh(c[1] @ w)), (jnp.int32(31), x))[1]

    x, w = jnp.ones((8, 16)), jnp.ones((16, 16))
    out = {}
    for f in (up, down):
        lowered = jax.jit(f).lower(x, w)
        compiled = lowered.compile()
        cost = compiled.cost_analysis()
        out[f.__name__] = (lowered.as_text(dialect="hlo"), compiled.as_text(), cost[0] if isinstance(cost, list) else cost)
    return out


@pytest.mark.parametrize("name", ["up", "down"])
def test_trip_counts_agree_with_xla(jax_loops, name):
    """XLA's WhileLoopTripCountAnnotator writes known_trip_count into the optimized module; with it
    removed, and in the unoptimized module that never had it, the loop's structure gives the same count."""
    before, after, cost = jax_loops[name]
    xla_count = int(re.search(r'"known_trip_count":\{"n":"(\d+)"\}', after).group(1))
    assert xla_count == {"up": 32, "down": 11}[name]       # (31 - 1) / 3 + 1 = 11 going down
    stripped = re.sub(r'"known_trip_count":\{"n":"\d+"\},?', "", after)
    for text in (before, stripped):
        df = instruction_costs(parse_hlo_text(text))
        assert list(df.loc[df["opcode"] == "while", "trip_count"]) == [xla_count]
        assert not any("trip count" in w for w in df.attrs["warnings"])
    # stripping the annotation leaves XLA's own totals (body once) unchanged
    assert module_totals(parse_hlo_text(stripped))["flops"] == pytest.approx(cost["flops"], rel=0.01)


# ---------------------------------------------------------------------------------------------
# HLO text as XLA accepts it

@pytest.fixture(scope="module")
def jax_module():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    compiled = jax.jit(lambda x, w: jnp.tanh(x @ w).sum(axis=0)).lower(jnp.ones((32, 64)), jnp.ones((64, 48))).compile()
    cost = compiled.cost_analysis()
    return compiled.as_text(), cost[0] if isinstance(cost, list) else cost


def _commented(text: str) -> str:
    lines = text.splitlines()
    out = ["// Copyright: a licence header", "/* a block comment", "   over two lines */"]
    for line in lines:
        if line.strip().startswith(("ROOT", "%")) and "=" in line:
            out.append(line + "  // trailing note, with ( and { that do not balance")
        else:
            out.append(line)
        if line.startswith("ENTRY"):
            out.append("  /* a comment inside a computation */")
    return "\n".join(out) + "\n"


def test_commented_and_headerless_text_cost_as_xla(jax_module):
    text, cost = jax_module
    reference = module_totals(parse_hlo_text(text))
    assert reference["flops"] == pytest.approx(cost["flops"], rel=0.01)
    commented = parse_hlo_text(_commented(text), "commented.txt")
    body = "\n".join(line for line in text.splitlines() if not line.startswith("HloModule"))
    headerless = parse_hlo_text(body, "bare.txt")
    entry = parse_hlo_text(text).entry
    # XLA names a module without header "module_<entry>"
    assert headerless.name == f"module_{entry}" and headerless.entry == entry
    for module in (commented, headerless):
        totals = module_totals(module)
        for key in ("flops", "transcendentals", "bytes_accessed"):
            assert totals[key] == reference[key], (module.name, key)
        assert totals["flops"] == pytest.approx(cost["flops"], rel=0.01)
        assert totals["bytes_accessed"] == pytest.approx(cost["bytes accessed"], rel=0.02)


def test_bare_computation_without_entry_takes_the_last_one():
    """XLA's parser: without ENTRY, the last computation is the entry."""
    module = parse_hlo_text("""%double (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  ROOT %y = f32[8]{0} add(%x, %x), some_new_flag, frontend_attributes={_scheduling_group_id="3"}
}
""")
    assert module.name == "module_double" and module.entry == "double"
    y = module.entry_computation().by_name()["y"]
    assert y.attributes["some_new_flag"] == "" and "_scheduling_group_id" in y.attributes["frontend_attributes"]
    assert module_totals(module)["flops"] == 8


def test_comment_markers_inside_strings_are_text():
    line = '  %a = f32[] constant(1), metadata={op_name="a//b /* c */" source_file="/x//y.py"} // gone'
    assert strip_comments(line) == line[:line.index(" // gone")]


def test_dump_folder_with_a_file_that_is_not_hlo(tmp_path, jax_module):
    text, _ = jax_module
    headerless = "\n".join(line for line in text.splitlines() if not line.startswith("HloModule"))
    (tmp_path / "module_0001.jit_f.cpu_after_optimizations.txt").write_text(_commented(headerless))
    (tmp_path / "module_0002.jit_g.cpu_after_optimizations.txt").write_text("Segmentation fault (core dumped)\n")
    modules, warnings = load_hlo_modules(tmp_path)
    # the file name gives a header-less module its name, so a trace's ops still find it
    assert [(m.module_id, m.name) for m in modules] == [(1, "jit_f")]
    assert any("skipped" in w and "module_0002" in w for w in warnings)


# ---------------------------------------------------------------------------------------------
# Pallas / Mosaic kernels

PALLAS_M, PALLAS_K, PALLAS_N = 128, 64, 256


@pytest.fixture(scope="module")
def pallas_hlo():
    """A Pallas matmul lowered for TPU by JAX on this CPU machine (real tpu_custom_call HLO),
    without and with a ``pl.CostEstimate``."""
    jax = pytest.importorskip("jax")
    pl = pytest.importorskip("jax.experimental.pallas")
    jnp = jax.numpy

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...])

    estimate = pl.CostEstimate(flops=2 * PALLAS_M * PALLAS_K * PALLAS_N, transcendentals=7,
                               bytes_accessed=123_456)
    x = jnp.ones((PALLAS_M, PALLAS_K), jnp.float32)
    y = jnp.ones((PALLAS_K, PALLAS_N), jnp.float32)
    out = {}
    for name, ce in (("plain", None), ("estimated", estimate)):
        call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((PALLAS_M, PALLAS_N), jnp.float32),
                              cost_estimate=ce)
        try:
            out[name] = jax.jit(call).trace(x, y).lower(lowering_platforms=("tpu",)).as_text(dialect="hlo")
        except Exception as exc:  # noqa: BLE001 - older/newer JAX may not lower for TPU without one
            pytest.skip(f"JAX cannot lower a Pallas call for TPU here: {exc}")
    return out


def test_pallas_kernel_with_cost_estimate(pallas_hlo):
    """Deliberate difference from XLA, which reports nothing for a tpu_custom_call: the author's
    estimate is used (FLOPs, transcendentals, bytes), bytes split read/written by operand/result sizes."""
    assert 'custom_call_target="tpu_custom_call"' in pallas_hlo["estimated"]
    df = instruction_costs(parse_hlo_text(pallas_hlo["estimated"]))
    row = df[df["opcode"] == "custom-call"].iloc[0]
    assert (row["flops"], row["transcendentals"], row["bytes_accessed"]) == (2 * 128 * 64 * 256, 7, 123_456)
    read, written = 4 * (128 * 64 + 64 * 256), 4 * 128 * 256
    assert row["bytes_read"] == pytest.approx(123_456 * read / (read + written))
    assert not row["unknown"] and not row["cost_lower_bound"]
    assert not any("cost estimate" in w for w in df.attrs["warnings"])


def test_pallas_kernel_without_cost_estimate(pallas_hlo):
    """Deliberate difference from XLA, whose HloCostAnalysis marks a custom call's FLOPs and bytes
    unknown (-1): traceview counts the bytes the kernel must move at least (its operands and
    result), leaves its FLOPs unknown (NaN, never 0), marks the row a lower bound and names it in
    one warning; the module's FLOP total leaves it out and names it."""
    module = parse_hlo_text(pallas_hlo["plain"])
    df = instruction_costs(module)
    row = df[df["opcode"] == "custom-call"].iloc[0]
    # it must read x (f32[128,64]) and y (f32[64,256]) and write the f32[128,256] result
    assert (row["bytes_read"], row["bytes_written"]) == (4 * (128 * 64 + 64 * 256), 4 * 128 * 256)
    assert np.isnan(row["flops"]) and row["cost_lower_bound"] and not row["unknown"]
    assert "lower bound" in row["note"]
    (warning,) = [w for w in df.attrs["warnings"] if "no cost estimate" in w]
    assert row["name"] in warning and "tpu_custom_call" in warning
    totals = module_totals(module)
    assert totals["lower_bound"] and totals["flops"] is None and totals["flops_unknown_ops"] == [row["name"]]


# ---------------------------------------------------------------------------------------------
# GPU forms, checked against the rules of XLA's GpuHloCostAnalysis / HloCostAnalysis:
# a GEMM fusion (Triton, cuDNN) sums its fused instructions, so its dot counts 2*M*N*K;
# HandleScaledDot counts a scaled dot like a dot; the block-scaled custom calls become that dot.

GPU_FORMS = """HloModule gpu_forms

%triton_gemm (p0: bf16[256,512], p1: bf16[512,128]) -> bf16[256,128] {
  %p0 = bf16[256,512]{1,0} parameter(0)
  %p1 = bf16[512,128]{1,0} parameter(1)
  ROOT %d = bf16[256,128]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%cudnn_gemm (q0: f8e4m3fn[256,512], q1: f8e4m3fn[128,512]) -> f32[256,128] {
  %q0 = f8e4m3fn[256,512]{1,0} parameter(0)
  %q1 = f8e4m3fn[128,512]{1,0} parameter(1)
  ROOT %e = f32[256,128]{1,0} dot(%q0, %q1), lhs_contracting_dims={1}, rhs_contracting_dims={1}
}

ENTRY %main (a: bf16[256,512], b: bf16[512,128], x: f8e4m3fn[4,128,256], y: f8e4m3fn[4,64,256], xs: f8e8m0fnu[4,128,8], ys: f8e8m0fnu[4,64,8], c: f8e4m3fn[256,512], w: f8e4m3fn[128,512]) -> (bf16[256,128], f32[256,128], f16[4,128,64], f16[4,128,64], f16[4,128,64]) {
  %a = bf16[256,512]{1,0} parameter(0)
  %b = bf16[512,128]{1,0} parameter(1)
  %x = f8e4m3fn[4,128,256]{2,1,0} parameter(2)
  %y = f8e4m3fn[4,64,256]{2,1,0} parameter(3)
  %xs = f8e8m0fnu[4,128,8]{2,1,0} parameter(4)
  %ys = f8e8m0fnu[4,64,8]{2,1,0} parameter(5)
  %c = f8e4m3fn[256,512]{1,0} parameter(6)
  %w = f8e4m3fn[128,512]{1,0} parameter(7)
  %tg = bf16[256,128]{1,0} fusion(%a, %b), kind=kCustom, calls=%triton_gemm, backend_config={"fusion_backend_config":{"kind":"__triton_gemm","triton_gemm_config":{"block_m":"64","block_n":"64","block_k":"32","split_k":"1","num_stages":"3","num_warps":"4","num_ctas":"1"}}}
  %cf = f32[256,128]{1,0} fusion(%c, %w), kind=kCustom, calls=%cudnn_gemm, backend_config={"fusion_backend_config":{"kind":"__cudnn$fusion","cudnn_fusion_config":{"plan_id":"0"}}}
  %sd = f16[4,128,64]{2,1,0} scaled-dot(%x, %y, %xs, %ys), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  %op = f16[4,128,64]{2,1,0} custom-call(%x, %y, %xs, %ys), custom_call_target="__op$block_scaled_dot"
  %cc = (f16[4,128,64]{2,1,0}, u8[0]{0}) custom-call(%x, %y, %xs, %ys), custom_call_target="__cudnn$blockScaledDot"
  %cd = f16[4,128,64]{2,1,0} get-tuple-element(%cc), index=0
  ROOT %t = (bf16[256,128]{1,0}, f32[256,128]{1,0}, f16[4,128,64]{2,1,0}, f16[4,128,64]{2,1,0}, f16[4,128,64]{2,1,0}) tuple(%tg, %cf, %sd, %op, %cd)
}
"""


def test_gpu_gemm_forms():
    df = instruction_costs(parse_hlo_text(GPU_FORMS))
    tg, cf = _row(df, "tg"), _row(df, "cf")
    assert tg["flops"] == 2 * 256 * 128 * 512 and tg["category"] == "custom fusion" and tg["dtype"] == "bf16"
    # a GEMM fusion reads its parameters whole and writes its result
    assert (tg["bytes_read"], tg["bytes_written"]) == (2 * (256 * 512 + 512 * 128), 2 * 256 * 128)
    assert cf["flops"] == 2 * 256 * 128 * 512 and cf["dtype"] == "f8e4m3fn"
    assert (cf["bytes_read"], cf["bytes_written"]) == (256 * 512 + 128 * 512, 4 * 256 * 128)
    # block-scaled dots: B=4, M=128, N=64, K=256; the scales (1 byte each) are read, not multiplied
    reads = 4 * 128 * 256 + 4 * 64 * 256 + 4 * 128 * 8 + 4 * 64 * 8
    for name in ("sd", "op", "cc"):
        row = _row(df, name)
        assert row["flops"] == 2 * 4 * 128 * 64 * 256, name
        assert (row["bytes_read"], row["bytes_written"]) == (reads, 2 * 4 * 128 * 64), name
        assert row["category"] in ("matmul", "custom-call") and row["dtype"] == "f8e4m3fn", name
        assert not row["unknown"] and not row["cost_lower_bound"], name


def test_gpu_dump_custom_fusions(shared_traces):
    """The H100 MaxText dump's cuBLAS address-computation custom fusions (kind=kCustom,
    ``__custom_fusion`` / ``dynamic_address_computation``): the GEMM inside counts, the dynamic
    slice reads only its slice. Hand figures for address_computation.7.0: out bf16[16,128,2048]
    from a 1-of-8 slice of bf16[8,2,8,128,2048] times bf16[16,2048,2048]."""
    from traceview.parsers.hlo.dump import read_hlo_file

    path = next((shared_traces / "NVIDIA-JAX-Toolbox").glob("maxtext*/dump/*gpu_after_optimizations.hlo.pb.xz"))
    df = instruction_costs(read_hlo_file(path))
    custom = df[df["fusion_kind"] == "kCustom"]
    assert len(custom) == 12 and (custom["flops"] > 0).all() and not custom["unknown"].any()
    row = _row(df, "address_computation.7.0")
    assert row["flops"] == 2 * 16 * 128 * 2048 * 2048
    # read: the slice (2*8*128*2048 bf16), the weights (16*2048*2048 bf16), two s32 offsets
    assert row["bytes_read"] == 2 * 2 * 8 * 128 * 2048 + 2 * 16 * 2048 * 2048 + 2 * 4
    # written: the result plus cuBLAS's s8[33554432] workspace, which the fusion's shape holds and
    # XLA's default output-bytes rule counts
    assert row["bytes_written"] == 2 * 16 * 128 * 2048 + 33554432


def test_h100_maxtext_layer_loops(shared_traces):
    """The H100 MaxText FSDP dump. Before optimizations its two decoder scans carry no
    known_trip_count and compare the counter with 8 (i = 0; i < 8; i += 1): 8 layers. After
    optimizations XLA double-buffered them (the counter gains 1 twice per trip, starting from folded
    constants) and annotated 3 and 2 trips; with the annotation removed the structure gives the same."""
    from traceview.parsers.hlo.dump import read_hlo_file

    dump = next((shared_traces / "NVIDIA-JAX-Toolbox").glob("maxtext*/dump"))
    before = instruction_costs(read_hlo_file(next(dump.glob("*.before_optimizations.hlo.pb.xz"))))
    assert sorted(before.loc[before["opcode"] == "while", "trip_count"]) == [8, 8]
    assert not any("trip count" in w for w in before.attrs["warnings"])
    after = read_hlo_file(next(dump.glob("*gpu_after_optimizations.hlo.pb.xz")))
    annotated = {}
    for comp in after.computations.values():
        for inst in comp.instructions:
            if inst.opcode == "while":
                annotated[inst.name] = int(re.search(r'"known_trip_count":\{"n":"(\d+)"\}', inst.backend_config).group(1))
                inst.backend_config = re.sub(r'"known_trip_count":\{"n":"\d+"\},?', "", inst.backend_config)
    assert sorted(annotated.values()) == [2, 3]
    df = instruction_costs(after)
    inferred = dict(df.loc[df["opcode"] == "while", ["name", "trip_count"]].to_numpy())
    assert inferred == annotated
