"""Collectives: kinds, payload bytes, replica groups (explicit, iota and mesh forms), async halves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from traceview.cost import instruction_costs
from traceview.parsers.hlo.text import parse_hlo_text

F32 = 4


def _module(collective: str, header: str = "") -> str:
    return f"""HloModule m{header}

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

ENTRY %main (p: f32[16,32]) -> f32[16,32] {{
  %p = f32[16,32]{{1,0}} parameter(0)
  ROOT %c = f32[16,32]{{1,0}} all-reduce(%p), replica_groups={collective}, to_apply=%add
}}
"""


@pytest.mark.parametrize("text,expected", [
    ("[2,4]<=[8]", np.arange(8).reshape(2, 4)),
    ("[4,2]<=[2,4]T(1,0)", np.arange(8).reshape(2, 4).transpose(1, 0).reshape(4, 2)),
    ("[4,4]<=[4,2,2]T(2,0,1)", np.arange(16).reshape(4, 2, 2).transpose(2, 0, 1).reshape(4, 4)),
    ("[1,8]<=[8]", np.arange(8).reshape(1, 8)),
    ("{{0,2},{1,3}}", np.array([[0, 2], [1, 3]])),
])
def test_replica_group_forms(text, expected):
    df = instruction_costs(parse_hlo_text(_module(text)))
    row = df[df["name"] == "c"].iloc[0]
    assert row["groups"] == expected.tolist()
    assert row["group_size"] == expected.shape[1]
    assert row["collective_kind"] == "all-reduce" and row["payload_bytes"] == 16 * 32 * F32


def test_empty_groups_mean_all_devices():
    df = instruction_costs(parse_hlo_text(_module("{}", ", num_partitions=8")))
    row = df[df["name"] == "c"].iloc[0]
    assert row["groups"] is None and row["group_size"] == 8


def test_crosses_dcn_with_slice_size():
    module = parse_hlo_text(_module("[2,4]<=[4,2]T(1,0)"))   # groups {0,2,4,6}, {1,3,5,7}
    assert instruction_costs(module)["crosses_dcn"].iloc[-1] is None
    assert instruction_costs(module, devices_per_slice=4)["crosses_dcn"].iloc[-1] is True
    assert instruction_costs(module, devices_per_slice=8)["crosses_dcn"].iloc[-1] is False


def test_mesh_groups_from_tpu_text(shared_traces):
    """TPU v6e MaxText text uses ``mesh['axis_0'=4,...] {'axis_0'}`` groups: one group of the 4 chips."""
    from traceview.parsers.hlo.text import read_hlo_text

    module = read_hlo_text(shared_traces / "AI-Hypercomputer-maxtext" / "reference_hlo_llama3_8b.txt")
    df = instruction_costs(module)
    gathers = df[df["opcode"] == "all-gather"]
    assert len(gathers) > 0
    assert all(g == [[0, 1, 2, 3]] for g in gathers["groups"])
    assert (gathers["group_size"] == 4).all()
    # payload = the gathered result, e.g. bf16[1,32,128,4096]
    first = gathers.iloc[0]
    dims = [int(d) for d in first["shape"][first["shape"].index("[") + 1:-1].split(",")]
    assert first["payload_bytes"] == 2 * np.prod(dims)


@pytest.fixture(scope="module")
def sharded_cpu_module(tmp_path_factory):
    """The corpus' shard_map program (x: f32[16,32] on a 2x4 mesh), compiled by XLA with 8 host devices."""
    pytest.importorskip("jax")
    from tests.support import corpus

    out = tmp_path_factory.mktemp("collectives") / "corpus.json"
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + corpus.DEVICE_FLAG).strip())
    proc = subprocess.run([sys.executable, str(Path(corpus.__file__)), "--json", str(out), "shard_map_collectives"],
                          env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(proc.stderr[-3000:])
    return parse_hlo_text(json.loads(out.read_text())["programs"][0]["hlo_text"])


def test_cpu_shard_map_collectives(sharded_cpu_module):
    df = instruction_costs(sharded_cpu_module)
    coll = df[df["collective_kind"] != ""].set_index("collective_kind")
    local = 8 * 8 * F32                       # each device holds f32[8,8] of x
    rows_a = [[0, 4], [1, 5], [2, 6], [3, 7]]  # mesh axis "a" (size 2)
    rows_b = [[0, 1, 2, 3], [4, 5, 6, 7]]      # mesh axis "b" (size 4)
    assert coll.loc["all-reduce", "payload_bytes"] == local and coll.loc["all-reduce", "groups"] == rows_b
    assert coll.loc["all-gather", "payload_bytes"] == 2 * local and coll.loc["all-gather", "groups"] == rows_a
    assert coll.loc["reduce-scatter", "payload_bytes"] == 2 * local        # its input: the gathered f32[16,8]
    assert coll.loc["reduce-scatter", "group_size"] == 4
    assert coll.loc["all-to-all", "payload_bytes"] == local and coll.loc["all-to-all", "group_size"] == 4
    permute = coll.loc["collective-permute"]
    assert permute["payload_bytes"] == local and permute["group_size"] == 2
    assert [0, 1] in permute["groups"] and [3, 0] in permute["groups"]


def test_async_halves_count_once(shared_traces):
    """H100 dump: all-gather-start/-done and async-start/-done (reduce-scatter, all-to-all) pairs."""
    from traceview.parsers.hlo.dump import load_hlo_modules

    module = load_hlo_modules(shared_traces / "NVIDIA-JAX-Toolbox" / "maxtext_fsdp4_h100" / "dump")[0][0]
    df = instruction_costs(module)
    by_name = {i.name: (c, i) for c in module.computations.values() for i in c.instructions}
    comp, start = by_name["all-gather-start.4"]
    shapes = comp.by_name()
    operand_bytes = sum(2 * int(np.prod(shapes[o].shape.dims)) for o in start.operands
                        if shapes[o].shape.element_type == "bf16")
    operand_bytes += sum(4 * int(np.prod(shapes[o].shape.dims)) for o in start.operands
                         if shapes[o].shape.element_type == "s32")
    row = df[df["name"] == "all-gather-start.4"].iloc[0]
    assert row["group_size"] == 4 and row["payload_bytes"] == 4 * operand_bytes
    done = df[df["name"] == "all-gather-done.4"].iloc[0]
    assert done["collective_kind"] == "all-gather" and done["payload_bytes"] == 0 and done["bytes_accessed"] == 0
    assert done["group_size"] == 4
    rs = df[df["name"] == "reduce-scatter-start.4"].iloc[0]
    assert rs["opcode"] == "async-start" and rs["collective_kind"] == "reduce-scatter"
    # its inputs: three bf16[2560,8192] and four bf16[2560,1024]-sized arrays
    assert rs["payload_bytes"] == (3 * 2560 * 8192 + 4 * 2560 * 1024) * 2
    assert df[df["name"] == "reduce-scatter-done.4"].iloc[0]["payload_bytes"] == 0
    # Every collective start has a payload, every done none.
    starts = df[(df["collective_kind"] != "") & df["opcode"].str.endswith("start")]
    dones = df[(df["collective_kind"] != "") & df["opcode"].str.endswith("done")]
    assert (starts["payload_bytes"] > 0).all() and (dones["payload_bytes"] == 0).all()
