"""The child process that converts StableHLO/MHLO text to HLO text with jaxlib (run by parsers/hlo/stablehlo.py).

jaxlib's MLIR parser is C++ that trusts its input: run here, a crash, a hang
or its log output ends with this process, never with traceview's. Reads the
MLIR text on stdin; writes the HLO text on stdout and exits 0, or writes one
line saying why and exits CONVERTER_REJECTED (the text) or NO_CONVERTER (no jaxlib). It imports
nothing of traceview, and only jaxlib's extension (not jax), so it starts in a
fraction of a second.
"""

from __future__ import annotations

import os
import resource
import sys

CONVERTER_REJECTED = 1
NO_CONVERTER = 4


def _converter():
    try:
        from jaxlib import _jax  # jaxlib >= 0.7
        return _jax.mlir.mlir_module_to_xla_computation
    except (ImportError, AttributeError):
        pass
    try:
        from jaxlib import xla_extension  # older jaxlib
        return xla_extension.mlir.mlir_module_to_xla_computation
    except (ImportError, AttributeError):
        return None


def main() -> int:
    extra = [p for p in os.environ.get("TRACEVIEW_CHILD_PATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[:0] = extra                      # the parent's import path (this runs isolated: -I)
    limit = int(os.environ.get("TRACEVIEW_CHILD_MEMORY", "0"))
    if limit > 0:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):
            pass
    convert = _converter()
    if convert is None:
        print("no jaxlib MLIR converter")
        return NO_CONVERTER
    text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    try:
        hlo = convert(text, use_tuple_args=False, return_tuple=False).as_hlo_text()
    except Exception as exc:  # noqa: BLE001 - jaxlib raises its own error types (XlaRuntimeError, ValueError)
        print(" ".join(str(exc).split())[:300])
        return CONVERTER_REJECTED
    sys.stdout.buffer.write(hlo.encode("utf-8", errors="replace"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
