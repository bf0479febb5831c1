"""A transformer layer's widths read from the parameter all-gathers the parallelism view found (an FSDP
program gathers each layer's weights whole, so their shapes are the layer's): D, F, the query and K/V heads
and the head dimension, and the parameters of one layer. This is what a compiled dump carries of a model's
description even when it is cut short (MaxText's reference HLO has no ENTRY, hence no layer count and no
embedding); the rest of a :class:`~traceview.whatif.describe.ModelSpec` (layers, vocabulary) must be given.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from traceview.parallelism.report import Parallelism
from traceview.whatif.describe import ModelSpec


@dataclass(frozen=True)
class LayerShapes:
    d_model: int
    d_ff: int
    heads: int
    kv_heads: int
    head_dim: int
    params: int             # elements of the layer's gathered weights (each gathered array counted once)
    gated: bool             # three MLP matrices (two D x F, one F x D)
    how: str

    def spec(self, layers: int, vocab: int) -> ModelSpec:
        """The full description, with what the layer's shapes cannot tell."""
        return ModelSpec(layers, self.d_model, self.d_ff, self.heads, self.kv_heads, self.head_dim, vocab,
                         self.gated)


def layer_shapes(report: Parallelism) -> LayerShapes | None:
    """The layer read from the parameter all-gathers of the program's collectives; None without them or when
    they are not a transformer layer's (no D x F matrix and no D x heads x head-dim projection)."""
    gathered = [tuple(d for d in c.dims if d != 1) for c in report.collectives
                if c.attribution.site.kind == "all-gather" and c.pattern == "parameter all-gather"]
    gathered = [d for d in gathered if len(d) >= 2]
    if not gathered:
        return None
    matrices = Counter(d for d in gathered if len(d) == 2)
    projections = Counter(d for d in gathered if len(d) == 3)
    widths = Counter(x for d in matrices for x in d) + Counter(x for d in projections for x in d)
    if not matrices or not projections:
        return None
    d_model = widths.most_common(1)[0][0]           # every weight of a layer has a D side
    ffn = [x for d in matrices for x in d if x != d_model]
    heads = sorted({(d[1], d[2]) for d in projections if d_model in d and len(set(d)) == 3
                    and d[0] == d_model} | {(d[0], d[1]) for d in projections if d[2] == d_model})
    if not ffn or not heads:
        return None
    head_dim = Counter(h for _, h in heads).most_common(1)[0][0]
    counts = sorted({n for n, h in heads if h == head_dim})
    params = sum(math.prod(d) for d in gathered)
    mlp = sum(n for d, n in matrices.items() if set(d) <= {d_model, max(ffn)})
    found = LayerShapes(d_model, max(ffn), counts[-1], counts[0], head_dim, params, mlp >= 3,
                        f"{len(gathered)} parameter all-gathers: {sorted(set(gathered))}")
    # the layer must be the book's: its gathered weights are exactly the MLP and the Q, K, V, O projections
    # (an MLA or mixture-of-experts layer is not, and is not guessed at)
    return found if found.spec(1, 0).params == params else None
