"""Capture traceview's sample traces: real JAX programs profiled on the CPU.

Run from the repository root:

    python sample_traces/capture.py [--out DIR] [--only NAME ...]

Each sample runs in its own Python subprocess, because XLA_FLAGS (the HLO dump
folder, the number of fake CPU devices) must be set before JAX initialises.
The worker compiles the training step ahead of time (warm-up stays outside the
traced region), times untraced steps, then traces a few steps, each under
``jax.profiler.StepTraceAnnotation("train", step_num=i)``. The parent then
moves the results into a stable layout:

    <out>/<name>/plugins/profile/<name>/localhost.xplane.pb
    <out>/<name>/hlo/module_NNNN.<module>.{before,cpu_after}_optimizations.{txt,hlo.pb}
    <out>/<name>/capture.json

Only the HLO dumps of the modules that actually ran inside the trace are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HOST = "localhost"  # stable host name: XProf takes the host from the file stem
TRACED_STEPS = 5
TIMED_STEPS = 10
WARMUP_STEPS = 2
KEPT_DUMP_SUFFIXES = (".before_optimizations.txt", ".cpu_after_optimizations.txt",
                      ".before_optimizations.hlo.pb", ".cpu_after_optimizations.hlo.pb")

# name -> (builder function name, fake CPU device count, config)
MLP_CONFIG = {"batch": 256, "d_in": 512, "hidden": 1024, "layers": 2, "d_out": 128, "lr": 1e-3}
SAMPLES: dict[str, tuple[str, int, dict[str, Any]]] = {
    "mlp": ("build_mlp", 1, MLP_CONFIG),
    "transformer": ("build_transformer", 1,
                    {"batch": 8, "seq": 64, "d_model": 128, "heads": 4, "d_ff": 512, "layers": 2, "lr": 1e-3}),
    "sharded": ("build_sharded", 8,
                {"mesh": {"data": 4, "model": 2}, "batch": 256, "d_in": 512, "hidden": 1024,
                 "d_out": 512, "lr": 1e-3}),
    # Parallelism samples (traceview parallelism): one role per mesh axis.
    "fsdp": ("build_fsdp", 8,
             {"mesh": {"fsdp": 8}, "batch": 256, "d_in": 256, "hidden": 512, "d_out": 256, "lr": 1e-3}),
    "tensor_parallel": ("build_tensor_parallel", 8,
                        {"mesh": {"data": 2, "model": 4}, "batch": 128, "d_in": 256, "hidden": 1024,
                         "d_out": 256, "lr": 1e-3}),
    # Context, pipeline and expert parallelism (the 2-D FSDP x tensor-parallel step is "sharded").
    "ring_attention": ("build_ring_attention", 8,
                       {"mesh": {"context": 4, "data": 2}, "traced_steps": 1, "batch": 4, "seq": 384, "d_model": 128, "heads": 4,
                        "kv_heads": 2, "head_dim": 32, "lr": 1e-3}),
    "pipeline": ("build_pipeline", 8,
                 {"mesh": {"stage": 4, "data": 2}, "traced_steps": 2, "microbatches": 6, "batch": 96, "d_model": 128, "lr": 1e-3}),
    # An MPMD pipeline: a separately jitted program per stage, each on its own device, activations moved
    # stage to stage with jax.device_put; m microbatches in a GPipe forward schedule.
    "pipeline_mpmd": ("build_pipeline_mpmd", 8,
                      {"stages": 4, "traced_steps": 3, "microbatches": 4, "rows": 64, "d_model": 256,
                       "layers_per_stage": 2}),
    "moe": ("build_moe", 8,
            {"mesh": {"expert": 8}, "traced_steps": 3, "experts": 8, "top_k": 2, "capacity": 16, "batch": 512, "d_model": 64,
             "d_ff": 128, "lr": 1e-3}),
    # Regression pair for `traceview diff` / `check`: the very same program as
    # mlp, captured again, and the same program with 2x wider hidden layers.
    "mlp_repeat": ("build_mlp", 1, MLP_CONFIG),
    "mlp_slow": ("build_mlp", 1, {**MLP_CONFIG, "hidden": 2048}),
    # Serving sample (traceview inference): a decoder-only transformer with an explicit KV cache,
    # a jitted prefill and a jitted decode step (cache donated), `requests` rounds of one prefill
    # and `decode_steps` decode steps each.
    "serving": ("build_serving", 1,
                {"vocab": 512, "d_model": 128, "heads": 4, "d_ff": 512, "layers": 2, "batch": 4,
                 "prompt": 16, "max_seq": 64, "decode_steps": 6, "requests": 2, "dtype": "bfloat16"}),
    # The mlp program traced with create_perfetto_trace=True: the run holds both the xplane and the
    # Perfetto trace-event JSON JAX writes beside it (the two readers must agree on one capture).
    "mlp_perfetto": ("build_mlp", 1, MLP_CONFIG),
    # traceview analyze's idle causes: a small MLP whose host loads each batch in Python and numpy
    # between the steps, so the device waits for the host (host-bound).
    "host_bound": ("build_host_bound", 1,
                   {"batch": 128, "d_in": 256, "hidden": 512, "layers": 2, "d_out": 64, "lr": 1e-3,
                    "pool_rows": 4096, "features_per_row": 24}),
}
# Samples whose worker is not a training loop: builder name -> the worker that runs and traces it.
SERVING_BUILDERS = {"build_serving", "build_paged_serving"}
# Samples traced with jax.profiler.trace(..., create_perfetto_trace=True); their run keeps the JSON.
PERFETTO_SAMPLES = {"mlp_perfetto"}
PERFETTO_FILE = "perfetto_trace.json.gz"
# sample -> (reference sample, lowest and highest (None: no limit) allowed
# ratio of its median traced step time to the reference's). mlp_slow does 3.4x
# the FLOPs (2.7x the bytes) of mlp. Checked against the reference in `out`,
# so capture the reference first (SAMPLES order does).
TIMING_CHECKS: dict[str, tuple[str, float, float | None]] = {
    "mlp_repeat": ("mlp", 0.9, 1.1),
    "mlp_slow": ("mlp", 1.5, None),
}
MAX_ATTEMPTS = 8
RETRY_PAUSE_S = 10


# --------------------------------------------------------------------------
# Programs (run inside the worker subprocess only; jax is imported lazily).
# Each builder returns (description, step_fn compiled, state, batches).
# step(state, batch) -> (state, loss)
# --------------------------------------------------------------------------

def build_mlp(cfg: dict[str, Any]):
    """A dense ReLU MLP regressor trained by plain SGD on a squared loss."""
    import jax
    import jax.numpy as jnp

    dims = [cfg["d_in"]] + [cfg["hidden"]] * cfg["layers"] + [cfg["d_out"]]
    keys = jax.random.split(jax.random.PRNGKey(0), len(dims))
    params = [
        (jax.random.normal(k, (a, b), jnp.float32) / jnp.sqrt(a), jnp.zeros((b,), jnp.float32))
        for k, a, b in zip(keys[:-1], dims[:-1], dims[1:])
    ]

    def loss_fn(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = jax.nn.relu(h)
        return jnp.mean((h - y) ** 2)

    def train_step(params, batch):
        x, y = batch
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        params = jax.tree.map(lambda p, g: p - cfg["lr"] * g, params, grads)
        return params, loss

    batches = _regression_batches(cfg["batch"], cfg["d_in"], cfg["d_out"])
    compiled = jax.jit(train_step).lower(params, batches[0]).compile()
    desc = (f"MLP {' -> '.join(map(str, dims))}, ReLU, mean squared loss, "
            f"value_and_grad, SGD lr={cfg['lr']}, f32, batch {cfg['batch']}")
    return desc, compiled, params, batches


def build_host_bound(cfg: dict[str, Any]):
    """build_mlp's model fed by :func:`load_batch`: each step's batch is made on the host, in Python and
    numpy, inside the step and before the jitted call (no prefetch), so the device waits for it."""
    import numpy as np

    desc, compiled, params, _ = build_mlp(cfg)

    def batches(i: int):
        return load_batch(i, cfg)

    x, y = load_batch(0, cfg)
    assert x.shape == (cfg["batch"], cfg["d_in"]) and x.dtype == np.float32 and y.shape == (cfg["batch"], cfg["d_out"])
    return (desc + f"; each batch made on the host by load_batch (numpy sort/normalise over {cfg['pool_rows']} "
            f"rows, then a Python loop of {cfg['features_per_row']} features per row) before each step"), \
        compiled, params, batches


def load_batch(i: int, cfg: dict[str, Any]):
    """A deliberately slow input pipeline: numpy work on a pool of rows, then per-row Python feature code."""
    import numpy as np

    rng = np.random.default_rng(i)
    pool = rng.standard_normal((cfg["pool_rows"], cfg["d_in"])).astype(np.float32)
    pool = np.sort(pool, axis=1)                                   # "augmentation"
    rows = pool[rng.choice(cfg["pool_rows"], cfg["batch"], replace=False)]
    rows = (rows - rows.mean(axis=0)) / (rows.std(axis=0) + 1e-6)
    x = np.empty((cfg["batch"], cfg["d_in"]), dtype=np.float32)
    for r in range(cfg["batch"]):                                 # per-row Python: a tokenizer's worth of work
        features = [float(v) * 0.5 for v in rows[r, : cfg["features_per_row"]]]
        x[r] = rows[r]
        x[r, : len(features)] = features
    y = x[:, : cfg["d_out"]] * 0.1
    return x, y


def build_transformer(cfg: dict[str, Any]):
    """A small pre-LayerNorm transformer (causal MHA + GELU MLP blocks), SGD, with JAX named scopes:
    Transformer/layer_<i>/{ln1,attn/{qkv,scores,softmax,context,out},ln2,mlp/{up,gelu,down}} and
    loss / sgd, so every op's op_name metadata carries the model's hierarchy (traceview scopes)."""
    import jax
    import jax.numpy as jnp

    d, f, nh, n_layers = cfg["d_model"], cfg["d_ff"], cfg["heads"], cfg["layers"]
    hd = d // nh
    import numpy as np

    rng = np.random.default_rng(0)

    def dense(shape):   # numpy: no jitted initialiser modules to bloat the trace's HLO metadata
        return jnp.asarray(rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[0]))

    params = [{
        "ln1": {"g": jnp.ones((d,)), "b": jnp.zeros((d,))},
        "wqkv": dense((d, 3 * d)), "wo": dense((d, d)),
        "ln2": {"g": jnp.ones((d,)), "b": jnp.zeros((d,))},
        "w1": dense((d, f)), "b1": jnp.zeros((f,)), "w2": dense((f, d)), "b2": jnp.zeros((d,)),
    } for _ in range(n_layers)]

    def layer_norm(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * p["g"] + p["b"]

    def attention(p, x):
        bsz, s, _ = x.shape
        with jax.named_scope("qkv"):
            qkv = x @ p["wqkv"]
            q, kk, v = jnp.split(qkv.reshape(bsz, s, 3, nh, hd), 3, axis=2)
            q, kk, v = (t.squeeze(2) for t in (q, kk, v))           # [b, s, h, hd]
        with jax.named_scope("scores"):
            scores = jnp.einsum("bqhd,bkhd->bhqk", q, kk) / jnp.sqrt(hd)
            scores = jnp.where(jnp.tril(jnp.ones((s, s), bool)), scores, -1e9)
        with jax.named_scope("softmax"):
            weights = jax.nn.softmax(scores, -1)
        with jax.named_scope("context"):
            context = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
        with jax.named_scope("out"):
            return context.reshape(bsz, s, d) @ p["wo"]

    def mlp(p, x):
        with jax.named_scope("up"):
            h = x @ p["w1"] + p["b1"]
        with jax.named_scope("gelu"):
            h = jax.nn.gelu(h)
        with jax.named_scope("down"):
            return h @ p["w2"] + p["b2"]

    def block(p, x):
        with jax.named_scope("ln1"):
            h = layer_norm(x, p["ln1"])
        with jax.named_scope("attn"):
            x = x + attention(p, h)
        with jax.named_scope("ln2"):
            h = layer_norm(x, p["ln2"])
        with jax.named_scope("mlp"):
            return x + mlp(p, h)

    def model(layers, x):
        with jax.named_scope("Transformer"):
            for i, p in enumerate(layers):
                with jax.named_scope(f"layer_{i}"):
                    x = block(p, x)
            return x

    def loss_fn(layers, x, y):
        out = model(layers, x)
        with jax.named_scope("loss"):
            return jnp.mean((out - y) ** 2)

    def train_step(params, batch):
        x, y = batch
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        with jax.named_scope("sgd"):
            params = jax.tree.map(lambda a, g: a - cfg["lr"] * g, params, grads)
        return params, loss

    shape = (cfg["batch"], cfg["seq"], d)
    batches = _regression_batches(shape[:2], d, d)
    compiled = jax.jit(train_step).lower(params, batches[0]).compile()
    desc = (f"{n_layers} pre-LN transformer blocks under named scopes: causal MHA ({nh} heads of {hd}), "
            f"GELU MLP {d}->{f}->{d}, mean squared loss, value_and_grad, SGD, f32, "
            f"x [{cfg['batch']}, {cfg['seq']}, {d}]")
    return desc, compiled, params, batches


def build_sharded(cfg: dict[str, Any]):
    """A 2-layer MLP with FSDP over 'data' and Megatron-style TP over 'model'.

    Written with shard_map and explicit collectives so the optimized HLO is
    certain to hold all-gather (weights gathered over 'data'), all-reduce
    (psum of the row-parallel output over 'model', loss mean over 'data')
    and reduce-scatter (weight gradients scattered back over 'data').
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    nd, nm = cfg["mesh"]["data"], cfg["mesh"]["model"]
    mesh = Mesh(_device_grid(jax.devices(), nd, nm), ("data", "model"))
    d_in, hid, d_out, lr = cfg["d_in"], cfg["hidden"], cfg["d_out"], cfg["lr"]
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    w_specs = (P("data", "model"), P("model", "data"))
    w1 = jax.random.normal(k1, (d_in, hid), jnp.float32) / jnp.sqrt(d_in)
    w2 = jax.random.normal(k2, (hid, d_out), jnp.float32) / jnp.sqrt(hid)
    params = tuple(jax.device_put(w, NamedSharding(mesh, s)) for w, s in zip((w1, w2), w_specs))

    def local_loss(w1g, w2g, x, y):
        h = jax.nn.relu(x @ w1g)                         # column-parallel
        out = jax.lax.psum(h @ w2g, "model")             # row-parallel -> all-reduce
        return jnp.mean((out - y) ** 2)

    def shard_step(w1s, w2s, x, y):
        w1g = jax.lax.all_gather(w1s, "data", axis=0, tiled=True)   # all-gather
        w2g = jax.lax.all_gather(w2s, "data", axis=1, tiled=True)
        loss, (g1, g2) = jax.value_and_grad(local_loss, argnums=(0, 1))(w1g, w2g, x, y)
        g1 = jax.lax.psum_scatter(g1, "data", scatter_dimension=0, tiled=True) / nd  # reduce-scatter
        g2 = jax.lax.psum_scatter(g2, "data", scatter_dimension=1, tiled=True) / nd
        return w1s - lr * g1, w2s - lr * g2, jax.lax.pmean(loss, "data")

    compiled, batches = _compile_two_layer_step(shard_step, mesh, w_specs, "data", params, cfg)
    desc = (f"MLP {d_in}->{hid}->{d_out} on {nd * nm} CPU devices, mesh data={nd} x model={nm}, "
            "shard_map: weights FSDP-sharded over 'data' (all_gather) and tensor-parallel over "
            "'model' (psum of the row-parallel matmul), gradients psum_scatter over 'data', "
            "loss pmean over 'data'; SGD, f32")
    return desc, compiled, params, batches


def build_fsdp(cfg: dict[str, Any]):
    """A 2-layer MLP, fully sharded data parallel (ZeRO-3) over one mesh axis 'fsdp'.

    The batch and both weights are split over 'fsdp'; each step all-gathers
    the weights (parameter all-gather), and scatters the weight gradients back
    with psum_scatter (gradient reduce-scatter): the book's FSDP pattern.
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    n = cfg["mesh"]["fsdp"]
    mesh = Mesh(_device_grid(jax.devices(), n, 1).reshape(n), ("fsdp",))
    d_in, hid, d_out, lr = cfg["d_in"], cfg["hidden"], cfg["d_out"], cfg["lr"]
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    w1 = jax.random.normal(k1, (d_in, hid), jnp.float32) / jnp.sqrt(d_in)
    w2 = jax.random.normal(k2, (hid, d_out), jnp.float32) / jnp.sqrt(hid)
    w_spec = P("fsdp", None)
    params = tuple(jax.device_put(w, NamedSharding(mesh, w_spec)) for w in (w1, w2))

    def local_loss(w1g, w2g, x, y):
        return jnp.mean((jax.nn.relu(x @ w1g) @ w2g - y) ** 2)

    def shard_step(w1s, w2s, x, y):
        w1g = jax.lax.all_gather(w1s, "fsdp", axis=0, tiled=True)
        w2g = jax.lax.all_gather(w2s, "fsdp", axis=0, tiled=True)
        loss, (g1, g2) = jax.value_and_grad(local_loss, argnums=(0, 1))(w1g, w2g, x, y)
        g1 = jax.lax.psum_scatter(g1, "fsdp", scatter_dimension=0, tiled=True) / n
        g2 = jax.lax.psum_scatter(g2, "fsdp", scatter_dimension=0, tiled=True) / n
        return w1s - lr * g1, w2s - lr * g2, jax.lax.pmean(loss, "fsdp")

    compiled, batches = _compile_two_layer_step(shard_step, mesh, (w_spec, w_spec), "fsdp", params, cfg)
    desc = (f"MLP {d_in}->{hid}->{d_out} on {n} CPU devices, mesh fsdp={n}, shard_map: batch and "
            "weights split over 'fsdp', weights all_gather'ed each step, gradients psum_scatter "
            f"over 'fsdp', loss pmean; per-device batch {cfg['batch'] // n}; SGD, f32")
    return desc, compiled, params, batches


def build_tensor_parallel(cfg: dict[str, Any]):
    """A Megatron MLP: tensor parallel over 'model', plain data parallel over 'data'.

    w1 is column-parallel and w2 row-parallel over 'model' (the row-parallel
    output is psum'ed over 'model': an activation all-reduce); the weights are
    replicated over 'data' and their gradients psum'ed over 'data' (gradient
    all-reduce): the book's data-parallel pattern on the other axis.
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    nd, nm = cfg["mesh"]["data"], cfg["mesh"]["model"]
    mesh = Mesh(_device_grid(jax.devices(), nd, nm), ("data", "model"))
    d_in, hid, d_out, lr = cfg["d_in"], cfg["hidden"], cfg["d_out"], cfg["lr"]
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    w_specs = (P(None, "model"), P("model", None))
    w1 = jax.random.normal(k1, (d_in, hid), jnp.float32) / jnp.sqrt(d_in)
    w2 = jax.random.normal(k2, (hid, d_out), jnp.float32) / jnp.sqrt(hid)
    params = tuple(jax.device_put(w, NamedSharding(mesh, s)) for w, s in zip((w1, w2), w_specs))

    def local_loss(w1s, w2s, x, y):
        h = jax.nn.relu(x @ w1s)                          # column-parallel
        out = jax.lax.psum(h @ w2s, "model")              # row-parallel -> all-reduce
        return jnp.mean((out - y) ** 2)

    def shard_step(w1s, w2s, x, y):
        loss, (g1, g2) = jax.value_and_grad(local_loss, argnums=(0, 1))(w1s, w2s, x, y)
        g1 = jax.lax.pmean(g1, "data")                    # gradient all-reduce
        g2 = jax.lax.pmean(g2, "data")
        return w1s - lr * g1, w2s - lr * g2, jax.lax.pmean(loss, "data")

    compiled, batches = _compile_two_layer_step(shard_step, mesh, w_specs, "data", params, cfg)
    desc = (f"MLP {d_in}->{hid}->{d_out} on {nd * nm} CPU devices, mesh data={nd} x model={nm}, "
            "shard_map: w1 column-parallel and w2 row-parallel over 'model' (psum of the "
            f"row-parallel matmul, per-shard width {hid // nm}), weights replicated over 'data' "
            "with gradients pmean'ed over 'data', loss pmean over 'data'; SGD, f32")
    return desc, compiled, params, batches


def build_serving(cfg: dict[str, Any]):
    """A decoder-only transformer (RMSNorm, causal MHA, GELU MLP, tied nothing) served from an explicit
    KV cache: ``prefill(params, cache, prompt) -> (next token, cache)`` writes the prompt's keys and values
    at positions 0..prompt-1; ``decode(params, cache, token, pos) -> (next token, cache)`` writes one
    position per sequence and attends over the whole cache (masked past ``pos``). Both are jitted with the
    cache donated, so XLA aliases it to the output and updates it in place (dynamic-update-slice).

    Returns (description, prefill compiled, decode compiled, params, cache, prompts)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    dt = jnp.dtype(cfg["dtype"])
    V, D, H, F, L = cfg["vocab"], cfg["d_model"], cfg["heads"], cfg["d_ff"], cfg["layers"]
    B, P, S = cfg["batch"], cfg["prompt"], cfg["max_seq"]
    hd = D // H
    # numpy makes the arrays: a jax.random call would compile a program of its own, and the trace keeps
    # the HLO of every program the process compiled
    rng = np.random.default_rng(0)

    def put(array):
        return jax.device_put(np.asarray(array).astype(dt))

    def dense(shape):
        return put(rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[0]))

    params = {"embed": dense((V, D)), "unembed": dense((D, V)), "norm": put(np.ones(D)),
              "layers": [{"norm1": put(np.ones(D)), "wq": dense((D, D)), "wk": dense((D, D)),
                          "wv": dense((D, D)), "wo": dense((D, D)), "norm2": put(np.ones(D)),
                          "w1": dense((D, F)), "w2": dense((F, D))} for _ in range(L)]}
    cache = {"k": put(np.zeros((L, B, S, H, hd))), "v": put(np.zeros((L, B, S, H, hd)))}

    def rms(x, g):
        x32 = x.astype(jnp.float32)
        return (x32 * jax.lax.rsqrt((x32 * x32).mean(-1, keepdims=True) + 1e-6)).astype(dt) * g

    def forward(params, cache, tokens, pos):
        """tokens [B, T] at positions pos..pos+T-1; returns (logits of the last position, cache)."""
        T = tokens.shape[1]
        x = params["embed"][tokens]                                        # [B, T, D]
        q_pos = pos + jnp.arange(T)
        mask = jnp.arange(S)[None, :] <= q_pos[:, None]                    # [T, S] causal over the cache
        for i, lp in enumerate(params["layers"]):
            h = rms(x, lp["norm1"])
            q, k, v = ((h @ lp[w]).reshape(B, T, H, hd) for w in ("wq", "wk", "wv"))
            cache = {"k": jax.lax.dynamic_update_slice(cache["k"], k[None], (i, 0, pos, 0, 0)),
                     "v": jax.lax.dynamic_update_slice(cache["v"], v[None], (i, 0, pos, 0, 0))}
            scores = jnp.einsum("bthd,bshd->bhts", q, cache["k"][i]) / jnp.sqrt(hd).astype(dt)
            scores = jnp.where(mask[None, None], scores.astype(jnp.float32), -1e9)
            attn = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, -1).astype(dt), cache["v"][i])
            x = x + attn.reshape(B, T, D) @ lp["wo"]
            x = x + jax.nn.gelu(rms(x, lp["norm2"]) @ lp["w1"]) @ lp["w2"]
        logits = rms(x[:, -1], params["norm"]) @ params["unembed"]          # [B, V]
        return logits, cache

    def prefill(params, cache, prompt):
        logits, cache = forward(params, cache, prompt, 0)
        return jnp.argmax(logits, -1).astype(jnp.int32)[:, None], cache

    def decode(params, cache, token, pos):
        logits, cache = forward(params, cache, token, pos)
        return jnp.argmax(logits, -1).astype(jnp.int32)[:, None], cache

    prompts = [jax.device_put(rng.integers(0, V, (B, P), dtype=np.int32)) for _ in range(cfg["requests"])]
    token = jax.device_put(np.zeros((B, 1), np.int32))
    prefill_c = jax.jit(prefill, donate_argnums=1).lower(params, cache, prompts[0]).compile()
    decode_c = jax.jit(decode, donate_argnums=1).lower(params, cache, token, np.int32(P)).compile()
    jax.block_until_ready(prompts)
    desc = (f"decoder-only transformer, {L} layers, d_model {D}, {H} heads of {hd}, MLP {D}->{F}->{D}, "
            f"vocab {V}, {cfg['dtype']} weights and KV cache [{L}, {B}, {S}, {H}, {hd}] x2 (k, v); "
            f"jitted prefill of a [{B}, {P}] prompt and jitted decode step of [{B}, 1] tokens, cache "
            f"donated; {cfg['requests']} rounds of one prefill + {cfg['decode_steps']} greedy decode steps")
    return desc, prefill_c, decode_c, params, cache, prompts


# Paged-attention serving (traceview inference): per-layer K and V page pools addressed by a page table, one
# step program for a ragged batch mixing prefill and decode tokens and one for decode only (built and run by
# capture_paged.py). Declared here, below the builders, so the samples' recorded source lines stay where they
# were captured (tests/integration/test_scopes.py reads them back from this file).
SAMPLES["paged_serving"] = ("build_paged_serving", 1,
                            {"vocab": 256, "d_model": 64, "heads": 4, "kv_heads": 2, "layers": 2, "pages": 32,
                             "page_size": 8, "pages_per_sequence": 4, "sequences": 4, "mixed_tokens": 16,
                             "prompts": [7, 5], "decode_steps": 4, "dtype": "bfloat16"})


def run_serving_worker(name: str, work: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """Warm up, then trace ``requests`` rounds of prefill + decode steps, each call one step
    (``StepTraceAnnotation("serve", step_num=i)``); returns the capture metadata."""
    import jax
    import numpy as np

    desc, prefill_c, decode_c, params, cache, prompts = build_serving(cfg)
    P = cfg["prompt"]

    def one_request(prompt, step0: int | None):
        nonlocal cache
        calls, step = [], step0
        for i in range(cfg["decode_steps"] + 1):
            ctx = (jax.profiler.StepTraceAnnotation("serve", step_num=step) if step is not None
                   else _null_context())
            t0 = time.perf_counter()
            with ctx:
                if i == 0:
                    token, cache = prefill_c(params, cache, prompt)
                else:
                    token, cache = decode_c(params, cache, token, np.int32(P + i - 1))  # no convert program
                jax.block_until_ready((token, cache))
            calls.append(("prefill" if i == 0 else "decode", time.perf_counter() - t0))
            step = None if step is None else step + 1
        return calls

    for _ in range(WARMUP_STEPS):
        one_request(prompts[0], None)
    calls = []
    with jax.profiler.trace(str(work / "log")):
        for r, prompt in enumerate(prompts):
            calls += one_request(prompt, r * (cfg["decode_steps"] + 1))

    def sizes(tree):
        return {"/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path):
                f"{leaf.dtype}{list(leaf.shape)}" for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}

    from capture_paged import module_costs  # beside this script (its folder is on sys.path)

    costs = module_costs(prefill_c, decode_c)
    return {"program": desc, "config": cfg, "param_shapes": sizes(params), "cache_shapes": sizes(cache),
            "calls": [c for c, _ in calls], "traced_step_times_s": [t for _, t in calls],
            "xla_cost_analysis": costs}


class _null_context:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def build_ring_attention(cfg: dict[str, Any]):
    """Context parallelism: ring attention over mesh axis 'context' (shard_map + ppermute).

    The sequence is split over 'context'; each chip keeps its query block and
    passes its key/value blocks around the ring with ``ppermute`` inside a
    ``fori_loop`` of ``context`` steps, accumulating an online softmax: the
    book's ring attention. The batch is split over 'data'; the projection
    weights are replicated and their gradients pmean'ed over both axes (data
    parallelism's gradient all-reduce, over 'context+data').
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    n, nd = cfg["mesh"]["context"], cfg["mesh"]["data"]
    mesh = Mesh(_device_grid(jax.devices(), n, nd), ("context", "data"))
    d, heads, kv_heads, hd, lr = cfg["d_model"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["lr"]
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    shapes = ((d, heads * hd), (d, kv_heads * hd), (d, kv_heads * hd), (heads * hd, d))
    params = tuple(jax.device_put(jax.random.normal(k, s, jnp.float32) / jnp.sqrt(s[0]),
                                  NamedSharding(mesh, P())) for k, s in zip(keys, shapes))
    ring = [(i, (i + 1) % n) for i in range(n)]

    def attention(wq, wk, wv, wo, x):
        b, s, _ = x.shape
        q = (x @ wq).reshape(b, s, heads, hd)
        k = (x @ wk).reshape(b, s, kv_heads, hd)
        v = (x @ wv).reshape(b, s, kv_heads, hd)
        group = heads // kv_heads

        def step(_, carry):
            k, v, num, den, top = carry
            kk, vv = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
            scores = jnp.einsum("bqhd,bkhd->bhqk", q, kk) / jnp.sqrt(hd)
            new_top = jnp.maximum(top, scores.max(-1))
            scale, p = jnp.exp(top - new_top), jnp.exp(scores - new_top[..., None])
            num = num * scale[..., None] + jnp.einsum("bhqk,bkhd->bhqd", p, vv)
            den = den * scale + p.sum(-1)
            k, v = jax.lax.ppermute(k, "context", ring), jax.lax.ppermute(v, "context", ring)
            return k, v, num, den, new_top

        init = (k, v, jnp.zeros((b, heads, s, hd)), jnp.zeros((b, heads, s)),
                jnp.full((b, heads, s), -jnp.inf))
        _, _, num, den, _ = jax.lax.fori_loop(0, n, step, init)
        out = (num / den[..., None]).transpose(0, 2, 1, 3).reshape(b, s, heads * hd)
        return out @ wo

    def shard_step(wq, wk, wv, wo, x, y):
        def loss_fn(ws):
            return jnp.mean((attention(*ws, x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)((wq, wk, wv, wo))
        grads = jax.lax.pmean(grads, ("context", "data"))  # replicated weights: gradient all-reduce
        new = tuple(w - lr * g for w, g in zip((wq, wk, wv, wo), grads))
        return (*new, jax.lax.pmean(loss, ("context", "data")))

    seq_spec = P("data", "context", None)
    step = jax.shard_map(shard_step, mesh=mesh, in_specs=(P(), P(), P(), P(), seq_spec, seq_spec),
                         out_specs=(P(), P(), P(), P(), P()), check_vma=False)

    def train_step(params, batch):
        *new, loss = step(*params, *batch)
        return tuple(new), loss

    data_sharding = NamedSharding(mesh, seq_spec)
    batches = [tuple(jax.device_put(a, data_sharding) for a in b)
               for b in _regression_batches((cfg["batch"], cfg["seq"]), d, d)]
    compiled = jax.jit(train_step).lower(params, batches[0]).compile()
    desc = (f"ring attention (context parallel) on {n * nd} CPU devices, mesh context={n} x data={nd}, shard_map: "
            f"batch split over 'data', sequence {cfg['seq']} split over 'context' ({cfg['seq'] // n} per chip), "
            f"{heads} query heads, {kv_heads} "
            f"key/value heads of {hd}, K/V blocks ppermute'd around the ring in a fori_loop of {n} steps "
            "(online softmax); weights replicated, gradients pmean over both axes; SGD, f32")
    return desc, compiled, params, batches


def build_pipeline(cfg: dict[str, Any]):
    """An SPMD pipeline (GPipe schedule) over 'stage', data parallel over 'data'.

    Each stage holds one layer (the weights stacked [stages, D, D], split over
    'stage'). One scan of m + p - 1 iterations: every stage runs its layer on
    the activation it holds, then passes it to the next stage with ``ppermute``;
    stage 0 takes microbatch t at iteration t, the last stage emits microbatch
    t - (p - 1). The bubble is (p - 1) / (m + p - 1).
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    p, nd = cfg["mesh"]["stage"], cfg["mesh"]["data"]
    mesh = Mesh(_device_grid(jax.devices(), p, nd), ("stage", "data"))
    m, d, lr = cfg["microbatches"], cfg["d_model"], cfg["lr"]
    w = jax.random.normal(jax.random.PRNGKey(0), (p, d, d), jnp.float32) / jnp.sqrt(d)
    params = (jax.device_put(w, NamedSharding(mesh, P("stage", None, None))),)
    ring = [(i, (i + 1) % p) for i in range(p)]

    def forward(ws, xs):
        stage = jax.lax.axis_index("stage")
        w = ws[0]

        def tick(held, t):
            fed = jnp.where(stage == 0, xs[jnp.minimum(t, m - 1)], held)
            out = jnp.tanh(fed @ w)
            return jax.lax.ppermute(out, "stage", ring), out

        _, outs = jax.lax.scan(tick, jnp.zeros_like(xs[0]), jnp.arange(m + p - 1))
        return outs[p - 1:]                               # the last stage's outputs, microbatch order

    def shard_step(ws, x, y):
        xs, ys = x.reshape(m, -1, d), y.reshape(m, -1, d)

        def loss_fn(ws):
            last = jax.lax.axis_index("stage") == p - 1
            err = jnp.where(last, jnp.mean((forward(ws, xs) - ys) ** 2), 0.0)
            return jax.lax.psum(err, "stage")

        loss, g = jax.value_and_grad(loss_fn)(ws)
        g = jax.lax.pmean(g, "data")                        # gradient all-reduce over 'data'
        return ws - lr * g, jax.lax.pmean(loss, "data")

    step = jax.shard_map(shard_step, mesh=mesh, in_specs=(P("stage", None, None), P("data", None), P("data", None)),
                         out_specs=(P("stage", None, None), P()), check_vma=False)

    def train_step(params, batch):
        new, loss = step(params[0], *batch)
        return (new,), loss

    data_sharding = NamedSharding(mesh, P("data", None))
    batches = [tuple(jax.device_put(a, data_sharding) for a in b)
               for b in _regression_batches(cfg["batch"], d, d)]
    compiled = jax.jit(train_step).lower(params, batches[0]).compile()
    desc = (f"SPMD pipeline on {p * nd} CPU devices, mesh stage={p} x data={nd}: one {d}x{d} tanh layer per "
            f"stage, {m} microbatches of {cfg['batch'] // nd // m} rows per data shard, a scan of m + p - 1 = "
            f"{m + p - 1} ticks passing activations to the next stage with ppermute (GPipe schedule, bubble "
            f"(p-1)/(m+p-1) = {(p - 1) / (m + p - 1):.4f}); gradients pmean over 'data'; SGD, f32")
    return desc, compiled, params, batches


class _StagePrograms:
    """An MPMD pipeline's step: one compiled program per stage, each on its own device, run in a GPipe
    forward schedule (every microbatch through stage 0, 1, ..., p - 1, activations moved to the next
    stage's device with ``jax.device_put``). JAX dispatches asynchronously: stage s runs microbatch j
    while stage s + 1 runs microbatch j - 1; each stage waits on its neighbour before its first and
    after its last microbatch (the bubble)."""

    def __init__(self, programs, devices, microbatches: int):
        self.programs, self.devices, self.m = programs, devices, microbatches

    def __call__(self, weights, batch):
        import jax

        xs, ys = batch
        losses = []
        for j in range(self.m):
            h = xs[j]
            for s, program in enumerate(self.programs[:-1]):
                h = jax.device_put(program(weights[s], h), self.devices[s + 1])
            losses.append(self.programs[-1](weights[-1], h, ys[j]))
        return weights, sum(float(v) for v in losses) / self.m

    def cost_analysis(self):
        totals: dict[str, float] = {}
        for program in self.programs:
            cost = program.cost_analysis()
            cost = cost[0] if isinstance(cost, list) else cost
            for k, v in (cost or {}).items():
                totals[k] = totals.get(k, 0.0) + float(v)
        return totals

    def as_text(self):
        return self.programs[0].as_text()


def build_pipeline_mpmd(cfg: dict[str, Any]):
    """An MPMD pipeline: p stages, each a separately jitted program (its own HLO module) on its own device.

    Stage s holds ``layers_per_stage`` tanh layers of [D, D] (weights placed with jax.device_put on device
    s); the last stage also computes the microbatch's squared-error loss. No collectives: the activations
    move between programs with jax.device_put. Forward only (an inference-style GPipe fill and drain):
    the bubble is (p - 1)/(m + p - 1) of each stage's step when the stages take equal time.
    """
    import jax
    import jax.numpy as jnp

    p, m, d, n_layers = cfg["stages"], cfg["microbatches"], cfg["d_model"], cfg["layers_per_stage"]
    devices = list(jax.devices()[:p])
    keys = jax.random.split(jax.random.PRNGKey(0), p)
    weights = [jax.device_put(jax.random.normal(k, (n_layers, d, d), jnp.float32) / jnp.sqrt(d), dev)
               for k, dev in zip(keys, devices)]

    def layers(w, h):
        for i in range(n_layers):
            h = jnp.tanh(h @ w[i])
        return h

    def stage_program(s: int):
        if s < p - 1:
            def run(w, h):
                return layers(w, h)
        else:
            def run(w, h, y):
                return jnp.mean((layers(w, h) - y) ** 2)
        run.__name__ = f"stage{s}"
        return jax.jit(run)

    rows = cfg["rows"]
    x, y = _regression_batches((m, rows), d, d)[0]
    xs = [jax.device_put(x[j], devices[0]) for j in range(m)]
    ys = [jax.device_put(y[j], devices[-1]) for j in range(m)]
    h = jax.device_put(jnp.zeros((rows, d), jnp.float32), devices[0])
    programs = []
    for s in range(p):
        args = (weights[s], jax.device_put(h, devices[s])) + ((ys[0],) if s == p - 1 else ())
        programs.append(stage_program(s).lower(*args).compile())
    desc = (f"MPMD pipeline on {p} of 8 CPU devices: {p} stages, each a separately jitted program (jit_stage0.."
            f"jit_stage{p - 1}) on its own device holding {n_layers} {d}x{d} tanh layers (the last also the "
            f"squared-error loss); {m} microbatches of {rows} rows in a GPipe forward schedule, activations "
            f"moved to the next stage's device with jax.device_put; no collectives; formula bubble "
            f"(p-1)/(m+p-1) = {(p - 1) / (m + p - 1):.4f}")
    return desc, _StagePrograms(programs, devices, m), weights, [(xs, ys)]


def build_moe(cfg: dict[str, Any]):
    """A mixture-of-experts MLP, expert parallel over 'expert' (all-to-all dispatch and combine).

    A replicated router scores each token's experts and keeps the top k
    (``lax.top_k``); tokens are placed in per-expert slots of a fixed capacity
    (GShard's dispatch tensor), sent to their experts' chips with
    ``all_to_all``, run through the local expert's MLP, and sent back with a
    second ``all_to_all`` (combine). Experts' weights are split over
    'expert'; the router's gradient is pmean'ed over 'expert'.
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    n = cfg["mesh"]["expert"]
    mesh = Mesh(_device_grid(jax.devices(), n, 1).reshape(n), ("expert",))
    e, k, d, f, lr = cfg["experts"], cfg["top_k"], cfg["d_model"], cfg["d_ff"], cfg["lr"]
    tokens = cfg["batch"] // n
    cap = cfg["capacity"]
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    router = jax.random.normal(keys[0], (d, e), jnp.float32) / jnp.sqrt(d)
    w_in = jax.random.normal(keys[1], (e, d, f), jnp.float32) / jnp.sqrt(d)
    w_out = jax.random.normal(keys[2], (e, f, d), jnp.float32) / jnp.sqrt(f)
    specs = (P(), P("expert", None, None), P("expert", None, None))
    params = tuple(jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip((router, w_in, w_out), specs))

    def moe(router, w_in, w_out, x):
        gates, chosen = jax.lax.top_k(jax.nn.softmax(x @ router), k)      # [T, k]
        onehot = jax.nn.one_hot(chosen, e)                                  # [T, k, E]
        slot = (jnp.cumsum(onehot.reshape(-1, e), axis=0).reshape(onehot.shape) - 1) * onehot
        keep = onehot * (slot < cap)
        where = jax.nn.one_hot(slot, cap) * keep[..., None]                 # [T, k, E, C]
        dispatch = where.sum(1)                                             # [T, E, C]
        combine = (where * gates[..., None, None]).sum(1)
        sent = jnp.einsum("tec,td->ecd", dispatch, x)                       # [E, C, D]
        got = jax.lax.all_to_all(sent, "expert", 0, 0, tiled=True)          # [E, C, D]: n sources x local
        got = got.reshape(n, e // n, cap, d).transpose(1, 0, 2, 3).reshape(e // n, n * cap, d)
        h = jax.nn.relu(jnp.einsum("gtd,gdf->gtf", got, w_in))
        y = jnp.einsum("gtf,gfd->gtd", h, w_out)
        y = y.reshape(e // n, n, cap, d).transpose(1, 0, 2, 3).reshape(e, cap, d)
        back = jax.lax.all_to_all(y, "expert", 0, 0, tiled=True)            # combine
        return jnp.einsum("tec,ecd->td", combine, back)

    def shard_step(router, w_in, w_out, x, y):
        def loss_fn(ws):
            return jnp.mean((moe(*ws, x) - y) ** 2)

        loss, (gr, gi, go) = jax.value_and_grad(loss_fn)((router, w_in, w_out))
        gr = jax.lax.pmean(gr, "expert")
        return router - lr * gr, w_in - lr * gi, w_out - lr * go, jax.lax.pmean(loss, "expert")

    step = jax.shard_map(shard_step, mesh=mesh, in_specs=(*specs, P("expert", None), P("expert", None)),
                         out_specs=(*specs, P()))

    def train_step(params, batch):
        *new, loss = step(*params, *batch)
        return tuple(new), loss

    data_sharding = NamedSharding(mesh, P("expert", None))
    batches = [tuple(jax.device_put(a, data_sharding) for a in b) for b in _regression_batches(cfg["batch"], d, d)]
    compiled = jax.jit(train_step).lower(params, batches[0]).compile()
    desc = (f"mixture-of-experts MLP on {n} CPU devices, mesh expert={n}: {e} experts ({e // n} per chip), "
            f"top-{k} routing, capacity {cap} tokens per expert per source chip, {tokens} tokens per chip, "
            f"D={d}, F={f}; dispatch and combine with all_to_all over 'expert'; router replicated (gradient "
            "pmean over 'expert'); SGD, f32")
    return desc, compiled, params, batches


def _compile_two_layer_step(shard_step, mesh, w_specs, batch_axis: str, params, cfg: dict[str, Any]):
    """shard_map a step of two weight matrices over `mesh` (the batch split over `batch_axis`),
    jit and compile it; returns (compiled, batches placed on the mesh)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    step = jax.shard_map(shard_step, mesh=mesh,
                         in_specs=(w_specs[0], w_specs[1], P(batch_axis, None), P(batch_axis, None)),
                         out_specs=(w_specs[0], w_specs[1], P()))

    def train_step(params, batch):
        w1s, w2s, loss = step(*params, *batch)
        return (w1s, w2s), loss

    data_sharding = NamedSharding(mesh, P(batch_axis, None))
    batches = [tuple(jax.device_put(a, data_sharding) for a in b)
               for b in _regression_batches(cfg["batch"], cfg["d_in"], cfg["d_out"])]
    return jax.jit(train_step).lower(params, batches[0]).compile(), batches


def _device_grid(devices, nd: int, nm: int):
    import numpy as np

    if len(devices) < nd * nm:
        raise SystemExit(f"need {nd * nm} devices, JAX sees {len(devices)}")
    return np.array(devices[: nd * nm]).reshape(nd, nm)


def _regression_batches(batch, d_in: int, d_out: int):
    """Deterministic random (x, y) batches, one per traced step, built before tracing."""
    import jax

    lead = batch if isinstance(batch, tuple) else (batch,)
    key = jax.random.PRNGKey(1)
    out = []
    for _ in range(max(TRACED_STEPS, TIMED_STEPS)):
        key, kx, ky = jax.random.split(key, 3)
        out.append((jax.random.normal(kx, lead + (d_in,)), jax.random.normal(ky, lead + (d_out,))))
    jax.block_until_ready(out)
    return out


# --------------------------------------------------------------------------
# Worker: runs in the subprocess, with XLA_FLAGS already set by the parent.
# --------------------------------------------------------------------------

def run_worker(name: str, work: Path) -> None:
    import jax

    builder, _, cfg = SAMPLES[name]
    if builder in SERVING_BUILDERS:
        if builder == "build_paged_serving":
            from capture_paged import run_paged_worker  # beside this script (its folder is on sys.path)

            found = run_paged_worker(work, cfg, WARMUP_STEPS)
        else:
            found = run_serving_worker(name, work, cfg)
        meta = {"sample": name, **found, **_environment(work)}
        (work / "worker.json").write_text(json.dumps(meta, indent=1))
        return
    desc, compiled, state, batches = globals()[builder](cfg)

    def run(i: int):
        nonlocal state
        t0 = time.perf_counter()
        batch = batches(i) if callable(batches) else batches[i % len(batches)]   # host_bound loads it here
        state, loss = compiled(state, batch)
        jax.block_until_ready((state, loss))
        return time.perf_counter() - t0, float(loss)

    for i in range(WARMUP_STEPS):
        run(i)
    timed = [run(i)[0] for i in range(TIMED_STEPS)]

    traced, losses = [], []
    with jax.profiler.trace(str(work / "log"), create_perfetto_trace=name in PERFETTO_SAMPLES):
        for i in range(cfg.get("traced_steps", TRACED_STEPS)):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                dt, loss = run(i)
            traced.append(dt)
            losses.append(loss)

    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost  # older jax returned a list
    meta = {
        "sample": name,
        "program": desc,
        "config": cfg,
        **_environment(work),
        "state_shapes": jax.tree.map(lambda a: f"{a.dtype}{list(a.shape)}", state),
        "batch_shapes": jax.tree.map(lambda a: f"{a.dtype}{list(a.shape)}",
                                     batches(0) if callable(batches) else batches[0]),
        "warmup_steps": WARMUP_STEPS,
        "untraced_step_times_s": timed,
        "traced_step_times_s": traced,
        "median_untraced_step_time_s": sorted(timed)[len(timed) // 2],
        "losses": losses,
        "traced_module": compiled.as_text().split(",", 1)[0].removeprefix("HloModule ").strip(),
        # compiled.cost_analysis() as XLA returned it (it omits zero entries)
        "xla_cost_analysis": {k: float(v) for k, v in sorted((cost or {}).items())},
    }
    (work / "worker.json").write_text(json.dumps(meta, indent=1))


def _environment(work: Path) -> dict[str, Any]:
    """Versions and the machine, for capture.json."""
    import jax
    import jaxlib

    return {"jax_version": jax.__version__, "jaxlib_version": jaxlib.__version__,
            "python_version": platform.python_version(), "machine": platform.machine(),
            "cpu_count": os.cpu_count(), "backend": jax.default_backend(), "device_count": jax.device_count(),
            "xla_flags": os.environ.get("XLA_FLAGS", "").replace(str(work), "<tmp>")}


# --------------------------------------------------------------------------
# Parent: subprocess per sample, then a stable layout.
# --------------------------------------------------------------------------

def _traced_modules(xplane: Path) -> dict[str, set[int]]:
    """hlo_module -> program ids of the events in the trace (via JAX's own reader)."""
    from jax.profiler import ProfileData

    found: dict[str, set[int]] = {}
    for plane in ProfileData.from_file(str(xplane)).planes:
        for line in plane.lines:
            for ev in line.events:
                st = dict(ev.stats)
                if "hlo_module" in st:
                    found.setdefault(str(st["hlo_module"]), set()).add(int(st.get("program_id", -1)))
    return found


def capture(name: str, out: Path) -> Path:
    """Capture one sample into out/name, replacing what was there."""
    _, n_devices, _ = SAMPLES[name]
    dest = out / name
    with tempfile.TemporaryDirectory(prefix=f"traceview_{name}_") as tmp:
        work = Path(tmp)
        flags = [f"--xla_dump_to={work / 'dump'}", "--xla_dump_hlo_as_text",
                 "--xla_dump_hlo_as_proto"]
        if n_devices > 1:
            flags.append(f"--xla_force_host_platform_device_count={n_devices}")
        env = {**os.environ, "XLA_FLAGS": " ".join(flags), "JAX_PLATFORMS": "cpu",
               "PYTHONHASHSEED": "0"}
        worker = subprocess.run([sys.executable, __file__, "--worker", name, "--work", str(work)],
                                env=env)
        if worker.returncode:
            raise SystemExit(f"{name}: the capture subprocess failed (exit {worker.returncode}), "
                             "see its output above")
        xplanes = sorted((work / "log").glob("plugins/profile/*/*.xplane.pb"))
        if len(xplanes) != 1:
            raise SystemExit(f"{name}: expected one xplane.pb, found {xplanes}")
        meta = json.loads((work / "worker.json").read_text())

        if dest.exists():
            shutil.rmtree(dest)
        run_dir = dest / "plugins" / "profile" / name
        run_dir.mkdir(parents=True)
        xplane = run_dir / f"{HOST}.xplane.pb"
        shutil.move(str(xplanes[0]), xplane)
        if name in PERFETTO_SAMPLES:
            shutil.move(str(xplanes[0].parent / PERFETTO_FILE), run_dir / PERFETTO_FILE)

        traced = _traced_modules(xplane)
        wanted = {f"module_{pid:04d}.{mod}" for mod, pids in traced.items() for pid in pids}
        hlo = dest / "hlo"
        hlo.mkdir()
        kept, kept_modules = [], set()
        for f in sorted((work / "dump").iterdir()):
            m = re.match(r"(module_\d+\.[^.]+)\.", f.name)
            if m and m.group(1) in wanted and f.name.endswith(KEPT_DUMP_SUFFIXES):
                shutil.copy(f, hlo / f.name)
                kept.append(f.name)
                kept_modules.add(m.group(1))
        missing = wanted - kept_modules
        if missing:
            raise SystemExit(f"{name}: no HLO dump for traced modules {sorted(missing)}")

    meta["xplane"] = str(xplane.relative_to(dest))
    if name in PERFETTO_SAMPLES:
        meta["perfetto_trace"] = str((run_dir / PERFETTO_FILE).relative_to(dest))
    meta["traced_modules"] = {m: sorted(p) for m, p in sorted(traced.items())}
    meta["hlo_files"] = ["hlo/" + k for k in kept]
    (dest / "capture.json").write_text(json.dumps(meta, indent=1) + "\n")
    return dest


def _median_traced_step(dest: Path) -> float:
    times = sorted(json.loads((dest / "capture.json").read_text())["traced_step_times_s"])
    return times[len(times) // 2]


def capture_checked(name: str, out: Path) -> Path:
    """capture(), repeated while a regression-pair sample misses its timing goal.

    The CPU is shared with whatever else runs on the machine, so one capture
    can be uniformly slower; the "same" sample must still compare as same.
    """
    check = TIMING_CHECKS.get(name)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        dest = capture(name, out)
        if check is None:
            return dest
        ref, lo, hi = check
        if not (out / ref / "capture.json").exists():
            print(f"{name}: {out / ref} not captured, step time not checked", file=sys.stderr)
            return dest
        ratio = _median_traced_step(dest) / _median_traced_step(out / ref)
        meta = json.loads((dest / "capture.json").read_text())
        meta["timing_check"] = {"reference": ref, "median_step_ratio": ratio,
                                "allowed": [lo, hi], "attempt": attempt}
        (dest / "capture.json").write_text(json.dumps(meta, indent=1) + "\n")
        if lo <= ratio and (hi is None or ratio <= hi):
            return dest
        print(f"{name}: median step {ratio:.2f}x {ref}'s, outside [{lo}, {hi}]; "
              f"capturing again in {RETRY_PAUSE_S} s", file=sys.stderr)
        time.sleep(RETRY_PAUSE_S)
    raise SystemExit(f"{name}: step time still outside [{lo}, {hi}] x {ref}'s after "
                     f"{MAX_ATTEMPTS} attempts; is the machine busy?")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                    help="output folder (default: the folder of this script)")
    ap.add_argument("--only", action="append", choices=sorted(SAMPLES),
                    help="capture only this sample (repeatable)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        run_worker(args.worker, args.work)
        return 0
    for name in args.only or list(SAMPLES):
        t0 = time.perf_counter()
        dest = capture_checked(name, args.out)
        print(f"{name}: {dest} median traced step {_median_traced_step(dest) * 1e3:.2f} ms "
              f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
