"""The names every stage shares: the bound labels and the collective kinds.

A bound label says which roofline term limits an op. A collective is named
twice: by its XLA opcode (what the cost model reads in HLO, without its
``-start``/``-done`` suffix) and by the communication pattern the roofline
prices (the ring formulas of "How to Scale Your Model"); ``PATTERN_OF`` maps
the first, and the spellings traces use, onto the second, and
``collective_pattern`` reads any ``collective_kind`` value as a pattern's name.
"""

from __future__ import annotations

import math

# Which roofline term bounds an op; "unknown" when a needed figure or cost is missing.
BOUNDS = ("compute", "memory", "communication", "unknown")
# Time by bound also counts the devices' idle time (summaries, diffs).
BOUNDS_AND_IDLE = (*BOUNDS, "idle")

# XLA opcodes of collectives, as the cost model reads them (async "-start"/"-done" stripped).
COLLECTIVE_OPCODES = ("all-reduce", "all-gather", "reduce-scatter", "ragged-all-to-all", "all-to-all",
                      "collective-permute", "collective-broadcast", "send", "recv")
# The communication patterns the roofline prices; host transfers (offload copies) ride PCIe.
COLLECTIVE_PATTERNS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "permute", "host-transfer")

# Opcodes and the other spellings traces use -> pattern.
PATTERN_OF = {
    "all-gather": "all-gather", "allgather": "all-gather",
    "reduce-scatter": "reduce-scatter", "reducescatter": "reduce-scatter",
    "all-reduce": "all-reduce", "allreduce": "all-reduce",
    "all-to-all": "all-to-all", "alltoall": "all-to-all", "ragged-all-to-all": "all-to-all",
    "collective-permute": "permute", "permute": "permute", "send": "permute", "recv": "permute",
    "collective-broadcast": "permute", "broadcast": "permute",
    "host-transfer": "host-transfer", "host-offload": "host-transfer", "host-prefetch": "host-transfer",
}

# What the roofline prices an op as: one of COLLECTIVE_PATTERNS, no collective, or a collective whose pattern
# it does not model.
NOT_COLLECTIVE, UNMODELLED = "", "unmodelled"
PATTERN_CATEGORIES = (NOT_COLLECTIVE, UNMODELLED, *COLLECTIVE_PATTERNS)
_NO_COLLECTIVE = {"", "none", "nan", "null"}


def collective_pattern(value: object) -> str:
    """The pattern a ``collective_kind`` value is priced as (an opcode or a trace's spelling, with or without
    its async suffix): a name of COLLECTIVE_PATTERNS, NOT_COLLECTIVE for none, UNMODELLED otherwise."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NOT_COLLECTIVE
    text = str(value).strip().lower().replace("_", "-")
    for suffix in ("-start", "-done", "-update"):
        if text.endswith(suffix):
            text = text[: -len(suffix)]
    if text in _NO_COLLECTIVE:
        return NOT_COLLECTIVE
    return PATTERN_OF.get(text, UNMODELLED)
