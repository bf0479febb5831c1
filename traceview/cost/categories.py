"""XProf-like op categories and the data type of an op's math."""

from __future__ import annotations

from traceview.cost.collectives import collective_kind
from traceview.cost.library import is_library_call
from traceview.cost.model import ELEMENTWISE
from traceview.cost.shapes import first_array
from traceview.parsers.hlo.model import Instruction, Shape

_FUSION = {"kLoop": "loop fusion", "kInput": "input fusion", "kOutput": "output fusion", "kCustom": "custom fusion"}
_DATA_FORMATTING = frozenset({
    "copy", "copy-start", "copy-done", "transpose", "reshape", "bitcast", "broadcast", "concatenate", "pad",
    "slice", "dynamic-slice", "dynamic-update-slice", "reverse", "iota", "bitcast-convert", "dynamic-reshape"})
_NAMED = {"convolution": "convolution", "dot": "matmul", "ragged-dot": "matmul", "scaled-dot": "matmul", "reduce": "reduction",
          "reduce-window": "reduction", "select-and-scatter": "reduction", "gather": "gather",
          "scatter": "scatter", "sort": "sort", "fft": "fft", "rng": "rng", "rng-bit-generator": "rng",
          "custom-call": "custom-call", "while": "control flow", "conditional": "control flow",
          "call": "control flow", "triangular-solve": "linear algebra", "cholesky": "linear algebra"}


def category(inst: Instruction, wrapped_opcode: str | None = None) -> str:
    """Category of an op as XProf names them ("loop fusion", "convolution", "all-reduce", ...)."""
    op = wrapped_opcode or inst.opcode
    kind, _ = collective_kind(op)
    if kind:
        return kind
    if op == "fusion":
        return _FUSION.get(inst.fusion_kind or "", "fusion")
    if op in _NAMED:
        return _NAMED[op]
    if op in _DATA_FORMATTING:
        return "data formatting"
    if op in ELEMENTWISE:
        return "non-fusion elementwise"
    if op.startswith("async-"):
        return "async"
    return "other"


def math_dtype(inst: Instruction, operands: list[Shape], dominant: tuple[str, list[Shape]] | None = None) -> str:
    """Input element type for dot/conv/GEMM calls (``dominant`` names the heaviest dot/conv of a fusion),
    else the output's element type."""
    if operands and not operands[0].is_tuple and (
            inst.opcode in ("dot", "convolution", "ragged-dot", "scaled-dot")
            or (inst.opcode == "custom-call" and is_library_call(inst.custom_call_target))):
        return operands[0].element_type
    if dominant is not None and dominant[1]:
        return dominant[1][0].element_type
    out = first_array(inst.shape)
    return "" if out.is_tuple else out.element_type
