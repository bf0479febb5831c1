"""What a collective moves: kind, payload bytes, replica groups.

Payload definition (per device, per execution), chosen so a ring-algorithm
formula can be applied directly with ``n = group_size``:

* all-reduce: bytes of the array being reduced (operand = result).
  Ring traffic per device = 2 (n-1)/n x payload.
* all-gather: bytes of the gathered result (operand x n).
  Ring traffic per device = (n-1)/n x payload.
* reduce-scatter: bytes of the full operand before scattering (result x n).
  Ring traffic per device = (n-1)/n x payload.
* all-to-all / ragged-all-to-all: bytes of the device's input buffer(s).
  Traffic per device = (n-1)/n x payload.
* collective-permute, send, recv, collective-broadcast: bytes of the buffer
  sent (or received) by one device. Traffic = payload. For permutes and
  send/recv, ``groups`` lists the [source, target] pairs and group_size is 2.

* host-transfer: a ``copy-start``/``copy-done`` between device memory and
  host memory (memory space S(5), e.g. TPU host offload): the bytes of the
  array copied, moved over the host link (PCIe). group_size is 1.

The ``-start`` half of an async pair (and an ``async-start`` wrapping a
collective) carries the payload; the ``-done`` half reports the kind with
payload 0 so sums never count a transfer twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from traceview.cost.shapes import byte_size, leaves
from traceview.parsers.hlo.model import HloModule, Instruction, Shape
from traceview.vocabulary import COLLECTIVE_OPCODES

HOST_MEMORY_SPACE = "S(5)"  # XLA's Layout::kHostMemorySpace, as the layout text prints it


@dataclass
class CollectiveInfo:
    kind: str                                   # "all-reduce", ... ("" when not a collective)
    payload_bytes: float = 0.0
    group_size: int | None = None               # devices in one group; None when unknown
    groups: list[list[int]] | None = None       # explicit groups; None when "all devices" or unknown
    crosses_dcn: bool | None = None
    is_done: bool = False
    ring_directions: int | None = None          # 1 or 2 when XLA's backend_config names its ring algorithm


def collective_kind(opcode: str) -> tuple[str, bool]:
    """("all-reduce", is_done) for all-reduce / all-reduce-start / all-reduce-done; ("", False) otherwise."""
    base, done = opcode, False
    if base.endswith("-done"):
        base, done = base[:-5], True
    elif base.endswith("-start"):
        base = base[:-6]
    return (base, done) if base in COLLECTIVE_OPCODES else ("", False)


def _array_bytes(shapes: list[Shape]) -> float:
    return float(sum(byte_size(leaf) for s in shapes for leaf in leaves(s) if leaf.element_type != "token"))


def collective_info(inst: Instruction, operands: list[Shape], module: HloModule,
                    devices_per_slice: int | None = None, opcode: str | None = None) -> CollectiveInfo | None:
    """Collective facts of ``inst`` (pass ``opcode`` for the op an async-start wraps); None if not a collective."""
    if (opcode or inst.opcode) in ("copy-start", "copy-done"):
        return _host_transfer(inst, opcode or inst.opcode)
    kind, done = collective_kind(opcode or inst.opcode)
    if not kind:
        return None
    groups, size = _groups(inst, kind, module)
    info = CollectiveInfo(kind, 0.0, size, groups, None, done, _ring_directions(inst))
    if groups and devices_per_slice:
        info.crosses_dcn = any(len({d // devices_per_slice for d in g}) > 1 for g in groups)
    if done:
        return info
    if kind == "all-gather":
        info.payload_bytes = _array_bytes([_result(inst)])
    elif kind == "recv":
        info.payload_bytes = _array_bytes(leaves(inst.shape)[:1])
    elif kind in ("collective-permute", "send", "ragged-all-to-all"):
        info.payload_bytes = _array_bytes(operands[:1])
    else:  # all-reduce, reduce-scatter, all-to-all, collective-broadcast: the input buffers
        info.payload_bytes = _array_bytes(operands)
    return info


def _in_host_memory(shape: Shape) -> bool:
    return bool(shape.layout) and HOST_MEMORY_SPACE in shape.layout


def _host_transfer(inst: Instruction, opcode: str) -> CollectiveInfo | None:
    """A copy between device and host memory; None for a device-to-device async copy.

    copy-start's shape is (destination, source, context); a copy-done is
    judged through its copy-start, which the caller passes (the `-done` rule).
    """
    shape = inst.shape  # for a copy-done, the caller passes its copy-start
    arrays = shape.tuple_shapes[:2] if shape.is_tuple else (shape,)
    if not any(_in_host_memory(a) for a in arrays):
        return None
    if opcode == "copy-done":
        return CollectiveInfo("host-transfer", 0.0, 1, None, None, True)
    return CollectiveInfo("host-transfer", _array_bytes([arrays[0]]), 1, None, None, False)


def _ring_directions(inst: Instruction) -> int | None:
    """1 or 2 when the TPU backend_config names the ring algorithm XLA chose
    (collective_algorithm_config.strategy, e.g. "UniDirection1DRingStrategy"), else None."""
    config = inst.typed.backend_config
    strategy = str((config.get("collective_algorithm_config") or {}).get("strategy", ""))
    if strategy.startswith("UniDirection"):
        return 1
    if strategy.startswith("BiDirection"):
        return 2
    return None


def _result(inst: Instruction) -> Shape:
    shape = inst.shape
    if inst.opcode.endswith("-start") and shape.is_tuple and len(shape.tuple_shapes) >= 2:
        return shape.tuple_shapes[1]
    return shape


def _groups(inst: Instruction, kind: str, module: HloModule) -> tuple[list[list[int]] | None, int | None]:
    if kind in ("collective-permute", "send", "recv"):
        pairs = inst.typed.source_target_pairs
        return ([list(p) for p in pairs] if pairs else None), 2
    decoded = inst.typed.replica_groups
    if decoded:
        return [list(g) for g in decoded], len(decoded[0])
    # "{}" or absent: every device of the program takes part.
    total = _device_count(module)
    return None, total


def _device_count(module: HloModule) -> int | None:
    """Devices of the program (num_partitions x replica_count); None when the module does not say."""
    attrs = getattr(module, "attributes", {}) or {}
    try:
        partitions = int(attrs.get("num_partitions", 1))
        replicas = int(attrs.get("replica_count", 1))
    except ValueError:
        return None
    n = partitions * replicas
    return n if n > 1 else None
