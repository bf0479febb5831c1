"""StableHLO / MHLO MLIR text (``jax.jit(f).lower(...).as_text()``, Levanter's ``*.hlo.txt``) -> HLO text.

traceview's cost model reads XLA's HLO. A lowered program in MLIR is
converted with jaxlib's own converter (``mlir_module_to_xla_computation``, the
one JAX uses to hand a module to XLA), so the HLO is exactly what XLA would
start compiling from: *before* its optimizations (no fusion, no layout
assignment, no collective combining). Costs of such a module are costs of the
lowered program, and its stage is ``"lowered"``.

jaxlib's parser is C++ that trusts its input, so it never runs in traceview's
own process: the text is first checked against bounds that keep it safe
(parsers/hlo/stablehlo_bounds.py: nesting depth, recursion, shardings), then
converted in a child process (parsers/hlo/stablehlo_child.py) with a memory and
time limit. A crash, a hang or a rejection there is one HloError line naming
the file, and the converter's own log (XLA's RET_CHECK messages, stack traces)
never reaches the user's terminal.

Without jax installed, such text is one clear error naming StableHLO and what
to install. The text is bounded by the HLO reader (parsers/compressed.py) before
it gets here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from traceview.errors import HloError
from traceview.parsers.hlo.stablehlo_bounds import check_mlir
from traceview.parsers.hlo.stablehlo_child import CONVERTER_REJECTED, NO_CONVERTER

LOWERED_STAGE = "lowered"
CONVERT_TIMEOUT_S = 120          # the child's time to convert one module
CONVERT_MEMORY = 4 << 30         # the child's address space
# An MLIR module: `module @name attributes {...} {` or a bare `func.func`, with StableHLO/MHLO ops.
_MLIR_HEAD = re.compile(r"^\s*(?:#[^\n]*\n\s*)*(?:module\b|func\.func\b|\"builtin\.module\"|#loc)", re.M)
_MLIR_OPS = re.compile(r"\b(?:stablehlo|mhlo|func|chlo)\.[a-z_]+")
_CHILD = Path(__file__).with_name("stablehlo_child.py")


def looks_like_mlir(head: str) -> bool:
    """Whether text (its first few KB) is an MLIR module of StableHLO/MHLO ops rather than HLO text."""
    stripped = head.lstrip()
    if stripped.startswith("HloModule"):
        return False
    return bool(_MLIR_HEAD.match(head)) and bool(_MLIR_OPS.search(head))


def _no_jax(where: str) -> HloError:
    return HloError(f"{where}: StableHLO/MHLO (MLIR) text: reading it needs jax to convert it to HLO "
                    "(pip install 'traceview[stablehlo]', or pip install jax)")


def _has_converter() -> bool:
    """Whether jaxlib is installed (the child finds its converter, or says it found none)."""
    return importlib.util.find_spec("jaxlib") is not None


def mlir_to_hlo_text(text: str, where: str) -> str:
    """The HLO text of a StableHLO/MHLO module, converted by jaxlib in a child process. Raises HloError (one
    line) without jax, for text outside the bounds, or when the converter rejects the text or dies on it."""
    if not _has_converter():
        raise _no_jax(where)
    check_mlir(text, where)
    env = dict(os.environ, TRACEVIEW_CHILD_PATH=os.pathsep.join(p for p in sys.path if p),
               TRACEVIEW_CHILD_MEMORY=str(CONVERT_MEMORY), TF_CPP_MIN_LOG_LEVEL="3")
    try:
        done = subprocess.run([sys.executable, "-I", str(_CHILD)], input=text.encode("utf-8", errors="replace"),
                              capture_output=True, env=env, timeout=CONVERT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise HloError(f"{where}: jaxlib took more than {CONVERT_TIMEOUT_S} s to convert this StableHLO text; "
                       "stopped") from None
    except OSError as exc:
        raise HloError(f"{where}: cannot start the StableHLO converter ({exc.strerror})") from None
    if done.returncode == 0:
        return done.stdout.decode("utf-8", errors="replace")
    said = " ".join(done.stdout.decode("utf-8", errors="replace").split())[:200]
    if done.returncode == NO_CONVERTER:
        raise _no_jax(where)
    if done.returncode == CONVERTER_REJECTED:
        raise HloError(f"{where}: StableHLO/MHLO text that jaxlib cannot convert to HLO ({said})")
    how = f"signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
    raise HloError(f"{where}: jaxlib's StableHLO converter died on this text ({how}): not a program it can read")
