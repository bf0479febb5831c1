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
