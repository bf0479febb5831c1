"""StableHLO / MHLO MLIR text (``jax.jit(f).lower(...).as_text()``, Levanter's ``*.hlo.txt``) -> HLO text.

traceview's cost model reads XLA's HLO. A lowered program in MLIR is
converted with jaxlib's own converter (``mlir_module_to_xla_computation``, the
one JAX uses to hand a module to XLA), so the HLO is exactly what XLA would
start compiling from: *before* its optimizations (no fusion, no layout
assignment, no collective combining). Costs of such a module are costs of the
lowered program, and its stage is ``"lowered"``.

Without jax installed, such text is one clear error naming StableHLO and what
to install. The text is bounded by the HLO reader (parsers/compressed.py) before
it gets here, and MLIR the converter rejects is an HloError naming the file.
"""

from __future__ import annotations

import re

from traceview.errors import HloError

LOWERED_STAGE = "lowered"
# An MLIR module: `module @name attributes {...} {` or a bare `func.func`, with StableHLO/MHLO ops.
_MLIR_HEAD = re.compile(r"^\s*(?:#[^\n]*\n\s*)*(?:module\b|func\.func\b|\"builtin\.module\"|#loc)", re.M)
_MLIR_OPS = re.compile(r"\b(?:stablehlo|mhlo|func|chlo)\.[a-z_]+")


def looks_like_mlir(head: str) -> bool:
    """Whether text (its first few KB) is an MLIR module of StableHLO/MHLO ops rather than HLO text."""
    stripped = head.lstrip()
    if stripped.startswith("HloModule"):
        return False
    return bool(_MLIR_HEAD.match(head)) and bool(_MLIR_OPS.search(head))


def _converter():
    """jaxlib's MLIR -> XlaComputation converter, wherever this jaxlib keeps it; None without jax."""
    try:
        from jax._src.lib import _jax  # jaxlib >= 0.7
        return _jax.mlir.mlir_module_to_xla_computation
    except (ImportError, AttributeError):
        pass
    try:
        from jax._src.lib import xla_client  # older jaxlib: xla_extension.mlir
        return xla_client._xla.mlir.mlir_module_to_xla_computation
    except (ImportError, AttributeError):
        return None


def mlir_to_hlo_text(text: str, where: str) -> str:
    """The HLO text of a StableHLO/MHLO module, converted by jaxlib. Raises HloError (one line) without jax,
    or when the converter rejects the text."""
    convert = _converter()
    if convert is None:
        raise HloError(f"{where}: StableHLO/MHLO (MLIR) text: reading it needs jax to convert it to HLO "
                       "(pip install 'traceview[stablehlo]', or pip install jax)")
    try:
        computation = convert(text, use_tuple_args=False, return_tuple=False)
        return computation.as_hlo_text()
    except Exception as exc:  # noqa: BLE001 - jaxlib raises its own error types (XlaRuntimeError, ValueError)
        first = " ".join(str(exc).split())[:200]
        raise HloError(f"{where}: StableHLO/MHLO text that jaxlib cannot convert to HLO ({first})") from None
