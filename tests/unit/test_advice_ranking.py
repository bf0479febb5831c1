"""Every kind of advice against a hand calculation, and the ranking rules (times in ps)."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from traceview.advice.findings import Advice, AdviceContext, Views, ranked
from traceview.advice.idle import IdleCauses
from traceview.advice.providers import (
    axis_provider,
    idle_provider,
    memory_provider,
    op_provider,
    scopes_provider,
    serving_provider,
)
from traceview.memory.headroom import Headroom
from traceview.render.advice import advice_json
from traceview.scopes.tree import BOUND_NAMES, NODE_COLUMNS

US = 1e6


def context(span_ps: float, devices: int, ops: pd.DataFrame | None = None, idle: IdleCauses | None = None,
            **views) -> AdviceContext:
    """A context over ``ops`` whose views (parallelism, memory, scopes, serving) are the objects given."""
    pipeline = SimpleNamespace(ops=ops if ops is not None else pd.DataFrame(), judged=None)
    return AdviceContext(pipeline=pipeline, span_ps=span_ps, active_devices=devices, idle=idle,
                         views=Views(**{name: (lambda v=v: v) for name, v in views.items()}))


def test_ops_saving_is_the_gain_per_device_capped_by_the_exposed_time() -> None:
    ops = pd.DataFrame({
        "program_id": [1, 1, 1], "module": ["jit_step"] * 3, "op": ["fusion.1", "dot", "fusion.2"],
        "gain_ps": [400.0, 1200.0, 10.0], "self_time_ps": [500, 1300, 50], "exposed_time_ps": [450.0, 500.0, 50.0],
        "roofline_time_ps": [100.0, 100.0, 40.0], "bound": ["memory", "compute", "memory"], "occurrences": [4, 2, 2]})
    items = ranked(op_provider(context(1000, 2, ops)), 1000)
    # fusion.1: 400 / 2 devices = 200 (removable 450 / 2 = 225); dot: 1200 / 2 = 600 capped by 500 / 2 = 250;
    # fusion.2: 10 / 2 = 5 = 0.5% of the span, under the 1% floor
    assert [(i.title.split(":")[0], i.saving_ps, i.rank) for i in items] == [
        ("op dot (jit_step)", 250.0, 1), ("op fusion.1 (jit_step)", 200.0, 2)]
    assert "memory-bound at 20.0% of its roofline" in items[1].title      # 100 / 500
    assert items[1].tab == "Ops" and "roofline" in items[1].rule
    assert advice_json(items[0], 1000)["saving_share"] == pytest.approx(0.25)


def test_ops_of_one_name_in_several_programs_say_which_program_and_shape() -> None:
    """A benchmark compiles jit_dot once per shape: each program's op has the same module and op name, and
    the list would show the same title twice. Such items name the program and the op's result shape; an op
    whose name is unique keeps the short title."""
    import random

    rng = random.Random(7)
    for _ in range(20):
        programs = rng.sample(range(10, 99), 3)
        shapes = [f"bf16[{rng.choice([1024, 4096, 8192])},{rng.choice([512, 2048])}]" for _ in programs]
        ops = pd.DataFrame({
            "program_id": programs + [5], "module": ["jit_dot"] * 3 + ["jit_other"],
            "op": ["custom-call.1"] * 3 + ["fusion"],
            "shape": [f"({s}, s8[{rng.randint(1, 10**8)}])" for s in shapes] + ["f32[8]"],
            "gain_ps": [300.0, 200.0, 100.0, 250.0], "self_time_ps": [400.0, 300.0, 200.0, 300.0],
            "roofline_time_ps": [100.0] * 4, "bound": ["compute"] * 3 + ["memory"], "occurrences": [3] * 4})
        items = ranked(op_provider(context(1000, 1, ops)), 1000)
        titles = {i.title.split(":")[0] for i in items}
        assert len(titles) == len(items)                           # no two items read the same
        for program, shape, gain in zip(programs, shapes, (300.0, 200.0, 100.0)):
            wanted = f"op custom-call.1 (jit_dot, program {program}, {shape})"
            assert (wanted in titles) == (gain >= 200.0), titles      # TOP_OPS = 3: the third dot is not listed
        assert "op fusion (jit_other)" in titles


def test_mesh_axis_saving_is_its_exposed_communication_per_device() -> None:
    axis = SimpleNamespace(name="data", size=4, role=SimpleNamespace(role="data"), collectives=2, bytes=1e6,
                           exposed_ps=80.0, measured="exposed communication 4.0% of device time",
                           verdict=SimpleNamespace(verdict="compute-bound", rule="T_math > T_comms (ch. 5)",
                                                   suggestions=["overlap the gradient all-reduce"]))
    quiet = SimpleNamespace(**{**axis.__dict__, "name": "model", "exposed_ps": 10.0})   # 0.5% of the span
    items = list(axis_provider(context(1000, 2, parallelism=SimpleNamespace(axes=[axis, quiet]))))
    assert len(items) == 1
    assert items[0].saving_ps == 40.0 and items[0].kind == "axis" and items[0].tab == "Parallelism"
    assert items[0].rule == "T_math > T_comms (ch. 5)"
    # overlapped, a step takes max(T_math, T_comms): hiding saves at most the non-communication busy time,
    # here (50 + 10 + 0) / 2 devices = 30 < 40
    hidden = context(1000, 2, parallelism=SimpleNamespace(axes=[axis]))
    hidden.pipeline.judged = SimpleNamespace(
        summary={"time_by_bound_ps": {"compute": 50, "memory": 10, "communication": 500, "unknown": 0}})
    capped = ranked(axis_provider(hidden), 1000)
    assert capped[0].saving_ps == 30.0 and capped[0].removable_ps == 40.0
    assert items[0].fix == "overlap the gradient all-reduce"


def test_idle_cause_saving_is_its_time_per_device_above_five_percent() -> None:
    idle = IdleCauses(idle_ps=500, causes={"host": 300, "launch": 60, "sync": 0, "transfer": 140, "unknown": 0},
                      evidence={"host": [{"name": "$data.py:3 load_batch", "time_ps": 280, "source": "host"}]})
    items = list(idle_provider(context(1000, 2, idle=idle)))
    # host 300 / 2 = 150 (15%); transfer 140 / 2 = 70 (7%); launch 60 / 2 = 30 (3% < 5%): none
    assert [(i.title.split(":")[1].strip(), i.saving_ps) for i in items] == [("host", 150.0), ("transfer", 70.0)]
    assert "60.0% of the idle time" in items[0].evidence[0] and "load_batch" in items[0].evidence[0]
    assert "prefetch" in items[0].fix


def room(peak: float, capacity: float = 16e9) -> Headroom:
    return Headroom(target="tpu-v5e", capacity_bytes=int(capacity), capacity_source="test", peak_bytes=int(peak),
                    fits=peak <= capacity, headroom_bytes=int(capacity - peak))


@pytest.mark.parametrize(("peak", "expect"), [(15e9, "93.8% of capacity: too close"),
                                              (4e9, "25.0% of capacity (11.18 GiB free): headroom"),
                                              (3.5e6, "0.022% of capacity (14.90 GiB free): headroom"),
                                              (9.6e9, None)])
def test_memory_advice_from_the_peak_over_capacity(peak: float, expect: str | None) -> None:
    peak_row = SimpleNamespace(device="h/0", name="0")
    report = SimpleNamespace(memories=[peak_row], modules=[], memory_headroom=lambda p: room(peak),
                             module_headroom=lambda m: None)
    items = ranked(memory_provider(context(1000, 1, memory=report)), 1000)
    if expect is None:                                    # 60%: neither tight nor roomy
        assert items == []
        return
    assert len(items) == 1 and expect in items[0].title
    assert items[0].saving_ps is None and "no honest estimate" in items[0].evidence[1]


def scope_tree(rows: list[dict], judged: bool = True) -> SimpleNamespace:
    """A scope tree (scopes.tree.ScopeTree's fields the provider reads) of these nodes; columns not given are 0."""
    nodes = pd.DataFrame([{**dict.fromkeys(NODE_COLUMNS, 0.0), **row} for row in rows], columns=NODE_COLUMNS)
    return SimpleNamespace(nodes=nodes, judged=judged)


def test_scopes_provider_ranks_scopes_by_the_gain_of_their_own_ops() -> None:
    tree = scope_tree([
        {"path": ("train_step",), "total_us": 600, "self_us": 100, "gain_us": 150, "self_gain_us": 50},
        {"path": ("train_step", "model"), "total_us": 500, "self_us": 0, "gain_us": 100, "self_gain_us": 0},
        {"path": ("train_step", "model", "attn"), "total_us": 200, "self_us": 200, "gain_us": 90,
         "self_gain_us": 90, "memory_us": 150, "compute_us": 50},
        {"path": ("train_step", "model", "mlp"), "total_us": 300, "self_us": 300, "gain_us": 10,
         "self_gain_us": 10},
    ])
    items = ranked(scopes_provider(context(1000 * US, 1, scopes=tree)), 1000 * US)
    # the program alone is no place in the model; "model" has no ops of its own; mlp's 10 us is 1% of the span
    assert [(i.title.split(":")[0], i.saving_ps) for i in items] == [("scope train_step/model/attn", 90 * US),
                                                                      ("scope train_step/model/mlp", 10 * US)]
    assert "memory-bound" in items[0].title and items[0].tab == "Model"
    assert not any(f"{b}-bound" in items[1].title for b in BOUND_NAMES)      # no judged time: no bound named


def test_scopes_provider_says_nothing_without_a_target() -> None:
    tree = scope_tree([{"path": ("train_step", "attn"), "self_us": 200, "self_gain_us": 90}], judged=False)
    assert list(scopes_provider(context(1000 * US, 1, scopes=tree))) == []


def test_serving_provider_time_above_the_floor_and_the_critical_batch() -> None:
    decode = SimpleNamespace(phase="decode", module="jit_decode", steps=10, batch=8, step_time_us=50.0,
                             floor_us=20.0, floor_bound="memory")
    report = SimpleNamespace(critical_batch=240.0, phases=[decode])     # inference.view.InferenceReport's fields
    items = ranked(serving_provider(context(1000 * US, 1, serving=report)), 1000 * US)
    assert items[0].saving_ps == (50 - 20) * 10 * US and items[0].rank == 1     # 300 us: 30% of the span
    assert "40.0% of its floor" in items[0].title                               # 20 / 50
    assert items[1].saving_ps is None and "below the critical batch 240" in items[1].title


def test_ranking_puts_quantified_first_and_caps_at_the_span() -> None:
    items = [Advice("memory", "m", None, "r"), Advice("op", "small", 10.0, "r"),
             Advice("idle", "huge", 5000.0, "r"), Advice("op", "nan", float("nan"), "r")]
    out = ranked(items, 1000)
    assert [(i.title, i.saving_ps, i.rank) for i in out] == [
        ("huge", 1000.0, 1), ("small", 10.0, 2), ("m", None, 3), ("nan", None, 4)]
    assert advice_json(out[2], 1000)["saving_share"] is None


def _judged_on(kind: str) -> SimpleNamespace:
    return SimpleNamespace(chip=SimpleNamespace(kind=kind), summary={})


@pytest.mark.parametrize("seed", range(8))
def test_each_op_gets_the_fix_of_its_kind(seed: int) -> None:
    """A collective's fix moves bytes, whatever bound it was judged (an all-to-all judged memory-bound is not
    work to fuse); a host offload copy is no all-reduce; a CPU has no MXU or tensor cores."""
    import random

    rng = random.Random(seed)
    kinds = [  # (category, collective_kind, bound, wanted in the fix, never in the fix)
        ("all-to-all", "all-to-all", "memory", "all-to-all", "fuse it"),
        ("collective-permute", "collective-permute", "communication", "point-to-point", "reduce-scatter"),
        ("copy-start", "host-transfer", "communication", "host memory", "reduce-scatter"),
        ("all-gather", "all-gather", "communication", "all-gather", "fuse it"),
        ("all-reduce", "all-reduce", "communication", "reduce-scatter", "fuse it"),
        ("data formatting", None, "memory", "layout", "arithmetic intensity"),
        ("loop fusion", None, "compute", "elementwise", "MXU"),
    ]
    rng.shuffle(kinds)
    n = len(kinds)
    ops = pd.DataFrame({
        "program_id": [rng.randint(1, 99)] * n, "module": [f"jit_{rng.choice(['step', 'train', 'f'])}"] * n,
        "op": [f"{c.replace(' ', '_')}.{rng.randint(0, 50)}" for c, *_ in kinds],
        "category": [c for c, *_ in kinds], "collective_kind": [k for _, k, *_ in kinds],
        "bound": [b for _, _, b, *_ in kinds], "gain_ps": [float(1000 - 10 * i) for i in range(n)],
        "self_time_ps": [2000.0] * n, "roofline_time_ps": [100.0] * n, "occurrences": [rng.randint(1, 9)] * n})
    for i in range(0, n, 3):                       # TOP_OPS items at a time
        part = ops.iloc[i:i + 3].reset_index(drop=True)
        items = list(op_provider(context(1000, 1, part)))
        assert len(items) == len(part)
        for item, (_, _, _, wanted, never) in zip(items, kinds[i:i + 3]):
            assert wanted in item.fix and never not in item.fix, (item.title, item.fix)


@pytest.mark.parametrize(("chip", "wanted", "never"), [("CPU", "CPU", "tensor cores"), ("TPU", "MXU", "tensor"),
                                                       ("GPU", "tensor cores", "MXU")])
def test_a_compute_bound_matmul_fix_names_the_chips_matrix_units(chip: str, wanted: str, never: str) -> None:
    ops = pd.DataFrame({"program_id": [3], "module": ["jit_step"], "op": ["dot.7"], "category": ["matmul"],
                        "bound": ["compute"], "gain_ps": [500.0], "self_time_ps": [600.0],
                        "roofline_time_ps": [100.0], "occurrences": [2]})
    ctx = context(1000, 1, ops)
    ctx.pipeline.judged = _judged_on(chip)
    (item,) = op_provider(ctx)
    assert wanted in item.fix and never not in item.fix


def test_an_op_of_a_module_name_several_programs_share_names_its_program() -> None:
    """jit_dot compiled per shape: an op whose name only one of them has still names its program, as the op
    table writes "jit_dot(49)" for every row of those programs."""
    import random

    rng = random.Random(3)
    for _ in range(10):
        programs = rng.sample(range(10, 99), 2)
        name = f"gemm_fusion_{rng.randint(0, 9)}"
        ops = pd.DataFrame({"program_id": programs, "module": ["jit_dot"] * 2, "op": [name, "custom-call.1"],
                            "gain_ps": [300.0, 200.0], "self_time_ps": [400.0, 300.0],
                            "roofline_time_ps": [100.0, 100.0], "bound": ["memory", "compute"],
                            "occurrences": [3, 3], "shape": ["bf16[8,8]", "(bf16[64,64], s8[16])"]})
        titles = [i.title.split(":")[0] for i in op_provider(context(1000, 1, ops))]
        assert titles == [f"op {name} (jit_dot, program {programs[0]})",
                          f"op custom-call.1 (jit_dot, program {programs[1]})"]


def _tree_over(ops: pd.DataFrame, paths: list[tuple[str, ...]]) -> SimpleNamespace:
    """A scope tree whose nodes are the given ops' own paths (each op placed at its path)."""
    rows = {}
    for path, gain, time in zip(paths, ops["gain_ps"], ops["self_time_ps"]):
        row = rows.setdefault(path, {"path": path, "self_gain_us": 0.0, "self_us": 0.0, "memory_us": 0.0})
        row["self_gain_us"] += gain / US
        row["self_us"] += time / US
        row["memory_us"] += time / US
    tree = scope_tree(list(rows.values()))
    tree.op_paths = pd.Series(paths, index=ops.index, dtype=object)
    return tree


def test_a_scope_whose_gain_is_a_listed_op_is_not_listed_again() -> None:
    """h200 train: op fusion.235 and scope .../attn/_where (its only op) were items 1 and 2 with one saving.
    The scope item goes; the op item names its scope. A scope with gain beyond its listed ops stays."""
    import random

    rng = random.Random(11)
    for _ in range(10):
        layer = rng.randint(0, 9)
        alone = ("train_step", f"layer_{layer}", "attn", "_where")
        mixed = ("train_step", f"layer_{layer + 1}", "mlp")
        ops = pd.DataFrame({
            "program_id": [7] * 4, "module": ["jit_train_step"] * 4,
            "op": [f"fusion.{rng.randint(100, 300)}", "dot.1", "dot.2", "dot.3"],
            "gain_ps": [500 * US, 300 * US, 200 * US, 150 * US], "self_time_ps": [800 * US] * 4,
            "roofline_time_ps": [100 * US] * 4, "bound": ["memory"] * 4, "occurrences": [5] * 4})
        paths = [alone, mixed, mixed, mixed]       # dot.3 (4th by gain) is no op item: mlp keeps 150 us of its own
        tree = _tree_over(ops, paths)
        span = 10_000 * US
        items = ranked([*op_provider(context(span, 1, ops, scopes=tree)),
                        *scopes_provider(context(span, 1, ops, scopes=tree))], span)
        titles = [i.title.split(":")[0] for i in items]
        assert f"scope {'/'.join(alone)}" not in titles
        assert f"scope {'/'.join(mixed)}" in titles
        first = next(i for i in items if i.title.startswith(f"op {ops['op'][0]} "))
        assert first.evidence[0].endswith(f"in scope {'/'.join(alone)}")
        scope = next(i for i in items if i.kind == "scope")
        assert "it holds op dot.1, dot.2 of the list" in scope.evidence[0]


def test_serving_evidence_counts_one_step_as_one_step() -> None:
    phase = SimpleNamespace(step_time_us=40.0, floor_us=10.0, steps=1, phase="prefill", module="jit_prefill",
                            floor_bound="compute", batch=4)
    report = SimpleNamespace(phases=[phase], critical_batch=None)
    (item,) = serving_provider(context(100 * US, 1, serving=report))
    assert item.evidence[0].startswith("1 step of 40.00 us")


def test_an_overlap_of_a_tenth_of_a_percent_is_not_written_1_00x() -> None:
    from traceview.timeline.overlap import Overlap

    ctx = context(1000, 1)
    ctx.overlap = Overlap(1001.0, 1000.0)
    note = ctx.op_time_note(500.0)
    assert "1.001x" in note and "1.00x" not in note
    ctx.overlap = Overlap(1950.0, 1000.0)
    assert "1.95x" in ctx.op_time_note(500.0)


def test_long_host_event_names_are_folded_for_the_text() -> None:
    from traceview.advice.findings import short_name

    kernel = ("void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<Eigen::TensorAssignOp<Eigen::TensorMap<"
              "Eigen::Tensor<Eigen::half, 1, 1, long>, 16>>, Eigen::GpuDevice>, long>(Eigen::TensorEvaluator<"
              "Eigen::half, 1>, long)")
    assert short_name(kernel) == "void Eigen::internal::EigenMetaKernel<...>(...)"
    assert short_name("$capture.py:136 load_batch") == "$capture.py:136 load_batch"
    cut = short_name("x" * 200)
    assert len(cut) == 80 and cut.endswith("...")
    idle = IdleCauses(idle_ps=500, causes={"host": 0, "launch": 480, "sync": 0, "transfer": 20, "unknown": 0},
                      evidence={"launch": [{"name": kernel, "time_ps": 300, "source": "host"}]})
    (item,) = idle_provider(context(1000, 1, idle=idle))
    assert "EigenMetaKernel<...>(...) " in item.evidence[0] and "TensorMap" not in item.evidence[0]


def test_a_host_offload_axis_gets_the_host_copy_fix() -> None:
    """TPU inference: the 'host' axis (host offload copies) was told to "overlap the axis' collectives"."""
    def axis(name: str, role: str) -> SimpleNamespace:
        return SimpleNamespace(name=name, size=1, role=SimpleNamespace(role=role), collectives=6, bytes=1e12,
                               exposed_ps=500.0, measured=None,
                               verdict=SimpleNamespace(verdict=None, rule=None, suggestions=[]))
    items = list(axis_provider(context(1000, 1, parallelism=SimpleNamespace(
        axes=[axis("host", "host offload"), axis("data", "data")]))))
    fixes = {i.title.split("'")[1]: i.fix for i in items}
    assert "host memory" in fixes["host"] and "collectives" not in fixes["host"]
    assert "collectives" in fixes["data"]
