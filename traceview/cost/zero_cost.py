"""Instructions and custom calls that do no work on the device: costed zero, never "unknown".

These are compiler annotations and bookkeeping that XLA keeps in the HLO but
that move no data and compute nothing when the program runs:

- ``opt-barrier``: an optimization barrier, which only stops the compiler
  from moving work across it (XLA's OptimizationBarrierExpander removes it:
  "functionally a no-op");
- sharding and placement annotations, which the SPMD partitioner and the
  host-offloading passes read and then drop: custom calls ``Sharding``,
  ``SPMDFullToShardShape``, ``SPMDShardToFullShape``, ``MoveToHost``,
  ``MoveToDevice``, ``annotate_device_placement``, ``LayoutConstraint``;
- buffer allocation (``AllocateBuffer``: reserves an output buffer, writes
  nothing) and no-ops (``Noop``, ``NoOp``).

An op from this list is costed 0 FLOPs and 0 bytes with a note saying why, so
it is not reported as an op of unknown cost (a real copy that a placement
annotation turns into, e.g. copy-start/copy-done, is costed by its own rule).
"""

from __future__ import annotations

# (parameter, constant, bitcast, after-all, add-dependency, domain... are free in analysis.FREE.)
ZERO_COST_OPCODES = frozenset({"opt-barrier"})

ZERO_COST_CUSTOM_CALLS = frozenset({
    "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",       # sharding annotations
    "MoveToHost", "MoveToDevice", "annotate_device_placement",         # placement annotations
    "LayoutConstraint",                                                # layout annotation
    "AllocateBuffer",                                                  # buffer allocation
    "Noop", "NoOp", "noop",                                            # no-ops
})


def zero_cost_reason(opcode: str, custom_call_target: str | None = None) -> str | None:
    """Why an instruction costs nothing ("optimization barrier", ...), or None when it may cost something."""
    if opcode in ZERO_COST_OPCODES:
        return f"{opcode}: a compiler annotation that does no work on the device"
    if opcode == "custom-call" and custom_call_target in ZERO_COST_CUSTOM_CALLS:
        return f"custom-call {custom_call_target}: an annotation or bookkeeping call that does no work"
    return None
