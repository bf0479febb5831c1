"""The what-if projection of one host's virtual devices (traceview.whatif.host), on generated steps: random
meshes of 8 devices, random ops of every kind with random work, random idle time. Each rule is checked
against its own arithmetic, not against a stored figure."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pandas as pd
import pytest

from traceview.whatif.baseline import Baseline
from traceview.whatif.config import Config, factorisations
from traceview.whatif.host import SharedHost, host_collective_bytes, shared_host
from traceview.whatif.project import project

KINDS = ("activation bytes", "parameter shard bytes", "gathered parameter bytes")
SEEDS = range(40)


def _base(seed: int) -> Baseline:
    rng = random.Random(seed)
    mesh = rng.choice(factorisations(8, ["data", "fsdp", "tensor"]))
    rows, work = [], {}
    rate = rng.uniform(1e9, 5e10)
    for i in range(rng.randint(2, 12)):
        bound = rng.choice(("compute", "memory", "memory"))
        scale = "flops" if bound == "compute" else rng.choice(KINDS)
        work[("main", f"op{i}")] = rng.uniform(1e-5, 1e-2)
        # a matmul reads its weight in part of its work, none, or (clipped) more than all of it
        weights = rng.choice((0.0, rng.uniform(0.0, 0.9), 1.5)) * work[("main", f"op{i}")] * rate
        rows.append(("main", f"op{i}", bound, rng.uniform(1e6, 1e9), scale, weights))
    ops = pd.DataFrame(rows, columns=["module", "op", "bound", "time_ps", "scale", "weight_bytes"])
    step = rng.uniform(5e9, 5e10)
    idle = rng.uniform(0, 0.3) * step
    buckets = {"compute": 0.0, "memory": 0.0, "communication": 0.0, "unknown": 0.0, "idle": idle}
    base = Baseline(mesh, 8, None, 3, step, buckets, ops, {}, float(rng.choice((256, 512, 1024))), "generated",
                    rng.uniform(1e5, 1e8), rng.uniform(1e2, 1e5), 768.0, None, "fp32")
    base.host = SharedHost(8, "localhost", rate, work, "generated")
    return base


def _terms(p) -> dict:
    return {t.what: t for t in p.terms}


def _compute_split(base: Baseline) -> tuple[float, float]:
    """(work of the compute-bound ops that scales with FLOPs, work reading their weights), seconds per step."""
    rows = base.ops[base.ops["bound"] == "compute"]
    host = base.host
    assert host is not None
    flops = reads = 0.0
    for op, weight in zip(rows["op"], rows["weight_bytes"]):
        work = host.work[("main", op)]
        read = min(work, weight / host.byte_rate)
        flops, reads = flops + work - read, reads + read
    return flops, reads


@pytest.mark.parametrize("seed", SEEDS)
def test_todays_configuration_is_todays_step(seed):
    base = _base(seed)
    p = project(base, Config(dict(base.mesh), base.batch_tokens, None))
    assert p.step_ps == pytest.approx(base.step_ps, rel=1e-9)
    assert sum(t.baseline_ps for t in p.terms) == pytest.approx(base.step_ps, rel=1e-9)
    assert all(t.time_ps == pytest.approx(t.baseline_ps) for t in p.terms)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_batch_scales_the_work_that_goes_with_the_tokens(seed):
    """k times the batch on the same mesh: compute and activation work and the tensor axis's copies k times,
    the state's updates and the data / FSDP copies unchanged, idle kept; each term over the same c."""
    base = _base(seed)
    k = random.Random(seed).choice((0.5, 2.0, 3.0))
    p = project(base, Config(dict(base.mesh), k * base.batch_tokens, None))
    t = _terms(p)
    rows = base.ops
    per_kind = {kind: sum(base.host.work[("main", o)] for o, s in zip(rows["op"], rows["scale"]) if s == kind)
                for kind in ("flops", *KINDS)}
    roles = {r: host_collective_bytes(r, base.mesh, base.batch_tokens, base.param_bytes,
                                      base.activation_bytes_per_token, 8) / base.host.byte_rate for r in base.mesh}
    work = sum(per_kind.values()) + sum(roles.values())
    per_second = (base.step_ps - base.buckets["idle"]) / work
    if per_kind["flops"]:
        by_flops, reads = _compute_split(base)           # the weights read are the same for any batch
        assert t["compute-bound ops"].time_ps == pytest.approx((k * by_flops + reads) * per_second)
    memory = k * per_kind["activation bytes"] + per_kind["parameter shard bytes"] + per_kind["gathered parameter bytes"]
    if "memory-bound ops" in t:
        assert t["memory-bound ops"].time_ps == pytest.approx(memory * per_second)
    for role, secs in roles.items():
        grows = k if role == "tensor" else 1.0
        assert t[f"{role} collectives (host copies)"].time_ps == pytest.approx(grows * secs * per_second)
    assert t["idle"].time_ps == base.buckets["idle"]
    assert p.step_ps == pytest.approx(sum(x.time_ps for x in p.terms))


@pytest.mark.parametrize("seed", SEEDS)
def test_another_mesh_moves_the_state_and_the_copies_by_the_book(seed):
    """Every mesh of the same 8 devices: the state's updates by its replication (8 / parameter ways), the
    gathered weights' copies gone without FSDP, each role's copies the book's bytes; FSDP 8 and data 8 copy
    the same bytes (the book's point: the same volume)."""
    base = _base(seed)
    for mesh in factorisations(8, ["data", "fsdp", "tensor"]):
        p = project(base, Config(mesh, base.batch_tokens, None))
        t = _terms(p)
        assert p.step_ps == pytest.approx(sum(x.time_ps for x in p.terms))
        if "compute-bound ops" in t:
            # the same FLOPs over the same chips; each chip reads 1 / tensor ways of each weight
            by_flops, reads = _compute_split(base)
            share = (by_flops + reads * base.mesh.get("tensor", 1) / mesh.get("tensor", 1)) / (by_flops + reads)
            assert t["compute-bound ops"].time_ps == pytest.approx(t["compute-bound ops"].baseline_ps * share)
        ways_today = base.mesh.get("fsdp", 1) * base.mesh.get("tensor", 1)
        ways = mesh.get("fsdp", 1) * mesh.get("tensor", 1)
        gathered = 0.0 if base.mesh.get("fsdp", 1) > 1 and mesh.get("fsdp", 1) == 1 else \
            base.mesh.get("tensor", 1) / mesh.get("tensor", 1)
        scale = {"activation bytes": 1.0, "parameter shard bytes": ways_today / ways, "gathered parameter bytes": gathered}
        rows = base.ops[base.ops["bound"] == "memory"]
        if rows.empty:
            continue
        today = sum(base.host.work[("main", o)] for o in rows["op"])
        new = sum(base.host.work[("main", o)] * scale[s] for o, s in zip(rows["op"], rows["scale"]))
        assert t["memory-bound ops"].time_ps == pytest.approx(t["memory-bound ops"].baseline_ps * new / today)
    copies = [host_collective_bytes(r, {r: 8}, 512.0, 1e6, 1e3, 8) for r in ("data", "fsdp")]
    assert copies[0] == copies[1] == pytest.approx(2 * 8 * 2 * 7 / 8 * 1e6)


def _pipeline(devices) -> SimpleNamespace:
    ops = pd.DataFrame({"module": ["m"] * 16, "op": ["a"] * 8 + ["b"] * 8, "duration_ps": [1e6] * 16})
    table = pd.DataFrame({"module": ["m", "m"], "op": ["a", "b"], "bound": ["compute", "memory"],
                          "collective_kind": [None, None], "bytes_accessed": [0.0, 8e6]})
    return SimpleNamespace(profile=SimpleNamespace(devices=devices, op_executions=lambda: ops), ops=table,
                           steps=pd.DataFrame({"time_ps": [1e9]}), judged=None)


def _device(i, host="localhost", kind="CPU", pid=7):
    return SimpleNamespace(id=f"{host}/{kind}:{i}", host=host, kind=kind, stats={"process_id": pid})


def test_only_cpu_devices_of_one_process_are_one_host():
    found = shared_host(_pipeline([_device(i) for i in range(8)]), 8)
    assert found is not None and found.devices == 8
    assert found.work[("m", "a")] == pytest.approx(8 * 1e-6)                 # 8 executions of 1 us per step
    assert found.byte_rate == pytest.approx(8e6 / (8 * 1e-6))                # the memory op's bytes over its work
    assert shared_host(_pipeline([_device(i, kind="TPU") for i in range(8)]), 8) is None
    assert shared_host(_pipeline([_device(i, host=f"h{i % 2}") for i in range(8)]), 8) is None
    assert shared_host(_pipeline([_device(i, pid=i % 2) for i in range(8)]), 8) is None
    assert shared_host(_pipeline([_device(0)]), 1) is None
    assert shared_host(_pipeline([_device(i) for i in range(8)]), 4) is None   # the mesh covers half of them


@pytest.mark.parametrize("seed", range(12))
def test_an_ops_weight_bytes_are_its_weight_operands_and_result(seed):
    """The bytes of an op's operands and result that are weights (state or gathered, by sorted dims), per step
    over all devices, from a generated module: a forward dot reads one weight, a weight-gradient dot writes
    one, an activation op touches none."""
    from traceview.parsers.hlo.text import parse_hlo_text
    from traceview.whatif.baseline import _weight_operand_bytes

    rng = random.Random(seed)
    b, d, f = rng.choice((8, 24, 40)), rng.choice((64, 96, 128)), rng.choice((160, 192, 320))
    runs, steps = rng.choice((8, 16, 32)), rng.choice((2, 4))
    text = f"""HloModule m{seed}

ENTRY main {{
  x = f32[{b},{d}] parameter(0)
  w = f32[{d},{f}] parameter(1)
  y = f32[{b},{f}] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  g = f32[{d},{f}] dot(x, y), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
  r = f32[{b},{f}] negate(y)
  ROOT t = (f32[{d},{f}], f32[{b},{f}]) tuple(g, r)
}}
"""
    module = parse_hlo_text(text)
    ops = pd.DataFrame({"module": [module.name] * 3 + ["other"], "op": ["y", "g", "r", "y"],
                        "occurrences": [runs] * 4, "collective_kind": ["", "", None, ""]})
    got = _weight_operand_bytes(ops, module, {(min(d, f), max(d, f))}, steps)
    weight = 4.0 * d * f * runs / steps
    assert got == pytest.approx([weight, weight, 0.0, 0.0])
