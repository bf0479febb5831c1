"""Model chunks per stage: an interleaved MPMD schedule read from the order its programs run in.

In an interleaved (virtual-stage) pipeline each device holds v model chunks, not one: device s runs chunks
s, s + p, s + 2p, ..., each a program of its own (a forward and, in training, a backward one), and a
microbatch passes through the devices v times. The trace shows it as each stage running several programs
m times per step. Which is which is read from when they run, never from their names:

* a stage's microbatch programs (those run as often as its most-run one), ranked by their first start in
  the step: every dependency points forward in time, so rank r is the same chunk and direction on every
  stage (forward chunks first, in chunk order; then the backward chunks, last chunk first);
* a rank is a **forward** program when stage s + 1's k-th execution starts after stage s's k-th ends, a
  **backward** one when stage s's starts after stage s + 1's (by a margin of pairs: :data:`IN_ORDER`);
* the forward ranks are one chunk chain when the first stage's k-th execution of rank r + 1 starts after the
  last stage's k-th of rank r ends (the microbatch comes round again): then v = the forward ranks;
* forward and backward executions alternating on a stage beyond one block each is a 1F1B order
  (interleaved 1F1B, as Megatron-LM runs it); all forwards before all backwards is breadth-first.

The schedule's bubble is then (p − 1)/(v·m + p − 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# How many more of a program's execution pairs (over every neighbouring pair of stages) must run in one order
# than in the other, as a share of the pairs. Less strict than the stages' order (mpmd.IN_SEQUENCE): on CPU
# captures the executions a host dispatched ahead run their ops interleaved, so an execution's first op is a
# noisy start; a chunk's direction is still plain (on generated CPU captures the right direction holds for 73-100%
# of the pairs, the other for 0-7%), and programs run side by side hold in neither order.
IN_ORDER = 0.5
Times = tuple[np.ndarray, np.ndarray]      # one program's executions on one device: starts, ends (ps)


@dataclass
class Chunks:
    virtual_stages: int = 1                 # v: forward chunks per stage chained into one microbatch path
    directions: dict[int, str] = field(default_factory=dict)   # rank -> "forward" | "backward"
    alternations: int = 0                   # forward/backward changes beyond one block each, over the stages
    evidence: str = ""


def read_chunks(runs: pd.DataFrame) -> Chunks:
    """The model chunks of a pipeline's stages from every program execution (columns stage — ordered 0 ..
    p − 1 —, device, program, step, start_ps, end_ps), read on each stage's first device in the step with the
    most executions; v = 1 when the programs make no chain of several forward chunks."""
    if runs.empty:
        return Chunks()
    first = runs.groupby("stage")["device"].transform("min")
    mine = runs[runs["device"] == first]
    busiest = mine.groupby("step").size().idxmax()
    mine = mine[mine["step"] == busiest]
    ranked = _ranked(mine)
    stages = sorted(ranked)
    if len(stages) < 2 or len({len(r) for r in ranked.values()}) != 1:
        return Chunks()
    times = {(s, p): _times(mine, s, p) for s in stages for p in ranked[s]}
    directions: dict[int, str] = {}
    for r in range(len(ranked[stages[0]])):
        pairs = [(times[(a, ranked[a][r])], times[(b, ranked[b][r])]) for a, b in zip(stages, stages[1:])]
        direction = _direction(pairs)
        if direction is None:
            return Chunks()
        directions[r] = direction
    forward = [r for r, d in directions.items() if d == "forward"]
    backward = [r for r, d in directions.items() if d == "backward"]
    if len(forward) < 2 or len(backward) not in (0, len(forward)):
        return Chunks(1, directions)
    last, head = stages[-1], stages[0]
    chained = _held([(times[(last, ranked[last][a])], times[(head, ranked[head][b])])
                     for a, b in zip(forward, forward[1:])])
    if not chained:
        return Chunks(1, directions)
    alternations = sum(_kind_changes(mine[mine["stage"] == s], {ranked[s][r]: d for r, d in directions.items()})
                       for s in stages)
    v = len(forward)
    evidence = (f"each stage runs {len(directions)} program(s) m times per step: {v} forward chunk(s) in a "
                "chain (the first stage's next chunk starts after the last stage's chunk ended, microbatch by "
                "microbatch)" + (f" and {len(backward)} backward chunk(s)" if backward else "")
                + ("; forward and backward executions alternate on a stage: an interleaved 1F1B order"
                   if alternations else "; each chunk's executions run in one block: breadth-first"))
    return Chunks(v, directions, alternations, evidence)


def _ranked(mine: pd.DataFrame) -> dict[int, list[str]]:
    """Per stage, its microbatch programs (run as often as its most-run one) by first start."""
    out: dict[int, list[str]] = {}
    for stage, part in mine.groupby("stage"):
        counts = part.groupby("program").size()
        chosen = part[part["program"].isin(counts.index[counts == counts.max()])]
        order = chosen.groupby("program")["start_ps"].min().sort_values(kind="stable")
        out[int(stage)] = [str(p) for p in order.index]
    return out


def _times(mine: pd.DataFrame, stage: int, program: str) -> Times:
    part = mine[(mine["stage"] == stage) & (mine["program"] == program)].sort_values("start_ps", kind="stable")
    return part["start_ps"].to_numpy(dtype="float64"), part["end_ps"].to_numpy(dtype="float64")


def _count(before: Times, after: Times) -> tuple[int, int]:
    """(k where ``after``'s k-th execution starts once ``before``'s k-th ended, k compared)."""
    k = min(len(before[0]), len(after[0]))
    return int((after[0][:k] >= before[1][:k]).sum()), k


def _held(pairs: list[tuple[Times, Times]]) -> bool:
    """Whether, over all the pairs, the second's executions start once the first's ended, by a margin of
    IN_ORDER of the pairs over the other order."""
    ahead = [_count(a, b) for a, b in pairs]
    behind = [_count(b, a) for a, b in pairs]
    total = sum(k for _, k in ahead)
    return total > 0 and sum(n for n, _ in ahead) - sum(n for n, _ in behind) >= IN_ORDER * total


def _direction(pairs: list[tuple[Times, Times]]) -> str | None:
    """forward: each next stage's execution after this stage's; backward: the other way round."""
    if _held(pairs):
        return "forward"
    if _held([(b, a) for a, b in pairs]):
        return "backward"
    return None


def _kind_changes(part: pd.DataFrame, kind_of: dict[str, str]) -> int:
    """Changes between forward and backward executions on one stage beyond the one from its forward block to
    its backward block."""
    seq = part[part["program"].isin(kind_of)].sort_values("start_ps", kind="stable")["program"].map(kind_of)
    kinds = seq.to_numpy()
    changes = int((kinds[1:] != kinds[:-1]).sum()) if len(kinds) > 1 else 0
    return max(0, changes - (len(set(kinds)) - 1))
