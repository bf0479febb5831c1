"""Per-instruction cost of an HLO module, following XLA's HloCostAnalysis rules.

One :class:`ModuleAnalysis` per module. ``cost(inst, comp)`` gives the figures
XLA's HloCostAnalysis attaches to an instruction: fusions sum the FLOPs of
their fused computation and count only the bytes that cross their boundary;
reduce/map/scatter/... multiply the cost of their ``to_apply`` computation;
while loops count one trip of body and condition; conditionals take the
largest branch. ``computation_cost`` sums a computation, so the entry's sum is
what ``compiled.cost_analysis()`` reports.

Deliberate differences from XLA (none of them occurs in CPU programs, where the
totals are checked against XLA): custom calls XLA cannot see into (it reports
-1) get library FLOPs where :mod:`traceview.cost.library` knows the call, and
are otherwise zero with ``unknown=True``; the ``-done`` half of an async pair
costs nothing (its ``-start`` carries the bytes), and an async copy counts
its read at ``copy-start`` and its write at ``copy-done``, as libtpu does; a
ragged dot counts 2 x output elements x contracting extent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from traceview.cost.flops import conv_flops, dot_flops
from traceview.cost.library import kernel_outputs, library_call_cost
from traceview.cost.record import Cost
from traceview.cost.record import io_cost as _io
from traceview.cost.shapes import byte_size, elements, elements_recursive, leaf_bytes, minor_to_major
from traceview.cost.trip_count import TripCount, while_trip_count
from traceview.cost.zero_cost import zero_cost_reason
from traceview.parsers.hlo.model import Computation, HloModule, Instruction, Shape

TRANSCENDENTAL = frozenset({
    "erf", "exponential", "log", "logistic", "power", "sqrt", "cbrt", "rsqrt", "tanh", "sine", "cosine",
    "exponential-minus-one", "log-plus-one", "atan2", "tan"})
ELEMENTWISE = TRANSCENDENTAL | frozenset({
    "abs", "add", "and", "bitcast-convert", "ceil", "clamp", "clz", "compare", "complex", "convert", "divide",
    "floor", "imag", "is-finite", "maximum", "minimum", "multiply", "negate", "not", "or", "popcnt", "real",
    "reduce-precision", "remainder", "round-nearest-afz", "round-nearest-even", "select", "shift-left",
    "shift-right-arithmetic", "shift-right-logical", "sign", "stochastic-convert", "subtract", "xor"})
# No arithmetic, touches nothing: XLA counts zero bytes.
FREE = frozenset({"parameter", "constant", "get-tuple-element", "bitcast", "after-all", "add-dependency", "domain"})
# XLA's default: no FLOPs, bytes = operands + output.
DATA_MOVEMENT = frozenset({
    "copy", "concatenate", "pad", "reverse", "iota", "reshape", "dynamic-reshape", "broadcast", "transpose",
    "send", "recv", "all-gather", "all-gather-start", "reduce-scatter", "all-to-all", "ragged-all-to-all",
    "collective-broadcast", "collective-permute", "collective-permute-start",
    "partition-id", "replica-id", "optimization-barrier", "batch-norm-training",
    "batch-norm-inference", "batch-norm-grad", "get-dimension-size", "set-dimension-size",
    "rng-get-and-update-state", "topk", "rng-bit-generator", "rng"})
CONTROL = frozenset({"while", "conditional", "call"})
# The waiting half of an async pair moves nothing itself: its -start (or the wrapped op) carries
# the bytes, so a pair is never counted twice. (XLA's default would count operands + output again.)
ASYNC_DONE = frozenset({"all-gather-done", "all-reduce-done", "collective-permute-done", "async-done",
                        "async-update", "send-done", "recv-done"})
# Large constants inside fusions are read from memory (XLA's immediate_constant_max_elements()).
IMMEDIATE_CONSTANT_MAX_ELEMENTS = 1


@dataclass
class _CompIndex:
    by_name: dict[str, Instruction]
    users: dict[str, list[Instruction]] = field(default_factory=dict)


class ModuleAnalysis:
    """Costs of one module's instructions; computation sums are memoised."""

    def __init__(self, module: HloModule):
        self.module = module
        self._index: dict[str, _CompIndex] = {}
        self._sums: dict[tuple[str, bool], Cost] = {}
        self._own: dict[tuple[str, str], Cost] = {}
        self._trips: dict[tuple[str, str], TripCount] = {}
        self.unknown_opcodes: dict[str, set[str]] = {}   # opcode -> instruction names
        self.lower_bound_kernels: dict[str, set[str]] = {}  # custom-call target -> names costed by shapes only
        self.missing_operands: set[str] = set()
        self.malformed: dict[str, str] = {}           # "computation/instruction" -> error

    # -- lookups -----------------------------------------------------------
    def index(self, comp: Computation) -> _CompIndex:
        idx = self._index.get(comp.name)
        if idx is None:
            idx = _CompIndex(comp.by_name())
            for inst in comp.instructions:
                for op in dict.fromkeys(inst.operands):
                    idx.users.setdefault(op, []).append(inst)
            self._index[comp.name] = idx
        return idx

    def operand_shapes(self, inst: Instruction, comp: Computation) -> list[Shape]:
        by_name = self.index(comp).by_name
        shapes = []
        for op in inst.operands:
            target = by_name.get(op)
            if target is None:
                self.missing_operands.add(f"{comp.name}/{inst.name}: {op}")
                shapes.append(Shape("token"))
            else:
                shapes.append(target.shape)
        return shapes

    def computation(self, name: str | None) -> Computation | None:
        return self.module.computations.get(name) if name else None

    def called(self, inst: Instruction, key: str, position: int = 0) -> Computation | None:
        """The computation named by attribute ``key`` (e.g. ``to_apply``), else by position."""
        names = inst.typed.calls.get(key)
        if names:
            comp = self.computation(names[0])
            if comp is not None:
                return comp
        if position < len(inst.called_computations):
            return self.computation(inst.called_computations[position])
        return None

    def trip_count(self, inst: Instruction, comp: Computation) -> TripCount:
        """A while loop's trip count: XLA's ``known_trip_count``, else inferred from the loop's structure."""
        key = (comp.name, inst.name)
        trips = self._trips.get(key)
        if trips is None:
            trips = while_trip_count(inst, comp, self.called(inst, "condition", 0), self.called(inst, "body", 1),
                                     self.called, lambda c: self.index(c).by_name)
            self._trips[key] = trips
        return trips

    # -- computations --------------------------------------------------------
    def computation_cost(self, comp: Computation, per_step: bool = False) -> Cost:
        """Sum over a computation's instructions (XLA's properties of a sub-computation).

        With ``per_step``, while bodies are multiplied by their trip count (known or inferred).
        """
        key = (comp.name, per_step)
        total = self._sums.get(key)
        if total is None:
            total = Cost()
            for inst in comp.instructions:
                total.add(self.cost(inst, comp, per_step))
            self._sums[key] = total
        return total

    # -- instructions ----------------------------------------------------------
    def cost(self, inst: Instruction, comp: Computation, per_step: bool = False) -> Cost:
        """XLA's HloCostAnalysis properties of one instruction (control flow included)."""
        op = inst.opcode
        if op == "while":
            return self._while(inst, comp, per_step)
        if op == "conditional":
            return self._conditional(inst, per_step)
        if op == "call" or op == "async-start":
            sub = self.called(inst, "to_apply" if op == "call" else "calls")
            return replace(self.computation_cost(sub, per_step)) if sub else self._unknown_opcode(inst)
        return self.own_cost(inst, comp)

    def own_cost(self, inst: Instruction, comp: Computation) -> Cost:
        """Cost of the instruction itself; control flow (while/conditional/call) costs nothing here.

        Memoised: callers must not modify the returned record."""
        key = (comp.name, inst.name)
        cost = self._own.get(key)
        if cost is None:
            try:
                cost = self._own_cost(inst, comp)
                if min(cost.flops, cost.transcendentals, cost.bytes_read, cost.bytes_written) < 0:
                    # Shapes that contradict each other (an output larger than a reduction's input, ...).
                    raise ValueError("operand and result shapes do not fit: a negative count")
            except (IndexError, KeyError, ValueError, ZeroDivisionError, OverflowError) as exc:
                # Malformed or unexpected instruction (missing operand, odd attribute): say so, never crash.
                self.malformed[f"{comp.name}/{inst.name}"] = f"{type(exc).__name__}: {exc}"
                cost = Cost(unknown=True, note=f"could not cost this {inst.opcode}: {exc}")
            self._own[key] = cost
        return cost

    def _own_cost(self, inst: Instruction, comp: Computation) -> Cost:
        op = inst.opcode
        shape = inst.shape
        if op in CONTROL:
            return Cost()
        if op == "async-start":
            sub = self.called(inst, "calls")
            return replace(self.computation_cost(sub)) if sub else self._unknown_opcode(inst)
        if op in FREE or op in ASYNC_DONE:
            return Cost()
        free = zero_cost_reason(op, inst.custom_call_target)
        if free:
            return Cost(note=free)
        operands = self.operand_shapes(inst, comp)
        # XLA's default: operands + output; a tuple result counts its leaves (the tuple
        # instruction itself counts only its index table, see _tuple).
        out = leaf_bytes(shape)
        read = sum(byte_size(s) for s in operands)
        if op in ELEMENTWISE:
            n = elements(shape)
            return _io(read, out, 0, n) if op in TRANSCENDENTAL else _io(read, out, n)
        if op == "fusion":
            return self._fusion(inst)
        if op in ("dot", "ragged-dot", "scaled-dot"):
            # A ragged dot does the work of a dense dot of its output (each row meets one group);
            # XLA's own count for it drops an output dimension, which undercounts. A scaled dot
            # (block-scaled operands) counts as the dot it is, as XLA's HandleScaledDot does.
            f = dot_flops(operands[0].dims, elements(shape), inst.typed.lhs_contracting_dims)
            return _io(read, out, f)
        if op == "convolution":
            return _io(read, out, self._conv_flops(inst, operands[0], operands[1], shape))
        if op in ("reduce", "reduce-window", "map", "scatter", "select-and-scatter", "sort", "fft",
                  "all-reduce", "all-reduce-start", "slice", "dynamic-slice", "dynamic-update-slice", "gather",
                  "tuple", "triangular-solve", "cholesky"):
            return getattr(self, "_" + op.replace("-", "_"))(inst, operands, read, out)
        if op == "transpose" and self._transpose_is_bitcast(inst, operands[0]):
            return Cost()
        if op == "rng":
            return _io(read, out, 0, elements(shape))
        if op == "rng-bit-generator":
            return _io(read, out, 0, elements_recursive(shape))
        if op == "custom-call":
            return self._custom_call(inst, operands)
        if op == "copy-start":  # the read half of an async copy (libtpu splits it the same way)
            return Cost(0, 0, byte_size(operands[0]) if operands else 0, 0, byte_size(operands[0]) if operands else 0)
        if op == "copy-done":   # the write half
            return Cost(0, 0, 0, out, out)
        if op in DATA_MOVEMENT:
            return _io(read, out)
        return self._unknown_opcode(inst)

    def _unknown_opcode(self, inst: Instruction) -> Cost:
        self.unknown_opcodes.setdefault(inst.opcode, set()).add(inst.name)
        return Cost(unknown=True, note=f"no cost rule for opcode {inst.opcode!r}")

    # -- control flow ----------------------------------------------------------
    def _while(self, inst: Instruction, comp: Computation, per_step: bool) -> Cost:
        total = Cost()
        body, cond = self.called(inst, "body", 1), self.called(inst, "condition", 0)
        trips = self.trip_count(inst, comp).count if per_step else None
        for sub in (body, cond):
            if sub is not None:
                total.add(self.computation_cost(sub, per_step), trips if trips is not None else 1)
        return total

    def _conditional(self, inst: Instruction, per_step: bool) -> Cost:
        best = Cost()
        for name in inst.called_computations:
            sub = self.computation(name)
            if sub is None:
                continue
            c = self.computation_cost(sub, per_step)
            best = Cost(max(best.flops, c.flops), max(best.transcendentals, c.transcendentals),
                        max(best.bytes_read, c.bytes_read), max(best.bytes_written, c.bytes_written),
                        max(best.bytes_accessed, c.bytes_accessed), best.unknown or c.unknown)
        return best

    # -- handlers with to_apply ---------------------------------------------------
    def _sub(self, inst: Instruction, key: str = "to_apply", position: int = 0) -> Cost:
        sub = self.called(inst, key, position)
        return self.computation_cost(sub) if sub is not None else Cost()

    def _reduce(self, inst, operands, read, out) -> Cost:
        n = elements(operands[0]) - elements(inst.shape.tuple_shapes[0] if inst.shape.is_tuple else inst.shape)
        sub = self._sub(inst)
        return _io(read, out, sub.flops * n, sub.transcendentals * n)

    def _reduce_window(self, inst, operands, read, out) -> Cost:
        win = inst.typed.window
        shape = inst.shape.tuple_shapes[0] if inst.shape.is_tuple else inst.shape
        window_elements = math.prod(w.size for w in win)
        out_n = elements(shape)
        count = (window_elements - 1) * out_n
        # A reduce-window that is really a reduce broadcast back along one dimension.
        if (sum(w.size != 1 for w in win) == 1 and sum(w.pad_low != 0 or w.pad_high != 0 for w in win) == 1
                and not inst.shape.is_tuple):
            for i, w in enumerate(win):
                if (w.size != 1 and w.pad_low != 0 and w.pad_high != 0 and w.pad_low == w.pad_high
                        and w.size == 2 * w.pad_low + 1):
                    if w.pad_low == shape.dims[i] - 1:
                        window_elements = shape.dims[i]
                        count = out_n // window_elements + window_elements - 1
                    break
        sub = self._sub(inst)
        return _io(read, out, sub.flops * count, sub.transcendentals * count)

    def _map(self, inst, operands, read, out) -> Cost:
        sub, n = self._sub(inst), elements(inst.shape)
        return _io(read, out, sub.flops * n, sub.transcendentals * n)

    def _select_and_scatter(self, inst, operands, read, out) -> Cost:
        select, scatter = self._sub(inst, "select", 0), self._sub(inst, "scatter", 1)
        n = elements(operands[1])
        taps = math.prod(w.size for w in inst.typed.window)
        flops = select.flops * n * (taps - 1) + scatter.flops * n
        trans = select.transcendentals * n * (taps - 1) + scatter.transcendentals * n
        return _io(read, out, flops, trans)

    def _scatter(self, inst, operands, read, out) -> Cost:
        k = (len(operands) - 1) // 2
        updates = operands[k + 1:]
        update_bytes = sum(byte_size(s) for s in updates)
        indices = byte_size(operands[k]) if k < len(operands) else 0
        sub, n = self._sub(inst), elements(updates[0]) if updates else 0
        return Cost(sub.flops * n, sub.transcendentals * n, 2 * update_bytes + indices, update_bytes,
                    3 * update_bytes + indices)

    def _gather(self, inst, operands, read, out) -> Cost:
        indices = byte_size(operands[1]) if len(operands) > 1 else 0
        return Cost(0, 0, out + indices, out, 2 * out + indices)

    # -- simple shape rules ----------------------------------------------------------
    def _sort(self, inst, operands, read, out) -> Cost:
        n = elements(operands[0]) if operands else 0
        return _io(read, out, n * math.ceil(math.log2(n)) if n > 1 else 0)

    def _fft(self, inst, operands, read, out) -> Cost:
        real = operands[0].tuple_shapes[0] if operands[0].is_tuple else operands[0]
        logs = math.prod(int(math.log2(d)) if d > 0 else 0 for d in inst.typed.fft_length)
        return _io(read, out, 2 * 4 * logs * elements(real))

    def _all_reduce(self, inst, operands, read, out) -> Cost:
        arrays = [s for s in _subshapes(inst.shape) if not s.is_tuple]
        written = sum(byte_size(s) for s in arrays)
        return Cost(sum(elements(s) for s in arrays), 0, read, written, read + written)

    _all_reduce_start = _all_reduce

    def _slice(self, inst, operands, read, out) -> Cost:
        return Cost(0, 0, out, out, 2 * out)

    def _dynamic_slice(self, inst, operands, read, out) -> Cost:
        start = byte_size(operands[1]) if len(operands) > 1 else 0
        return Cost(0, 0, out + start, out, 2 * out + start)

    def _dynamic_update_slice(self, inst, operands, read, out) -> Cost:
        update = byte_size(operands[1])
        start = byte_size(operands[2]) if len(operands) > 2 else 0
        return Cost(0, 0, update + start, update, 2 * update + start)

    def _tuple(self, inst, operands, read, out) -> Cost:
        table = byte_size(inst.shape)
        return Cost(0, 0, 0, table, table)

    def _triangular_solve(self, inst, operands, read, out) -> Cost:
        a, b = operands[0], operands[1]
        r = byte_size(a) / 2 + byte_size(b)
        return Cost(2 * a.dims[-1] * elements(b), 0, r, out, r + out)

    def _cholesky(self, inst, operands, read, out) -> Cost:
        a = operands[0]
        half = byte_size(a) / 2
        return Cost(a.dims[-1] * elements(a) // 3, 0, half, half, 2 * half)

    def _transpose_is_bitcast(self, inst: Instruction, operand: Shape) -> bool:
        perm = inst.typed.dimensions
        if len(perm) != len(inst.shape.dims):
            return False
        return tuple(perm[d] for d in minor_to_major(inst.shape)) == minor_to_major(operand)

    def _conv_flops(self, inst: Instruction, lhs: Shape, rhs: Shape, out: Shape) -> float:
        dims = inst.typed.conv_dims
        if dims is None:
            return 0.0
        return conv_flops(lhs.dims, rhs.dims, out.dims, dims, inst.typed.window,
                          inst.typed.feature_group_count,
                          inst.typed.batch_group_count)

    # -- fusion ------------------------------------------------------------------------
    def _fusion(self, inst: Instruction) -> Cost:
        fused = self.called(inst, "calls")
        if fused is None:
            return self._unknown_opcode(inst)
        if inst.fusion_kind == "kCustom":  # XLA costs a custom gather/scatter fusion as the bare op
            for sub in fused.instructions:
                if sub.opcode in ("gather", "scatter"):
                    ops = self.operand_shapes(sub, fused)
                    return getattr(self, "_" + sub.opcode)(sub, ops, 0, byte_size(sub.shape))
        inner = self.computation_cost(fused)
        written = self._fusion_output_bytes(inst, fused)
        read = 0.0
        idx = self.index(fused)
        for sub in fused.instructions:
            if sub.opcode == "constant" and elements(sub.shape) > IMMEDIATE_CONSTANT_MAX_ELEMENTS:
                read += byte_size(sub.shape)
            elif sub.opcode == "parameter":
                read += self._parameter_read_bytes(sub, fused, idx)
        return Cost(inner.flops, inner.transcendentals, read, written, read + written, inner.unknown, inner.note,
                    inner.lower_bound)

    def _fusion_output_bytes(self, inst: Instruction, fused: Computation) -> float:
        by_name = self.index(fused).by_name
        root = by_name.get(fused.root or "") or (fused.instructions[-1] if fused.instructions else None)
        if root is None:
            return 0.0

        def dus_update_bytes(node: Instruction) -> float | None:
            if node.opcode != "dynamic-update-slice" or len(node.operands) < 2:
                return None
            upd = by_name.get(node.operands[1])
            return byte_size(upd.shape) if upd is not None else 0.0

        total = 0.0
        for index, sub in _indexed_subshapes(inst.shape):
            if sub.is_tuple:
                continue
            node = root
            if len(index) == 1 and root.opcode == "tuple" and index[0] < len(root.operands):
                node = by_name.get(root.operands[index[0]], root)
            upd = dus_update_bytes(node) if (not index or len(index) == 1) else None
            total += upd if upd is not None else byte_size(sub)
        return total

    def _parameter_read_bytes(self, param: Instruction, fused: Computation, idx: _CompIndex) -> float:
        """Bytes a fusion reads for one parameter (XLA's FusionParameterReadBytes).

        Slices read only what they produce; broadcasts and reshapes each read the
        whole parameter; all other users share one read.
        """
        if param.shape.is_tuple:
            total = 0.0
            for i, _ in enumerate(param.shape.tuple_shapes):
                gte = next((u for u in idx.users.get(param.name, ()) if u.opcode == "get-tuple-element"
                            and u.typed.index == i), param)
                total += self._read_bytes_of(gte, fused, idx) if gte is not param else 0.0
            return total
        return self._read_bytes_of(param, fused, idx)

    def _read_bytes_of(self, node: Instruction, fused: Computation, idx: _CompIndex) -> float:
        size = 0.0
        own = byte_size(node.shape)
        seen_trivial = False
        for user in idx.users.get(node.name, ()):
            op = user.opcode
            if op == "slice":
                size += byte_size(user.shape)
            elif op == "dynamic-slice":
                if user.operands and user.operands[0] == node.name:
                    size += byte_size(user.shape)
                elif not seen_trivial:
                    seen_trivial, size = True, size + own
            elif op == "dynamic-update-slice":
                if not (user.operands and user.operands[0] == node.name) and not seen_trivial:
                    seen_trivial, size = True, size + own
            elif op in ("broadcast", "reshape"):
                size += own
            elif op == "fusion":  # nested fusion: read what its parameter reads
                nested = self.called(user, "calls")
                if nested is not None:
                    nidx = self.index(nested)
                    params = [p for p in nested.instructions if p.opcode == "parameter"]
                    params.sort(key=lambda p: p.typed.parameter_number)
                    for pos, name in enumerate(user.operands):
                        if name == node.name and pos < len(params):
                            inner = params[pos]
                            # A nested fusion that just forwards its parameter (Triton "block" fusions)
                            # reads all of it.
                            forwarded = nested.root == inner.name and not nidx.users.get(inner.name)
                            size += own if forwarded else self._read_bytes_of(inner, nested, nidx)
            elif not seen_trivial:
                seen_trivial, size = True, size + own
        return size

    # -- custom calls --------------------------------------------------------------------
    def _custom_call(self, inst: Instruction, operands: list[Shape]) -> Cost:
        lib = library_call_cost(inst, operands)
        if lib is not None:
            return lib
        # A kernel nobody describes (Pallas/Mosaic without cost_estimate, vendor kernels): it must at
        # least read its operands and write its results, so those bytes are a lower bound on its
        # traffic and it is judged against the memory roofline; its FLOPs are not known.
        target = inst.custom_call_target or "?"
        self.lower_bound_kernels.setdefault(target, set()).add(inst.name)
        read = float(sum(byte_size(s) for s in operands if not s.is_tuple))
        written = float(sum(byte_size(s) for s in kernel_outputs(inst)))
        return Cost(0.0, 0.0, read, written, read + written, False,
                    f"custom kernel {target!r} without a cost estimate: FLOPs unknown, bytes of its operands "
                    "and results are a lower bound", lower_bound=True)


def _subshapes(shape: Shape):
    yield shape
    if shape.is_tuple:
        for s in shape.tuple_shapes:
            yield from _subshapes(s)


def _indexed_subshapes(shape: Shape, prefix: tuple[int, ...] = ()):
    yield prefix, shape
    if shape.is_tuple:
        for i, s in enumerate(shape.tuple_shapes):
            yield from _indexed_subshapes(s, prefix + (i,))


__all__ = ["Cost", "ModuleAnalysis"]
