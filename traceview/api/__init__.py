"""The public Python API, one module per front door; ``traceview`` re-exports its names lazily.

Kept empty on purpose: ``traceview.api.analysis`` is imported by the
regression stage (``regress.baseline``), which ``traceview.api.compare``
imports in turn, so this package must not import its own modules.
"""
