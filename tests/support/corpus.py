"""A corpus of small JAX programs, compiled on the CPU, with XLA's own cost figures.

Each entry is compiled with ``jax.jit(f).lower(*args).compile()``; the reference
is ``compiled.cost_analysis()`` (XLA's HloCostAnalysis) and the HLO is
``compiled.as_text()`` (the optimized module, the same text that
``--xla_dump_to`` writes as ``*.after_optimizations.txt``).

The sharded programs need 8 host devices, which XLA only grants when
``--xla_force_host_platform_device_count=8`` is set before jax starts its
backend; so the tests run the corpus in a subprocess (``python tests/support/corpus.py
--json OUT``) and importing this module changes nothing in the caller.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

DEVICE_FLAG = "--xla_force_host_platform_device_count=8"


@dataclass
class Program:
    name: str
    fn: Callable
    args: Callable[[], tuple]          # builds the arguments (lazily: cheap import)
    needs_devices: int = 1


@dataclass
class Compiled:
    name: str
    hlo_text: str
    flops: float
    transcendentals: float
    bytes_accessed: float


def _r(*shape, dtype=jnp.float32, seed=0):
    x = np.random.default_rng(seed + len(shape)).standard_normal(shape).astype(np.float32)
    return jnp.asarray(x, dtype=dtype)


def _i(*shape, high=10, dtype=jnp.int32):
    return jnp.asarray(np.random.default_rng(1).integers(0, high, shape), dtype=dtype)


def _conv(lhs, rhs, **kw):
    return lax.conv_general_dilated(lhs, rhs, **kw)


def _attention(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)


def _layer_norm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5) * g + b


def _mlp_loss(w1, w2, x, y):
    h = jax.nn.gelu(x @ w1)
    return jnp.mean((h @ w2 - y) ** 2)


def _scan_rnn(w, xs):
    def step(h, x):
        h = jnp.tanh(h @ w + x)
        return h, h.sum()
    return lax.scan(step, jnp.zeros((xs.shape[1], w.shape[0])), xs)


def _fori(a, b):
    return lax.fori_loop(0, 7, lambda i, x: jnp.sin(x @ b) + i, a)


def _while_unknown(x):
    return lax.while_loop(lambda c: c[1] < c[0].sum(), lambda c: (c[0] * 1.5, c[1] + 1), (x, 0))


def _cond(p, x):
    return lax.cond(p > 0, lambda x: jnp.exp(x) @ x, lambda x: x @ x, x)


def _max_pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")


def _transformer_params():
    ks = [_r(32, 32, seed=i) * 0.1 for i in range(4)]
    return {"qkv": jnp.stack(ks[:3]), "o": ks[3], "w1": _r(32, 64) * 0.1, "w2": _r(64, 32) * 0.1,
            "g": jnp.ones(32), "b": jnp.zeros(32)}


def _transformer_loss(p, x):
    h = _layer_norm(x, p["g"], p["b"])
    q, k, v = (jnp.einsum("bsd,de->bse", h, p["qkv"][i]).reshape(2, 16, 4, 8) for i in range(3))
    a = _attention(q, k, v).reshape(2, 16, 32) @ p["o"]
    x = x + a
    x = x + jax.nn.relu(_layer_norm(x, p["g"], p["b"]) @ p["w1"]) @ p["w2"]
    return jnp.mean(x ** 2)


def _shard_map_collectives(x):
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("a", "b"))

    def body(x):
        s = lax.psum(x, "b")
        g = lax.all_gather(x, "a", tiled=True)
        r = lax.psum_scatter(g, "b", scatter_dimension=0, tiled=True)
        t = lax.all_to_all(x, "b", 1, 1, tiled=True)
        p = lax.ppermute(x, "b", [(i, (i + 1) % 4) for i in range(4)])
        return s + t + p, r

    return jax.shard_map(body, mesh=mesh, in_specs=P("a", "b"), out_specs=(P("a", "b"), P("a", "b")))(x)


def _sharded_matmul(x, w):
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
    x = lax.with_sharding_constraint(x, NamedSharding(mesh, P("data", "model")))
    w = lax.with_sharding_constraint(w, NamedSharding(mesh, P("model", None)))
    y = jnp.tanh(x @ w)
    return lax.with_sharding_constraint(y, NamedSharding(mesh, P("data", None))).sum(0)


PROGRAMS: list[Program] = [
    Program("matmul_f32", lambda a, b: a @ b, lambda: (_r(128, 256), _r(256, 64))),
    Program("matmul_odd_f32", lambda a, b: a @ b, lambda: (_r(33, 77), _r(77, 19))),
    Program("matmul_bf16", lambda a, b: a @ b,
            lambda: (_r(64, 512, dtype=jnp.bfloat16), _r(512, 96, dtype=jnp.bfloat16))),
    Program("matmul_f16", lambda a, b: a @ b, lambda: (_r(40, 72, dtype=jnp.float16), _r(72, 24, dtype=jnp.float16))),
    Program("matmul_int8", lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32),
            lambda: (_i(64, 128, dtype=jnp.int8), _i(128, 32, dtype=jnp.int8))),
    Program("matvec", lambda a, b: a @ b, lambda: (_r(300, 200), _r(200))),
    Program("einsum_batched", lambda a, b: jnp.einsum("bij,bjk->bik", a, b), lambda: (_r(6, 32, 48), _r(6, 48, 16))),
    Program("einsum_multi_contract", lambda a, b: jnp.einsum("abcd,cde->abe", a, b),
            lambda: (_r(4, 5, 6, 7), _r(6, 7, 9))),
    Program("conv2d_stride", lambda x, w: _conv(x, w, window_strides=(2, 2), padding="SAME",
                                                 dimension_numbers=("NHWC", "HWIO", "NHWC")),
            lambda: (_r(2, 17, 17, 8), _r(3, 3, 8, 16))),
    Program("conv2d_rhs_dilation", lambda x, w: _conv(x, w, window_strides=(1, 1), padding="VALID", rhs_dilation=(2, 2),
                                                       dimension_numbers=("NCHW", "OIHW", "NCHW")),
            lambda: (_r(2, 4, 15, 15), _r(6, 4, 3, 3))),
    Program("conv2d_lhs_dilation", lambda x, w: _conv(x, w, window_strides=(1, 1), padding=((2, 2), (1, 1)),
                                                       lhs_dilation=(2, 2), dimension_numbers=("NHWC", "HWIO", "NHWC")),
            lambda: (_r(1, 9, 9, 4), _r(3, 3, 4, 8))),
    Program("conv_depthwise", lambda x, w: _conv(x, w, window_strides=(1, 1), padding="SAME", feature_group_count=8,
                                                 dimension_numbers=("NHWC", "HWIO", "NHWC")),
            lambda: (_r(2, 12, 12, 8), _r(3, 3, 1, 16))),
    Program("conv_batch_group", lambda x, w: _conv(x, w, window_strides=(1, 1), padding="VALID", batch_group_count=2,
                                                   dimension_numbers=("NHWC", "HWIO", "NHWC")),
            lambda: (_r(4, 8, 8, 3), _r(3, 3, 3, 6))),
    Program("conv1d", lambda x, w: _conv(x, w, window_strides=(3,), padding=((1, 2),),
                                         dimension_numbers=("NWC", "WIO", "NWC")),
            lambda: (_r(2, 50, 5), _r(4, 5, 7))),
    Program("conv3d", lambda x, w: _conv(x, w, window_strides=(1, 2, 1), padding="SAME",
                                         dimension_numbers=("NDHWC", "DHWIO", "NDHWC")),
            lambda: (_r(1, 6, 8, 8, 3), _r(2, 3, 3, 3, 4))),
    Program("conv_grad", jax.grad(lambda w, x: _conv(x, w, window_strides=(2, 2), padding="SAME",
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC")).sum(), argnums=(0, 1)),
            lambda: (_r(3, 3, 4, 8), _r(2, 10, 10, 4))),
    Program("attention", _attention, lambda: (_r(2, 16, 4, 32), _r(2, 24, 4, 32), _r(2, 24, 4, 32))),
    Program("attention_bf16", _attention, lambda: tuple(_r(1, 32, 2, 16, dtype=jnp.bfloat16) for _ in range(3))),
    Program("layer_norm", _layer_norm, lambda: (_r(16, 64, 128), _r(128), _r(128))),
    Program("softmax", lambda x: jax.nn.softmax(x, axis=-1), lambda: (_r(64, 1000),)),
    Program("transcendentals", lambda x: jnp.exp(x) + jnp.log1p(jnp.abs(x)) + jnp.sin(x) * jnp.cos(x)
            + jax.nn.sigmoid(x) + x ** 2.5 + lax.erf(x), lambda: (_r(256, 33),)),
    Program("mlp_grad", jax.value_and_grad(_mlp_loss, argnums=(0, 1)),
            lambda: (_r(64, 256), _r(256, 32), _r(48, 64), _r(48, 32))),
    Program("scan_rnn", _scan_rnn, lambda: (_r(32, 32), _r(10, 8, 32))),
    Program("fori_loop", _fori, lambda: (_r(16, 16), _r(16, 16))),
    Program("while_unknown", _while_unknown, lambda: (_r(8, 8),)),
    Program("cond", _cond, lambda: (jnp.float32(1.0), _r(24, 24))),
    Program("gather", lambda x, i: x[i], lambda: (_r(100, 64), _i(37, high=100))),
    Program("take_along_axis", lambda x, i: jnp.take_along_axis(x, i, axis=1),
            lambda: (_r(20, 30), _i(20, 5, high=30))),
    Program("scatter_add", lambda x, i, v: x.at[i].add(v), lambda: (_r(100, 16), _i(40, high=100), _r(40, 16))),
    Program("scatter_set", lambda x, i, v: x.at[i].set(v), lambda: (_r(50, 8), _i(10, high=50), _r(10, 8))),
    Program("sort", lambda x: jnp.sort(x, axis=-1), lambda: (_r(16, 300),)),
    Program("argsort", lambda x: jnp.argsort(x), lambda: (_r(1000),)),
    Program("top_k", lambda x: lax.top_k(x, 5), lambda: (_r(8, 128),)),
    Program("reductions", lambda x: (x.sum(0), x.max(1), jnp.argmax(x, 1), x.mean()), lambda: (_r(64, 48),)),
    Program("cumsum", lambda x: jnp.cumsum(x, axis=1), lambda: (_r(8, 500),)),
    Program("max_pool", _max_pool, lambda: (_r(2, 16, 16, 4),)),
    Program("avg_pool", lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4,
            lambda: (_r(2, 16, 16, 4),)),
    Program("max_pool_grad", jax.grad(lambda x: _max_pool(x).sum()), lambda: (_r(2, 16, 16, 4),)),
    Program("dynamic_slices",
            lambda x, i: lax.dynamic_update_slice(x, lax.dynamic_slice(x, (i, 0), (4, 8)) * 2, (0, i)),
            lambda: (_r(32, 32), jnp.int32(3))),
    Program("data_movement", lambda x: jnp.concatenate([jnp.pad(x, ((1, 2), (0, 0))).T, x[::-1, :].T[:, :3]], axis=1),
            lambda: (_r(12, 20),)),
    Program("random", lambda k: jax.random.normal(k, (64, 64)), lambda: (jax.random.key(0),)),
    Program("fft", lambda x: jnp.fft.rfft(x).real, lambda: (_r(8, 256),)),
    Program("iota_compare", lambda x: jnp.where(jnp.arange(x.shape[0])[:, None] > 3, x, -x), lambda: (_r(64, 16),)),
    Program("switch3", lambda i, x: lax.switch(i, [jnp.sin, lambda x: x @ x, lambda x: jnp.cumsum(x, 0)], x),
            lambda: (jnp.int32(1), _r(16, 16))),
    Program("nested_loops", lambda a: lax.fori_loop(0, 3, lambda i, x: lax.scan(
        lambda c, _: (jnp.tanh(c @ a), None), x, None, length=4)[0], a), lambda: (_r(8, 8),)),
    Program("transformer_block_grad", jax.grad(lambda p, x: _transformer_loss(p, x)),
            lambda: (_transformer_params(), _r(2, 16, 32))),
    Program("fp8_matmul", lambda a, b: lax.dot(a.astype(jnp.float8_e4m3fn), b.astype(jnp.float8_e4m3fn),
                                               preferred_element_type=jnp.float32),
            lambda: (_r(32, 64), _r(64, 16))),
    Program("int4_fp8_fp4", lambda a: (a.astype(jnp.int4), a.astype(jnp.float8_e5m2), a.astype(jnp.float4_e2m1fn),
                                       lax.dot(a.astype(jnp.int4).astype(jnp.int8), a.T.astype(jnp.int8),
                                               preferred_element_type=jnp.int32)),
            lambda: (_r(7, 33) * 4,)),
    Program("int_ops", lambda x, y: (x % y, x >> 2, jnp.clip(x, 1, 5), x // y, lax.population_count(x)),
            lambda: (_i(40, 30, high=100) + 1, _i(40, 30, high=7) + 1)),
    Program("complex", lambda x: jnp.abs(jnp.fft.fft(x.astype(jnp.complex64)) * (1 + 2j)), lambda: (_r(4, 64),)),
    Program("rbg_random", lambda k: jax.random.uniform(jax.random.wrap_key_data(k, impl="rbg"), (32, 32)),
            lambda: (jnp.zeros((4,), jnp.uint32),)),
    Program("reduce_precision_pad", lambda x: lax.reduce_precision(lax.pad(x, 0.0, ((1, -1, 1), (2, 0, 0))), 5, 10),
            lambda: (_r(10, 10),)),
    Program("dus_in_loop", lambda x: lax.fori_loop(0, 5, lambda i, c: lax.dynamic_update_slice(
        c, lax.dynamic_slice_in_dim(c, i, 1) * 2, (i + 1, 0)), x),
            lambda: (_r(8, 6),)),
    Program("shard_map_collectives", _shard_map_collectives, lambda: (_r(16, 32),), needs_devices=8),
    Program("sharded_matmul", _sharded_matmul, lambda: (_r(64, 32), _r(32, 48)), needs_devices=8),
]


def compile_program(p: Program) -> Compiled:
    """Compile one program on the CPU and return XLA's figures and its optimized HLO."""
    compiled = jax.jit(p.fn).lower(*p.args()).compile()
    cost: Any = compiled.cost_analysis()
    if isinstance(cost, list):  # older jax returned one dict per device program
        cost = cost[0]
    return Compiled(p.name, compiled.as_text(), float(cost.get("flops", 0.0)),
                    float(cost.get("transcendentals", 0.0)), float(cost.get("bytes accessed", 0.0)))


def available(p: Program) -> bool:
    return len(jax.devices()) >= p.needs_devices


def main(argv: list[str]) -> None:
    """``corpus.py --json OUT [NAME...]``: compile the programs (all, or those named) and write name,
    HLO text and XLA's figures.
    ``corpus.py DIR``: write each program's optimized HLO text into DIR, for reading."""
    import json
    import sys

    if argv[:1] == ["--json"]:
        records = []
        for p in PROGRAMS:
            if not available(p) or (argv[2:] and p.name not in argv[2:]):
                continue
            c = compile_program(p)
            records.append({"name": c.name, "hlo_text": c.hlo_text, "flops": c.flops,
                            "transcendentals": c.transcendentals, "bytes_accessed": c.bytes_accessed})
        with open(argv[1], "w") as fh:
            json.dump({"jax_version": jax.__version__, "devices": len(jax.devices()), "programs": records}, fh)
        return
    out = argv[0] if argv else "/tmp/corpus"
    os.makedirs(out, exist_ok=True)
    for p in PROGRAMS:
        c = compile_program(p)
        with open(os.path.join(out, p.name + ".txt"), "w") as fh:
            fh.write(c.hlo_text)
        print(f"{p.name:24s} flops={c.flops:12.0f} trans={c.transcendentals:9.0f} bytes={c.bytes_accessed:12.0f}",
              file=sys.stdout)


if __name__ == "__main__":
    import sys

    if DEVICE_FLAG not in os.environ.get("XLA_FLAGS", ""):  # before jax starts its backend
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + DEVICE_FLAG).strip()
    main(sys.argv[1:])
