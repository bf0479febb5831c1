"""The paged-attention serving sample (``paged_serving``): built and traced for sample_traces/capture.py.

A vLLM-style step program over per-layer K and V page pools addressed by a page table, compiled for a ragged
batch mixing prefill and decode tokens and for a decode-only batch, then traced: one mixed step and a few
decode steps, each call one ``StepTraceAnnotation("serve")``. docs/inference.md works its figures by hand.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any


def module_costs(*compiled) -> dict[str, dict[str, float]]:
    """Module name -> compiled.cost_analysis() as XLA returned it, for each compiled serving program."""
    costs = {}
    for c in compiled:
        cost = c.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost     # older jax returned a list
        costs[c.as_text().split(",", 1)[0].removeprefix("HloModule ").strip()] = \
            {k: float(v) for k, v in sorted((cost or {}).items())}
    return costs



def build_paged_serving(cfg: dict[str, Any]):
    """One step of a paged-attention server (vLLM-style): per-layer K and V pools [pages, page_size, kv_heads,
    head_dim] (donated), a page table [sequences, pages per sequence]; a ragged batch of T tokens, each with
    its sequence and position, scattered into its slot (page table entry x page size + offset), attention of
    each token over its sequence's pages gathered by the table, masked causally. Two shapes are compiled:
    ``mixed_step`` (T = ``mixed_tokens``: prompts prefilled beside sequences decoding one token) and
    ``decode_step`` (T = sequences: one token each).

    Returns (description, mixed compiled, decode compiled, params, pools, table)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    dt = jnp.dtype(cfg["dtype"])
    V, D, H, KV, L = cfg["vocab"], cfg["d_model"], cfg["heads"], cfg["kv_heads"], cfg["layers"]
    pages, page, per_seq, S = cfg["pages"], cfg["page_size"], cfg["pages_per_sequence"], cfg["sequences"]
    hd, group = D // H, H // KV
    rng = np.random.default_rng(0)

    def dense(shape):
        return jax.device_put((rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[0])).astype(dt))

    params = {"embed": dense((V, D)), "unembed": dense((D, V)),
              "layers": [{"wq": dense((D, H * hd)), "wk": dense((D, KV * hd)), "wv": dense((D, KV * hd)),
                          "wo": dense((H * hd, D))} for _ in range(L)]}
    pools = [jax.device_put(np.zeros((pages, page, KV, hd), dt)) for _ in range(2 * L)]
    table = jax.device_put(np.arange(S * per_seq, dtype=np.int32).reshape(S, per_seq))

    def step(params, pools, page_table, token_ids, positions, seq_ids, slots):
        x = params["embed"][token_ids]                                     # [T, D]
        keys = jnp.arange(per_seq * page)
        seen = keys[None, :] <= positions[:, None]                         # [T, keys] causal in its sequence
        out = []
        for i, lp in enumerate(params["layers"]):
            k = (x @ lp["wk"]).reshape(-1, KV, hd)
            v = (x @ lp["wv"]).reshape(-1, KV, hd)
            kc = pools[2 * i].reshape(pages * page, KV, hd).at[slots].set(k).reshape(pages, page, KV, hd)
            vc = pools[2 * i + 1].reshape(pages * page, KV, hd).at[slots].set(v).reshape(pages, page, KV, hd)
            out += [kc, vc]
            mine = page_table[seq_ids]                                     # [T, pages per sequence]
            kk = kc[mine].reshape(-1, per_seq * page, KV, hd)
            vv = vc[mine].reshape(-1, per_seq * page, KV, hd)
            kk, vv = jnp.repeat(kk, group, axis=2), jnp.repeat(vv, group, axis=2)
            q = (x @ lp["wq"]).reshape(-1, H, hd)
            scores = jnp.einsum("thd,tshd->ths", q, kk).astype(jnp.float32) / np.sqrt(hd)
            scores = jnp.where(seen[:, None, :], scores, -1e9)
            attn = jnp.einsum("ths,tshd->thd", jax.nn.softmax(scores, -1).astype(dt), vv)
            x = x + attn.reshape(-1, H * hd) @ lp["wo"]
        return jnp.argmax(x @ params["unembed"], -1).astype(jnp.int32), out

    def batch(tokens: int):
        z = np.zeros(tokens, np.int32)
        return (jax.device_put(z), jax.device_put(z), jax.device_put(z), jax.device_put(z))

    def mixed_step_fn(params, pools, page_table, token_ids, positions, seq_ids, slots):
        return step(params, pools, page_table, token_ids, positions, seq_ids, slots)

    def decode_step_fn(params, pools, page_table, token_ids, positions, seq_ids, slots):
        return step(params, pools, page_table, token_ids, positions, seq_ids, slots)

    mixed_step_fn.__name__ = "mixed_step"       # the module names: jit_mixed_step, jit_decode_step
    decode_step_fn.__name__ = "decode_step"
    mixed_c = jax.jit(mixed_step_fn, donate_argnums=1).lower(params, pools, table,
                                                             *batch(cfg["mixed_tokens"])).compile()
    decode_c = jax.jit(decode_step_fn, donate_argnums=1).lower(params, pools, table, *batch(S)).compile()
    desc = (f"paged-attention serving step, {L} layers, d_model {D}, {H} query heads and {KV} K/V heads of {hd}, "
            f"vocab {V}, {cfg['dtype']}; per-layer K and V pools [{pages}, {page}, {KV}, {hd}] (donated) addressed "
            f"by a page table [{S}, {per_seq}]; jitted mixed_step of {cfg['mixed_tokens']} tokens (prompts "
            f"{cfg['prompts']} prefilled beside the other sequences' decode tokens, padding to the bucket) and "
            f"decode_step of {S} tokens (one per sequence); new K/V scattered into their slots, attention over "
            "each token's sequence pages gathered by the table")
    return desc, mixed_c, decode_c, params, pools, table


def run_paged_worker(work: Path, cfg: dict[str, Any], warmup: int) -> dict[str, Any]:
    """Trace one mixed step (the prompts of the first sequences prefilled, the others decoding one token, padded
    to the bucket) and ``decode_steps`` decode steps, each call one ``StepTraceAnnotation("serve")``."""
    import jax
    import numpy as np

    desc, mixed_c, decode_c, params, pools, table = build_paged_serving(cfg)
    page, S, T = cfg["page_size"], cfg["sequences"], cfg["mixed_tokens"]
    rows = np.asarray(table)

    def slot(seq: int, pos: int) -> int:
        return int(rows[seq, pos // page]) * page + pos % page

    def ragged(entries: list[tuple[int, int]], tokens: int):
        entries = entries + [entries[-1]] * (tokens - len(entries))        # pad with the last token again
        seq = np.array([s for s, _ in entries], np.int32)
        pos = np.array([p for _, p in entries], np.int32)
        slots = np.array([slot(s, p) for s, p in entries], np.int32)
        return [jax.device_put(a) for a in (np.zeros(tokens, np.int32), pos, seq, slots)]

    lengths = [0] * S
    mixed: list[tuple[int, int]] = []
    for s, n in enumerate(cfg["prompts"]):                                  # prefill the first sequences
        mixed += [(s, p) for p in range(n)]
        lengths[s] = n
    for s in range(len(cfg["prompts"]), S):                                 # the others decode one token
        mixed.append((s, lengths[s]))
        lengths[s] += 1
    calls = []

    def run(compiled, inputs, what: str, step: int | None):
        nonlocal pools
        ctx = jax.profiler.StepTraceAnnotation("serve", step_num=step) if step is not None else nullcontext()
        t0 = time.perf_counter()
        with ctx:
            token, pools = compiled(params, pools, table, *inputs)
            jax.block_until_ready((token, pools))
        if step is not None:
            calls.append((what, time.perf_counter() - t0))

    warm = ragged(mixed, T), ragged([(s, lengths[s]) for s in range(S)], S)
    for _ in range(warmup):
        run(mixed_c, warm[0], "mixed", None)
        run(decode_c, warm[1], "decode", None)
    steps = [("mixed", ragged(mixed, T))]
    for _ in range(cfg["decode_steps"]):
        steps.append(("decode", ragged([(s, lengths[s]) for s in range(S)], S)))
        lengths = [n + 1 for n in lengths]
    with jax.profiler.trace(str(work / "log")):
        for i, (what, inputs) in enumerate(steps):
            run(mixed_c if what == "mixed" else decode_c, inputs, what, i)
    costs = module_costs(mixed_c, decode_c)
    return {"program": desc, "config": cfg, "calls": [c for c, _ in calls],
            "traced_step_times_s": [t for _, t in calls], "mixed_batch": [list(e) for e in mixed],
            "xla_cost_analysis": costs}
