"""Pipeline schedules worked out tick by tick: GPipe, 1F1B, and their interleaved forms (v model chunks per
device), as the books and Megatron-LM define them, for tests that need a known timeline or a dispatch order.

Each device runs its own order of forward (``f``) and backward (``b``) work on (chunk, microbatch):

* ``gpipe``: every forward (chunk by chunk, microbatch by microbatch), then every backward (last chunk
  first): breadth-first;
* ``1f1b``: v = 1: p − s − 1 warm-up forwards, then one forward and one backward in turn, then the rest of
  the backwards; v > 1 (Megatron-LM's interleaved schedule, m a multiple of p): (p − s − 1)·2 + (v − 1)·p
  warm-up forwards, microbatches taken in groups of p per chunk (forward chunk (k // p) mod v, backward the
  reverse), then one forward and one backward in turn.

A piece of work starts once its device is free and its inputs are ready: a forward needs the previous
virtual stage's forward of the microbatch (device s − 1, or the last device's previous chunk); a backward
needs its own forward and the next virtual stage's backward.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Work:
    start: float
    end: float
    stage: int
    kind: str        # "f" or "b"
    chunk: int
    microbatch: int


def _orders(p: int, m: int, v: int, kind: str) -> dict[int, list[tuple[str, int, int]]]:
    orders = {}
    total = v * m
    for s in range(p):
        if kind == "gpipe":
            seq = [("f", c, k) for c in range(v) for k in range(m)] + \
                  [("b", c, k) for c in reversed(range(v)) for k in range(m)]
        else:
            def fwd(i: int) -> tuple[str, int, int]:
                return ("f", (i // p) % v, (i // (p * v)) * p + i % p) if v > 1 else ("f", 0, i)

            def bwd(i: int) -> tuple[str, int, int]:
                return ("b", v - 1 - (i // p) % v, (i // (p * v)) * p + i % p) if v > 1 else ("b", 0, i)
            warm = min((p - s - 1) * 2 + (v - 1) * p if v > 1 else p - s - 1, total)
            seq = [fwd(i) for i in range(warm)]
            for i in range(total - warm):
                seq += [fwd(warm + i), bwd(i)]
            seq += [bwd(i) for i in range(total - warm, total)]
        orders[s] = seq
    return orders


def _needs(kind: str, s: int, c: int, k: int, p: int, v: int) -> list[tuple[str, int, int, int]]:
    if kind == "f":
        return [("f", s - 1, c, k)] if s > 0 else ([("f", p - 1, c - 1, k)] if c > 0 else [])
    nxt = [("b", s + 1, c, k)] if s < p - 1 else ([("b", 0, c + 1, k)] if c < v - 1 else [])
    return [("f", s, c, k)] + nxt


def schedule(p: int, m: int, v: int = 1, kind: str = "gpipe", forward: float = 1.0,
             backward: float = 1.0) -> list[Work]:
    """Every piece of work with its start and end, in order of start."""
    if kind == "1f1b" and v > 1 and m % p:
        raise ValueError("the interleaved 1F1B schedule takes m a multiple of p")
    orders = _orders(p, m, v, kind)
    end: dict[tuple[str, int, int, int], float] = {}
    free, placed, out = [0.0] * p, [0] * p, []
    while any(placed[s] < len(orders[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            while placed[s] < len(orders[s]):
                what, c, k = orders[s][placed[s]]
                needs = _needs(what, s, c, k, p, v)
                if any(n not in end for n in needs):
                    break
                start = max([free[s]] + [end[n] for n in needs])
                end[(what, s, c, k)] = free[s] = start + (forward if what == "f" else backward)
                out.append(Work(start, free[s], s, what, c, k))
                placed[s] += 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"the {kind} order of p={p}, m={m}, v={v} deadlocks")
    return sorted(out, key=lambda w: (w.start, w.stage))
