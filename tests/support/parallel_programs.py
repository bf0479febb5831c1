"""Generated JAX programs for the parallelism and serving rules: random names, sizes, mesh axis names and orders.

Every form in which real programs write context parallelism, layer scans, pipelines and generation loops, each
drawn at random from a seed: the function name (so the module name), the mesh's axis names and their order, the
sizes (heads, head dimension, sequence per chip, layers, microbatches, decode steps). Run as a script in a
subprocess (XLA must be told the number of host devices before JAX starts):

    python tests/support/parallel_programs.py --seed 7 --out DIR [--count 2]

It compiles each program on the CPU with ``--xla_dump_to`` and leaves, per program, a folder
``DIR/<name>/`` with the dump's before- and after-optimizations text (the before module keeps Shardy's mesh
names) and ``DIR/manifest.json``: per program its form and the facts the tests check (the context axis's name,
the per-chip sequence, the pipeline's stages and microbatches, the decode loop's trip count, ...), known from
the generator's own draw, never from traceview.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import string
import sys
from pathlib import Path
from typing import Any

DEVICES = 8


def _name(rng, prefix: str = "") -> str:
    letters = string.ascii_lowercase
    return prefix + "".join(rng.choice(list(letters)) for _ in range(int(rng.integers(4, 9))))


def _mesh(rng, jax, sizes: dict[str, int]):
    """A mesh over the host devices with the given named axes, in a random order."""
    import numpy as np
    from jax.sharding import Mesh

    names = list(sizes)
    rng.shuffle(names)
    shape = tuple(sizes[n] for n in names)
    return Mesh(np.array(jax.devices()[:DEVICES]).reshape(shape), tuple(names)), names


def _attention_dims(rng) -> dict[str, int]:
    kv = int(rng.choice([1, 2]))
    heads = max(2, kv * int(rng.choice([1, 2])))      # attention of one head: see docs/parallelism.md
    return {"heads": heads, "kv_heads": kv, "head_dim": int(rng.choice([8, 16, 32])),
            "seq_per_chip": int(rng.choice([16, 24, 32])), "batch": int(rng.choice([1, 2]))}


def _block_attention(jnp, q, k, v, mask, group: int):
    """softmax(q kᵀ) v of the chip's queries against one K/V block, masked; unnormalised parts for a ring."""
    k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
    scores = jnp.where(mask, scores, -1e9)
    top = scores.max(-1, keepdims=True)
    p = jnp.exp(scores - top)
    return jnp.einsum("bhqk,bkhd->bhqd", p, v), p.sum(-1)


def context_program(rng, jax, style: str) -> tuple[Any, tuple, dict[str, Any]]:
    """Context parallelism over a random axis: ``unrolled`` (a chain of ppermutes, no loop), ``loop`` (a
    fori_loop of its own), ``scan`` (the ring inside a scan over stacked layers, K and V permuted as one
    [2, b, s, kv, d] buffer), ``allgather`` (K/V gathered along the sequence). Causal."""
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    ctx_size = int(rng.choice([2, 4, 8]))
    ctx, other = _name(rng, "c"), _name(rng, "o")
    sizes = {ctx: ctx_size} | ({other: DEVICES // ctx_size} if ctx_size < DEVICES else {})
    mesh, order = _mesh(rng, jax, sizes)
    dims = _attention_dims(rng)
    h, kvh, hd, s, b = dims["heads"], dims["kv_heads"], dims["head_dim"], dims["seq_per_chip"], dims["batch"]
    d = h * hd
    layers = int(rng.integers(3, 7)) if style == "scan" else 1
    group = h // kvh
    ring = [(i, (i + 1) % ctx_size) for i in range(ctx_size)]
    inner_loop = style == "scan" and bool(rng.integers(0, 2))

    def attend(wq, wk, wv, x):
        me = jax.lax.axis_index(ctx)
        q = (x @ wq).reshape(b, s, h, hd)
        k = (x @ wk).reshape(b, s, kvh, hd)
        v = (x @ wv).reshape(b, s, kvh, hd)
        rows = me * s + jnp.arange(s)

        def mask_for(src):
            cols = src * s + jnp.arange(s)
            return (cols[None, :] <= rows[:, None])[None, None]

        if style == "allgather":
            kf = jax.lax.all_gather(k, ctx, axis=1, tiled=True)
            vf = jax.lax.all_gather(v, ctx, axis=1, tiled=True)
            cols = jnp.arange(s * ctx_size)
            num, den = _block_attention(jnp, q, kf, vf, (cols[None, :] <= rows[:, None])[None, None], group)
            return (num / den[..., None]).transpose(0, 2, 1, 3).reshape(b, s, d)
        num = jnp.zeros((b, h, s, hd), x.dtype)
        den = jnp.zeros((b, h, s), x.dtype)
        kv = jnp.stack([k, v]) if style == "scan" else None
        if style == "loop" or inner_loop:
            def step(i, carry):
                k, v, kv, num, den = carry
                kk, vv = (kv[0], kv[1]) if kv is not None else (k, v)
                n_, d_ = _block_attention(jnp, q, kk, vv, mask_for((me - i) % ctx_size), group)
                if kv is not None:
                    kv = jax.lax.ppermute(kv, ctx, ring)
                else:
                    k, v = jax.lax.ppermute(k, ctx, ring), jax.lax.ppermute(v, ctx, ring)
                return k, v, kv, num + n_, den + d_
            _, _, _, num, den = jax.lax.fori_loop(0, ctx_size, step, (k, v, kv, num, den))
        else:
            for i in range(ctx_size):
                kk, vv = (kv[0], kv[1]) if kv is not None else (k, v)
                n_, d_ = _block_attention(jnp, q, kk, vv, mask_for((me - i) % ctx_size), group)
                num, den = num + n_, den + d_
                if i < ctx_size - 1:
                    if kv is not None:
                        kv = jax.lax.ppermute(kv, ctx, ring)
                    else:
                        k, v = jax.lax.ppermute(k, ctx, ring), jax.lax.ppermute(v, ctx, ring)
        return (num / den[..., None]).transpose(0, 2, 1, 3).reshape(b, s, d)

    def model(ws, x):
        if style != "scan":
            wq, wk, wv, wo = ws
            return attend(wq, wk, wv, x) @ wo

        def layer(x, w):
            wq, wk, wv, wo = w
            return x + attend(wq, wk, wv, x) @ wo, None
        return jax.lax.scan(layer, x, ws)[0]

    batch_axis = other if other in sizes else None
    spec = P(batch_axis, ctx, None)
    train = bool(rng.integers(0, 2))

    def local(ws, x):
        if not train:
            return model(ws, x)
        loss, g = jax.value_and_grad(lambda w: jnp.mean(model(w, x) ** 2))(ws)
        g = jax.lax.pmean(g, tuple(sizes))
        return tuple(w - 1e-3 * gw for w, gw in zip(ws, g)), jax.lax.pmean(loss, tuple(sizes))

    out_specs = (P(), P()) if train else spec
    fn = jax.shard_map(local, mesh=mesh, in_specs=(P(), spec), out_specs=out_specs, check_vma=False)
    shapes = [(d, h * hd), (d, kvh * hd), (d, kvh * hd), (h * hd, d)]
    if style == "scan":
        shapes = [(layers, *sh) for sh in shapes]
    rep = NamedSharding(mesh, P())
    ws = tuple(jax.device_put(np.ones(sh, np.float32) * 0.01, rep) for sh in shapes)
    x = jax.device_put(np.ones((b * sizes.get(other, 1), s * ctx_size, d), np.float32),
                       NamedSharding(mesh, spec))
    facts = {"form": f"context-{style}", "axis": ctx, "axis_size": ctx_size, "mesh_order": order,
             "seq_per_chip": s, "head_dim": hd, "heads_per_kv_head": h / kvh, "layers": layers,
             "batch_per_chip": b, "kv_heads": kvh, "heads": h,
             "inner_loop": inner_loop, "train": train}
    return fn, (ws, x), facts


def pipeline_program(rng, jax, schedule: str, stages: tuple[int, ...] = (2, 4)) -> tuple[Any, tuple, dict[str, Any]]:
    """An SPMD pipeline over a random axis: ``gpipe`` (a loop of m + p - 1 ticks, each stage holding its
    layers, an inner layer scan when it holds several) or ``interleaved`` (circular: v virtual stages per
    device, the stage's [v, ...] weights indexed by the tick, a loop of v·m + p - 1 ticks); p drawn from
    ``stages`` (p = 8: the pipeline axis holds every device, the other axis is of size 1)."""
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    p = int(rng.choice(list(stages)))
    stage, other = _name(rng, "s"), _name(rng, "o")
    sizes = {stage: p, other: DEVICES // p}
    mesh, order = _mesh(rng, jax, sizes)
    d = int(rng.choice([16, 32, 64]))
    v = int(rng.integers(2, 4)) if schedule == "interleaved" else 1
    m = p * int(rng.integers(1, 3)) if schedule == "interleaved" else int(rng.integers(p, 3 * p + 1))
    per_stage = int(rng.integers(1, 4)) if schedule == "gpipe" else 1
    rows = int(rng.choice([4, 8]))
    ring = [(i, (i + 1) % p) for i in range(p)]
    ticks = v * m + p - 1

    def local(w, xs):
        me = jax.lax.axis_index(stage)
        w = w[0]                                          # this stage's weights: [v, per_stage, d, d]

        def tick(held, t):
            fresh = xs[jnp.minimum(t, m - 1)]
            fed = jnp.where((me == 0) & (t < m), fresh, held)
            repeat = jnp.clip((t - me) // m, 0, v - 1)
            layers = w[repeat] if v > 1 else w[0]

            def layer(a, wl):
                return jnp.tanh(a @ wl), None
            out = jax.lax.scan(layer, fed, layers)[0] if per_stage > 1 else jnp.tanh(fed @ layers[0])
            return jax.lax.ppermute(out, stage, ring), out

        _, outs = jax.lax.scan(tick, jnp.zeros_like(xs[0]), jnp.arange(ticks))
        return outs[ticks - m:]

    fn = jax.shard_map(local, mesh=mesh, in_specs=(P(stage), P(None, other)), out_specs=P(None, other),
                       check_vma=False)
    w = jax.device_put(np.ones((p, v, per_stage, d, d), np.float32) * 0.01, NamedSharding(mesh, P(stage)))
    xs = jax.device_put(np.ones((m, rows * sizes[other], d), np.float32), NamedSharding(mesh, P(None, other)))
    facts = {"form": f"pipeline-{schedule}", "axis": stage, "axis_size": p, "mesh_order": order,
             "microbatches": m, "virtual_stages": v, "ticks": ticks, "layers_per_stage": per_stage,
             "bubble": (p - 1) / (v * m + p - 1)}
    return fn, (w, xs), facts


def layer_scan_program(rng, jax) -> tuple[Any, tuple, dict[str, Any]]:
    """A layer scan alone: stacked per-layer weights sharded FSDP-style, scanned once per layer; in half the
    programs each layer also shifts its activation to the next chip with a ppermute (a halo exchange), which
    passes something between chips inside a loop without being a pipeline."""
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    axis = _name(rng, "f")
    n = int(rng.choice([2, 4, 8]))
    sizes = {axis: n} | ({_name(rng, "o"): DEVICES // n} if n < DEVICES else {})
    mesh, order = _mesh(rng, jax, sizes)
    layers, d, rows = int(rng.integers(3, 9)), int(rng.choice([16, 32])), int(rng.choice([4, 8]))
    halo = bool(rng.integers(0, 2))
    ring = [(i, (i + 1) % n) for i in range(n)]

    def local(w, x):
        def layer(a, wl):
            full = jax.lax.all_gather(wl, axis, axis=0, tiled=True)
            a = jnp.tanh(a @ full)
            if halo:
                a = a + jax.lax.ppermute(a, axis, ring)
            return a, None
        return jax.lax.scan(layer, x, w)[0]

    batch = P(tuple(sizes))
    fn = jax.shard_map(local, mesh=mesh, in_specs=(P(None, axis), batch), out_specs=batch, check_vma=False)
    w = jax.device_put(np.ones((layers, d, d), np.float32) * 0.01, NamedSharding(mesh, P(None, axis)))
    x = jax.device_put(np.ones((rows * DEVICES, d), np.float32), NamedSharding(mesh, batch))
    facts = {"form": "layer-scan", "axis": axis, "axis_size": n, "mesh_order": order, "layers": layers,
             "halo": halo}
    return fn, (w, x), facts


def generation_program(rng, jax) -> tuple[Any, tuple, dict[str, Any]]:
    """Prefill then a decode loop in one jitted program: ``lax.fori_loop`` over the decode steps with the
    KV cache and the last token in the carry."""
    import jax.numpy as jnp
    import numpy as np

    vocab, d, layers = int(rng.choice([64, 128])), int(rng.choice([16, 32])), int(rng.integers(1, 4))
    batch, prompt, steps = int(rng.integers(1, 5)), int(rng.integers(3, 9)), int(rng.integers(3, 12))
    max_len = prompt + steps + int(rng.integers(0, 5))

    def forward(w, cache, tokens, pos):
        x = w["embed"][tokens]
        t = tokens.shape[1]
        for i in range(layers):
            k, v = x @ w["wk"][i], x @ w["wv"][i]
            cache = jax.lax.dynamic_update_slice(cache, k[None, None], (i, 0, 0, pos, 0))
            cache = jax.lax.dynamic_update_slice(cache, v[None, None], (i, 1, 0, pos, 0))
            q = x @ w["wq"][i]
            scores = jnp.einsum("btd,bsd->bts", q, cache[i, 0])
            valid = jnp.arange(max_len)[None, :] <= (pos + jnp.arange(t))[:, None]
            scores = jnp.where(valid[None], scores, -1e9)
            x = x + jnp.einsum("bts,bsd->btd", jax.nn.softmax(scores, -1), cache[i, 1])
        return x[:, -1] @ w["embed"].T, cache

    def generate(w, prompt_tokens):
        cache = jnp.zeros((layers, 2, batch, max_len, d), jnp.float32)
        logits, cache = forward(w, cache, prompt_tokens, 0)
        token = jnp.argmax(logits, -1).astype(jnp.int32)[:, None]

        def step(i, carry):
            cache, token, out = carry
            logits, cache = forward(w, cache, token, prompt + i)
            token = jnp.argmax(logits, -1).astype(jnp.int32)[:, None]
            return cache, token, out.at[:, i].set(token[:, 0])
        _, _, out = jax.lax.fori_loop(0, steps, step, (cache, token, jnp.zeros((batch, steps), jnp.int32)))
        return out

    w = {"embed": np.ones((vocab, d), np.float32) * 0.01,
         **{k: np.ones((layers, d, d), np.float32) * 0.01 for k in ("wq", "wk", "wv")}}
    tokens = np.zeros((batch, prompt), np.int32)
    facts = {"form": "generation-loop", "batch": batch, "prompt": prompt, "steps": steps, "max_len": max_len,
             "layers": layers, "d": d, "kv_bytes_per_token": 2 * layers * d * 4}
    return generate, (w, tokens), facts


def paged_program(rng, jax) -> tuple[Any, tuple, dict[str, Any]]:
    """One step of a paged-attention server: K/V pages in a pool [layers, 2, pages, page_size, kv_heads, d]
    addressed by a page table [sequences, pages per sequence]; a ragged batch of tokens (some sequences
    prefilling several tokens, others decoding one) scattered into their pages, attention gathering each
    sequence's pages by the table."""
    import jax.numpy as jnp
    import numpy as np

    layers, kvh, hd = int(rng.integers(1, 4)), int(rng.choice([1, 2])), int(rng.choice([8, 16]))
    page, pages, seqs = int(rng.choice([4, 8])), int(rng.integers(16, 33)), int(rng.integers(2, 5))
    per_seq = int(rng.integers(2, 5))
    tokens = seqs if rng.integers(0, 3) == 0 else int(rng.integers(seqs + 1, 4 * seqs + 1))   # decode or mixed
    d = kvh * hd

    def step(w, pool, table, token_ids, slots, seq_of_token, lens):
        x = w["embed"][token_ids]                                   # [T, D]
        for i in range(layers):
            k = (x @ w["wk"][i]).reshape(-1, kvh, hd)
            v = (x @ w["wv"][i]).reshape(-1, kvh, hd)
            flat = pool[i].reshape(2, pages * page, kvh, hd)
            flat = flat.at[0, slots].set(k).at[1, slots].set(v)
            pool = pool.at[i].set(flat.reshape(2, pages, page, kvh, hd))
            seq_pages = pool[i][:, table]                           # [2, S, P, page, kvh, hd]
            kk = seq_pages[0][seq_of_token].reshape(-1, per_seq * page, kvh, hd)
            vv = seq_pages[1][seq_of_token].reshape(-1, per_seq * page, kvh, hd)
            q = (x @ w["wq"][i]).reshape(-1, kvh, hd)
            scores = jnp.einsum("thd,tshd->ths", q, kk)
            valid = jnp.arange(per_seq * page)[None, :] < lens[seq_of_token][:, None]
            scores = jnp.where(valid[:, None], scores, -1e9)
            x = x + jnp.einsum("ths,tshd->thd", jax.nn.softmax(scores, -1), vv).reshape(-1, d)
        return x @ w["embed"].T, pool

    w = {"embed": np.ones((64, d), np.float32) * 0.01,
         **{k: np.ones((layers, d, d), np.float32) * 0.01 for k in ("wq", "wk", "wv")}}
    pool = np.zeros((layers, 2, pages, page, kvh, hd), np.float32)
    table = np.arange(seqs * per_seq, dtype=np.int32).reshape(seqs, per_seq) % pages
    args = (w, pool, table, np.zeros(tokens, np.int32), np.arange(tokens, dtype=np.int32),
            np.minimum(np.arange(tokens), seqs - 1).astype(np.int32), np.full(seqs, page, np.int32))
    facts = {"form": "paged", "layers": layers, "pages": pages, "page_size": page, "kv_heads": kvh,
             "head_dim": hd, "sequences": seqs, "pages_per_sequence": per_seq, "tokens": tokens,
             "kv_bytes_per_token": 2 * layers * kvh * hd * 4}
    facts["donate"] = [1]
    return step, args, facts


def run_mpmd(rng, jax, schedule: str, name: str, where: Path) -> dict[str, Any]:
    """An MPMD pipeline: a forward and a backward program per stage and model chunk (tanh layers), each stage on
    its own CPU device, activations and gradients moved between stages with ``device_put``, dispatched in the
    order of a GPipe or 1F1B schedule (tests/support/pipeline_schedules.py), with v = 2-3 chunks per stage for
    the interleaved forms; two steps traced under ``StepTraceAnnotation``."""
    import jax.numpy as jnp
    import numpy as np
    from pipeline_schedules import schedule as worked_out

    interleaved = schedule.startswith("interleaved")
    kind = "1f1b" if schedule.endswith("1f1b") else "gpipe"
    p = int(rng.integers(2, 5))
    v = int(rng.integers(2, 4)) if interleaved else 1
    m = p * int(rng.integers(1, 3)) if interleaved and kind == "1f1b" else int(rng.integers(p, 2 * p + 1))
    d, rows = int(rng.choice([256, 384])), int(rng.choice([128, 256]))
    devices = jax.devices()[:p]

    def fwd(w, x):
        return jnp.tanh(x @ w)

    def bwd(w, x, gy):
        y = jnp.tanh(x @ w)
        gz = gy * (1 - y * y)
        return gz @ w.T, x.T @ gz

    chunks = [(s, c) for s in range(p) for c in range(v)]
    ws = {(s, c): jax.device_put(np.full((d, d), 0.01, np.float32), devices[s]) for s, c in chunks}
    xs = [jax.device_put(np.ones((rows, d), np.float32), devices[0]) for _ in range(m)]
    seed = jax.device_put(np.ones((rows, d), np.float32), devices[p - 1])
    suffix = {(s, c): f"{s}" if v == 1 else f"{s}c{c}" for s, c in chunks}
    f = {key: jax.jit(_renamed(fwd, f"{name}_f{suffix[key]}")).lower(
        ws[key], jax.device_put(xs[0], devices[key[0]])).compile() for key in chunks}
    b = {key: jax.jit(_renamed(bwd, f"{name}_b{suffix[key]}")).lower(
        ws[key], jax.device_put(xs[0], devices[key[0]]), jax.device_put(seed, devices[key[0]])).compile()
        for key in chunks}
    order = worked_out(p, m, v, kind)

    def step():
        inputs: dict[tuple[int, int, int], Any] = {}       # what (stage, chunk) received for microbatch k
        acts: dict[tuple[int, int, int], Any] = {}
        grads: dict[tuple[int, int, int], Any] = {}
        for w in order:
            s, c, k = w.stage, w.chunk, w.microbatch
            if w.kind == "f":
                before = (s - 1, c, k) if s > 0 else (p - 1, c - 1, k)
                inputs[(s, c, k)] = xs[k] if (s, c) == (0, 0) else jax.device_put(acts[before], devices[s])
                acts[(s, c, k)] = f[(s, c)](ws[(s, c)], inputs[(s, c, k)])
            else:
                after = (s + 1, c, k) if s < p - 1 else (0, c + 1, k)
                gy = seed if (s, c) == (p - 1, v - 1) else jax.device_put(grads[after], devices[s])
                grads[(s, c, k)], _ = b[(s, c)](ws[(s, c)], inputs[(s, c, k)], gy)
        jax.block_until_ready(list(grads.values()))

    step()
    with jax.profiler.trace(str(where)):
        for i in range(2):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                step()
    names = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved", "interleaved-1f1b": "interleaved 1F1B"}
    return {"stages": p, "microbatches": m, "virtual_stages": v, "schedule": names[schedule],
            "module": f"jit_{name}_*", "traced_steps": 2}


FORMS = {
    "context-unrolled": lambda rng, jax: context_program(rng, jax, "unrolled"),
    "context-loop": lambda rng, jax: context_program(rng, jax, "loop"),
    "context-scan": lambda rng, jax: context_program(rng, jax, "scan"),
    "context-allgather": lambda rng, jax: context_program(rng, jax, "allgather"),
    "layer-scan": layer_scan_program,
    "pipeline-gpipe": lambda rng, jax: pipeline_program(rng, jax, "gpipe"),
    "pipeline-interleaved": lambda rng, jax: pipeline_program(rng, jax, "interleaved"),
    # the same programs with their loops' permutes rewritten into send/recv as XLA's GPU passes print them
    "pipeline-sendrecv": lambda rng, jax: pipeline_program(rng, jax, str(rng.choice(["gpipe", "interleaved"])),
                                                           (2, 4, 8)),
    "context-sendrecv": lambda rng, jax: context_program(rng, jax, "loop"),
    "generation-loop": generation_program,
    "paged": paged_program,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--count", type=int, default=1, help="programs of each form")
    parser.add_argument("--forms", nargs="*", default=list(FORMS) + list(MPMD))
    args = parser.parse_args(argv)
    dump = args.out / "_dump"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={dump} --xla_dump_hlo_as_text"
                               f" --xla_force_host_platform_device_count={DEVICES}")
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import numpy as np

    rng = np.random.default_rng(args.seed)
    manifest = []
    for form in args.forms:
        for _ in range(args.count):
            if form in MPMD:
                name = _name(rng, "g")
                facts = {"form": form, "name": name, "seed": args.seed}
                facts |= run_mpmd(rng, jax, MPMD[form], name, args.out / name / "trace")
                manifest.append(facts)
                continue
            fn, call_args, facts = FORMS[form](rng, jax)
            if form in SEND_RECV:                   # the program drawn, its permutes rewritten below
                facts |= {"drawn_form": facts["form"], "form": form}
            name = _name(rng, "g")
            named = jax.jit(_renamed(fn, name), donate_argnums=tuple(facts.get("donate", ())))
            compiled = named.lower(*call_args).compile()
            facts |= {"name": name, "module": f"jit_{name}", "seed": args.seed}
            if form in TRACED:
                facts["calls"] = _trace(jax, compiled, call_args, args.out / name / "trace", rng)
            facts["cost_flops"] = float((compiled.cost_analysis() or {}).get("flops", 0.0))
            manifest.append(facts)
    for facts in manifest:
        folder = args.out / facts["name"]
        folder.mkdir(parents=True, exist_ok=True)
        for f in dump.glob(f"module_*.{facts['module']}.*"):
            if f.name.endswith((".before_optimizations.txt", "after_optimizations.txt")):
                shutil.move(str(f), folder / f.name)
        if facts["form"] in SEND_RECV:
            facts["send_recv"] = _send_recv(folder, bool(rng.integers(0, 2)))
    shutil.rmtree(dump, ignore_errors=True)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return 0


SEND_RECV = ("pipeline-sendrecv", "context-sendrecv")


def _send_recv(folder: Path, annotate: bool) -> dict[str, Any]:
    """Rewrite the optimized module's loop permutes into send/recv (tests/support/send_recv.py)."""
    from send_recv import decompose

    (after,) = folder.glob("*after_optimizations.txt")
    rewritten = decompose(after.read_text(), annotate)
    after.write_text(rewritten.text)
    return {"transfers": rewritten.transfers, "annotated": rewritten.annotated}


TRACED = ("generation-loop", "paged")      # serving programs: run under the profiler for their calls
MPMD = {"mpmd-gpipe": "gpipe", "mpmd-1f1b": "1f1b",      # a program per stage (and chunk), run and traced
        "mpmd-interleaved": "interleaved", "mpmd-interleaved-1f1b": "interleaved-1f1b"}


def _trace(jax, compiled, call_args, where: Path, rng) -> int:
    """Run the compiled program once untraced, then 1-3 times under the profiler; returns the traced calls."""
    calls = int(rng.integers(1, 4))
    fresh = [jax.device_put(a) for a in call_args]          # donated buffers are consumed by each call
    jax.block_until_ready(compiled(*fresh))
    with jax.profiler.trace(str(where)):
        for _ in range(calls):
            fresh = [jax.device_put(a) for a in call_args]
            jax.block_until_ready(compiled(*fresh))
    return calls


def _renamed(fn, name: str):
    """``fn`` under the function name ``name`` (jit names the module after it)."""
    def call(*a):
        return fn(*a)
    call.__name__ = call.__qualname__ = name
    return call


if __name__ == "__main__":
    sys.exit(main())
