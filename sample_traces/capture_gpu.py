"""Capture NVIDIA GPU programs as users run them (XLA command buffers on), for traceview's GPU checks.

Run on a machine with an NVIDIA GPU and JAX (one prepared run; the device tool's machine is one):

    python sample_traces/capture_gpu.py --out DIR [--only NAME ...] [--small]

Each program runs in its own subprocess (XLA_FLAGS must be set before JAX starts) and writes, in the layout
of ``../shared/traces/h200`` (its README):

    DIR/<name>/plugins/profile/<run>/<host>.xplane.pb     the trace (5 calls of each timed function)
    DIR/<name>/hlo/module_*.{before_optimizations,*_gpu_after_optimizations,...}.txt
    DIR/<name>/truth.json      wall time per call measured outside the profiler (2 warm-up calls, then 10),
                               with the FLOPs and bytes counted by hand where the program has a closed form

The programs cover what traceview must read right on a GPU: a layer scan with an Adam update (XLA's while
thunk inside a command buffer), f32 matmuls at each precision (TF32 vs fp32 tensor-core paths), cuDNN fused
attention (causal, forward and backward), a generation loop inside one jitted program (prefill, then a
``fori_loop`` of decode steps with the KV cache in the carry) and host-bound steps (a sync after each small
step). ``--small`` shrinks every size so the script runs anywhere (the CPU too) as a check of the script.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROGRAMS = ("scan_adam", "f32_precision", "cudnn_attention", "generate", "host_bound")
TRACED_CALLS = 5
TIMED_CALLS = 10
WARMUP_CALLS = 2


def _timed(fn, *args) -> float:
    """Wall time per call in microseconds, outside the profiler, after warm-up calls."""
    import jax

    for _ in range(WARMUP_CALLS):
        jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    for _ in range(TIMED_CALLS):
        jax.block_until_ready(fn(*args))
    return (time.perf_counter() - start) / TIMED_CALLS * 1e6


def scan_adam(small: bool) -> tuple[dict[str, Any], list]:
    """A stack of pre-LN MLP blocks run by ``lax.scan`` over stacked weights (as Flax's nn.scan does), trained
    with Adam written out (optax's update: moments, bias correction)."""
    import jax
    import jax.numpy as jnp

    layers, batch, d, ff = (2, 64, 128, 256) if small else (8, 8192, 2048, 8192)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    params = {"up": jax.random.normal(keys[0], (layers, d, ff), jnp.bfloat16) * 0.02,
              "down": jax.random.normal(keys[1], (layers, ff, d), jnp.bfloat16) * 0.02}
    x = jax.random.normal(keys[2], (batch, d), jnp.bfloat16)

    def loss(p, x):
        def block(h, w):
            with jax.named_scope("block"):
                n = h / jnp.sqrt(jnp.mean(jnp.square(h.astype(jnp.float32)), -1, keepdims=True) + 1e-6).astype(h.dtype)
                return h + jax.nn.gelu(n @ w["up"]) @ w["down"], None
        h, _ = jax.lax.scan(block, x, p)
        return jnp.mean(jnp.square(h.astype(jnp.float32)))

    def step(state, x):
        p, m, v, t = state
        g = jax.grad(loss)(p, x)
        t = t + 1
        m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g.astype(jnp.float32), m, g)
        v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * jnp.square(g.astype(jnp.float32)), v, g)
        p = jax.tree.map(lambda p, m, v: (p.astype(jnp.float32) - 1e-4 * (m / (1 - 0.9 ** t))
                                          / (jnp.sqrt(v / (1 - 0.999 ** t)) + 1e-8)).astype(p.dtype), p, m, v)
        return p, m, v, t

    zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, jnp.float32), params)
    state = (params, zeros, zeros, jnp.zeros((), jnp.float32))
    fn = jax.jit(step)
    matmul_flops = 2 * 2 * batch * d * ff * layers          # up and down, forward
    truth = {"config": {"layers": layers, "batch": batch, "d": d, "ff": ff},
             "flops": {"train_step": 3 * matmul_flops}}      # forward + backward (2x): 6 N T
    return truth, [("train_step", fn, (state, x))]


def f32_precision(small: bool) -> tuple[dict[str, Any], list]:
    """One f32 matmul per precision: DEFAULT and HIGH run as TF32 on Ampere and later, HIGHEST as fp32."""
    import jax
    import jax.numpy as jnp

    n = 256 if small else 8192
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    calls = []
    for precision in ("default", "high", "highest"):
        fn = jax.jit(lambda a, b, p=precision: jnp.matmul(a, b, precision=p))
        calls.append((f"matmul_{precision}", fn, (a, b)))
    return {"config": {"n": n}, "flops": {name: 2 * n ** 3 for name, _, _ in calls}}, calls


def cudnn_attention(small: bool) -> tuple[dict[str, Any], list]:
    """Causal attention through cuDNN's fused kernels (``implementation="cudnn"``; XLA's own on a CPU), forward
    and its gradient."""
    import jax
    import jax.numpy as jnp

    batch, seq, heads, dim = (2, 128, 4, 64) if small else (8, 4096, 16, 128)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q, k, v = (jax.random.normal(key, (batch, seq, heads, dim), jnp.bfloat16) for key in keys)
    implementation = "cudnn" if jax.default_backend() == "gpu" else None

    def attend(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=implementation)

    def backward(q, k, v):
        return jax.grad(lambda q, k, v: attend(q, k, v).astype(jnp.float32).sum(), argnums=(0, 1, 2))(q, k, v)

    full = 4 * batch * heads * seq * seq * dim                  # Q.K^T and P.V over the full S x S
    return ({"config": {"batch": batch, "seq": seq, "heads": heads, "dim": dim, "implementation": implementation},
             "flops": {"forward": full // 2, "backward": 5 * full // 4}},       # causal: half the blocks run
            [("forward", jax.jit(attend), (q, k, v)), ("backward", jax.jit(backward), (q, k, v))])


def generate(small: bool) -> tuple[dict[str, Any], list]:
    """Serving inside one program: a prefill of the prompt, then ``fori_loop`` decode steps with the KV cache
    (and the last token) in the loop carry."""
    import jax
    import jax.numpy as jnp

    layers, batch, prompt, new, d, heads, vocab = (2, 2, 16, 8, 64, 4, 256) if small else \
        (8, 16, 1024, 64, 2048, 16, 32768)
    dh = d // heads
    max_len = prompt + new
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    w = {"embed": jax.random.normal(keys[0], (vocab, d), jnp.bfloat16) * 0.02,
         "qkv": jax.random.normal(keys[1], (layers, d, 3 * d), jnp.bfloat16) * 0.02,
         "out": jax.random.normal(keys[2], (layers, d, d), jnp.bfloat16) * 0.02}
    tokens = jax.random.randint(keys[3], (batch, prompt), 0, vocab)

    def attend(x, cache, pos, length):
        new_cache = []
        for i in range(layers):
            q, k, v = jnp.split(x @ w["qkv"][i], 3, axis=-1)
            q, k, v = (t.reshape(batch, -1, heads, dh) for t in (q, k, v))
            ck = jax.lax.dynamic_update_slice(cache[i][0], k, (0, pos, 0, 0))
            cv = jax.lax.dynamic_update_slice(cache[i][1], v, (0, pos, 0, 0))
            mask = jnp.arange(max_len)[None, None, None, :] < pos + length
            s = jnp.einsum("bqhd,bkhd->bhqk", q, ck).astype(jnp.float32) / jnp.sqrt(dh)
            p = jax.nn.softmax(jnp.where(mask, s, -1e9), -1).astype(x.dtype)
            x = x + jnp.einsum("bhqk,bkhd->bqhd", p, cv).reshape(batch, -1, d) @ w["out"][i]
            new_cache.append((ck, cv))
        return x, new_cache

    def run(tokens):
        cache = [(jnp.zeros((batch, max_len, heads, dh), jnp.bfloat16),) * 2 for _ in range(layers)]
        x, cache = attend(w["embed"][tokens], cache, 0, prompt)
        last = jnp.argmax(x[:, -1] @ w["embed"].T, -1)

        def decode(i, carry):
            cache, last, out = carry
            x, cache = attend(w["embed"][last][:, None], cache, prompt + i, 1)
            last = jnp.argmax(x[:, -1] @ w["embed"].T, -1)
            return cache, last, out.at[:, i].set(last)

        _, _, out = jax.lax.fori_loop(0, new, decode, (cache, last, jnp.zeros((batch, new), jnp.int32)))
        return out

    return ({"config": {"layers": layers, "batch": batch, "prompt": prompt, "new_tokens": new, "d": d,
                        "heads": heads, "vocab": vocab},
             "kv_bytes_per_token": 2 * layers * d * 2},
            [("generate", jax.jit(run), (tokens,))])


def host_bound(small: bool) -> tuple[dict[str, Any], list]:
    """Small steps with a sync on the loss after each (``float(loss)``): the device waits on the host."""
    import jax
    import jax.numpy as jnp

    n = 64 if small else 512
    w = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)

    @jax.jit
    def step(w, x):
        loss, g = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
        return w - 1e-3 * g, loss

    def synced(w, x):
        w, loss = step(w, x)
        float(loss)                         # the host waits for the device, then the next step is dispatched
        return w, loss

    x = jnp.ones((n, n), jnp.float32)
    return {"config": {"n": n}}, [("step", synced, (w, x))]


def _worker(name: str, out: Path, small: bool) -> None:
    """Run one program in this process: time it, trace it, write truth.json (XLA_FLAGS set by the parent)."""
    import jax

    truth, calls = globals()[name](small)
    truth.update({"program": name, "device_kind": jax.devices()[0].device_kind, "platform": jax.default_backend(),
                  "jax": jax.__version__, "xla_flags": os.environ.get("XLA_FLAGS", ""), "calls": {}})
    for call, fn, args in calls:
        truth["calls"][call] = {"us_per_call": _timed(fn, *args)}
    with jax.profiler.trace(str(out)):
        for i in range(TRACED_CALLS):
            with jax.profiler.StepTraceAnnotation(name, step_num=i):
                for _, fn, args in calls:
                    jax.block_until_ready(fn(*args))
    (out / "truth.json").write_text(json.dumps(truth, indent=1))


def capture(name: str, out: Path, small: bool, timeout: float) -> None:
    folder = out / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as dump:
        env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump}".strip())
        subprocess.run([sys.executable, __file__, "--worker", name, "--out", str(folder)] + (["--small"] if small else []),
                       env=env, check=True, timeout=timeout)
        (folder / "hlo").mkdir()
        for path in Path(dump).glob("module_*"):
            if path.suffix in (".txt", ".pbtxt"):
                shutil.copy(path, folder / "hlo" / path.name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", nargs="*", choices=PROGRAMS, default=list(PROGRAMS))
    ap.add_argument("--small", action="store_true", help="tiny sizes: a check that the script runs (any backend)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per program")
    ap.add_argument("--worker", choices=PROGRAMS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args.worker, args.out, args.small)
        return
    for name in args.only:
        capture(name, args.out, args.small, args.timeout)
        print(f"{name}: {args.out / name}", flush=True)


if __name__ == "__main__":
    main()
