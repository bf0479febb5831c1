"""Send and recv as XLA prints them: who talks to whom, on which iterations, and where the data lands.

XLA's GPU passes rewrite a collective-permute inside a loop (a pipeline's stage transfer, a ring's hop) into
``send``/``recv`` pairs (``CollectivePermuteDecomposer``, after ``CollectivePermuteCycleDecomposer`` splits a
ring into its back edge and the rest): an ``after-all`` token, a ``recv`` and a ``send`` on the same
``channel_id``, then ``recv-done`` (the data, element 0 of its tuple) and ``send-done``. The pairs the
permute had are kept in the frontend attributes::

    recv = (f32[4,16], u32[], token[]) recv(after-all), channel_id=3,
        frontend_attributes={_xla_send_recv_pipeline="1",
                             _xla_send_recv_source_target_pairs={{0,1},{1,2},{2,3}},
                             _xla_send_recv_validation={{0,6},{1,7},{2,8}}}

(printed unquoted by XLA, quoted in hand-written HLO and in the proto reader's text); a newer form puts
``source_target_pairs`` on the instruction itself. ``_xla_send_recv_validation`` lists, per pair, the first
and last loop iteration on which that pair really transfers (``CollectivePermuteValidIterationAnnotator``:
pair i sends on iterations i .. i + n − p of an n-iteration pipelined loop, so each pair is valid on
n − p + 1 = v·m iterations), or ``"invalid"`` (a peeled copy that transfers nothing).
``is_host_transfer=true`` marks a transfer to or from the host, not between devices.
"""

from __future__ import annotations

from traceview.parallelism.loops import Loop
from traceview.parsers.hlo.attributes import source_target_pairs
from traceview.parsers.hlo.model import HloModule, Instruction

PAIRS_KEY = "_xla_send_recv_source_target_pairs"
VALIDATION_KEY = "_xla_send_recv_validation"
PIPELINE_KEY = "_xla_send_recv_pipeline"
PIPELINED_LOOP_KEY = "is_pipelined_while_loop"


def frontend_attributes(inst: Instruction) -> dict[str, str]:
    """The instruction's frontend attributes, values unquoted; {} when absent or unreadable."""
    return dict(inst.typed.frontend_attributes)


def _pairs(text: str | None) -> list[tuple[int, int]]:
    """``{{0,1},{1,2}}`` as [(0, 1), (1, 2)]: the decoder of ``source_target_pairs``, whichever attribute holds them."""
    return list(source_target_pairs(text))


def send_recv_pairs(inst: Instruction) -> list[tuple[int, int]]:
    """The (source, target) device pairs of a send or recv: the instruction's own ``source_target_pairs``,
    else the frontend attribute XLA's decomposer writes; [] when neither says."""
    own = list(inst.typed.source_target_pairs)
    return own or _pairs(frontend_attributes(inst).get(PAIRS_KEY))


def is_host_transfer(inst: Instruction) -> bool:
    return inst.typed.is_host_transfer


def validation(inst: Instruction) -> list[tuple[int, int]] | None:
    """Per pair, the first and last loop iteration it transfers on; [] when marked invalid (transfers
    nothing); None when not annotated."""
    value = frontend_attributes(inst).get(VALIDATION_KEY)
    if value is None:
        return None
    return [] if value.strip().lower() == "invalid" else _pairs(value)


def pipelined_loop(inst: Instruction) -> bool:
    """Whether a while loop is marked as a pipeline's loop (``is_pipelined_while_loop``)."""
    return PIPELINED_LOOP_KEY in frontend_attributes(inst)


def partner(module: HloModule, computation: str, inst: Instruction) -> tuple[str, Instruction] | None:
    """The other half of a send or recv: the recv (send) on the same channel, in the same computation first,
    else anywhere in the module (a pipelined transfer's recv may sit before the loop); None when unmatched."""
    want = {"send": "recv", "recv": "send"}.get(inst.opcode)
    channel = inst.typed.channel_id
    if want is None or channel is None:
        return None
    here = module.computations.get(computation)
    for comp in ([here] if here is not None else []) + [c for c in module.computations.values() if c is not here]:
        for other in comp.instructions:
            if other.opcode == want and other.typed.channel_id == channel:
                return comp.name, other
    return None


def received_value(module: HloModule, computation: str, inst: Instruction) -> tuple[str, str] | None:
    """(computation, recv-done) whose tuple element 0 is the data a send delivers or a recv receives; None
    when the recv has no recv-done."""
    recv = (computation, inst) if inst.opcode == "recv" else partner(module, computation, inst)
    if recv is None or recv[1].opcode != "recv":
        return None
    comp = module.computations.get(recv[0])
    if comp is None:
        return None
    for other in comp.instructions:
        if other.opcode == "recv-done" and other.operands[:1] == [recv[1].name]:
            return comp.name, other.name
    return None


def transfer_key(module: HloModule, computation: str, inst: Instruction) -> tuple[str, str]:
    """What one transfer moves, as (computation, value): a send's data operand; a recv, its send's. The
    halves of a ring XLA split into a back edge and the rest send the same value, so they share the key
    (together their pairs make the ring again)."""
    send = (computation, inst) if inst.opcode == "send" else partner(module, computation, inst)
    if send is None or send[1].opcode != "send" or not send[1].operands:
        return computation, inst.name
    return send[0], send[1].operands[0]


def send_recv_note(module: HloModule | None, loop: Loop, transfers: list[Instruction | None], ticks: int) -> str:
    """What a pipeline loop's send/recv add to its reading: that the stage transfer is a send/recv pair, and
    whether XLA's own annotations agree with the schedule read from the loop (each pair transfers on
    n − p + 1 = v·m iterations; ``ticks`` is that count); "" when the transfers are permutes."""
    sends = [t for t in transfers if t is not None and t.opcode == "send"]
    if not sends:
        return ""
    note = ("; the stage transfer is a send/recv pair (a permute XLA's GPU passes split; pairs from "
            f"{PAIRS_KEY})")
    spans = {hi - lo + 1 for t in sends for lo, hi in (validation(t) or [])}
    if len(spans) == 1:
        span = spans.pop()
        note += (f"; {VALIDATION_KEY} lets each pair transfer on {span} iterations, "
                 + (f"n - p + 1 = v·m = {ticks}: it agrees" if span == ticks else
                    f"not the n - p + 1 = {ticks} of the loop's reading"))
    comp = module.computations.get(loop.computation) if module is not None else None
    inst = comp.by_name().get(loop.name) if comp is not None else None
    if inst is not None and pipelined_loop(inst):
        note += f"; XLA marks loop {loop.name} {PIPELINED_LOOP_KEY}"
    return note
