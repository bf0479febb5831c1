"""The HLO cost model: FLOPs, transcendentals, bytes and collective volume per instruction.

Public API (used by the CLI and the roofline stage):

* :func:`instruction_costs` -> DataFrame, one row per op-level instruction
  (entry, while bodies/conditions, conditional branches, called computations;
  fused computations, reducers and async-wrapped computations are rolled into
  the instruction that calls them). Columns:

  ``module, program_id, computation, name, opcode, category`` (XProf-like), ``shape`` (text),
  ``dtype`` (math type: dot/conv/GEMM input type, a fusion's heaviest
  contraction's input type, else the output type), ``flops, transcendentals,
  bytes_read, bytes_written, bytes_accessed`` (as XLA's HloCostAnalysis counts
  them; a fusion's bytes are those crossing its boundary; while/conditional/call
  rows are zero since their bodies are rows of their own), ``multiplier``
  (product of the trip counts of enclosing while loops, NaN if one is
  unknown), ``flops_per_step, bytes_accessed_per_step`` (x multiplier),
  ``collective_kind, payload_bytes, group_size, groups, crosses_dcn`` (see
  :mod:`traceview.cost.collectives` for the payload definition), ``unknown``
  (no cost rule: figures are zero, not a guess), ``note``, ``source_file,
  source_line, fusion_kind``, ``trip_count`` (while rows: XLA's known_trip_count,
  else inferred from the loop's counter, see :mod:`traceview.cost.trip_count`;
  NaN otherwise), ``execution_thread`` ("" for the main thread, e.g.
  "sparsecore" for an async wrapper offloaded there), ``cost_lower_bound``
  (a custom kernel with no cost estimate: bytes of its operands and results,
  FLOPs unknown, so its ``flops`` and ``flops_per_step`` are NaN, never 0), ``op_name`` (the
  metadata's op_name: JAX's named-scope path, "" when absent; see :mod:`traceview.scopes`),
  ``source_function`` (the function of the source line, from the module's stack frames; "" when unknown). ``df.attrs["warnings"]`` lists what is unknown.
* :func:`module_totals` -> dict with ``flops, transcendentals, bytes_accessed``
  as ``compiled.cost_analysis()`` reports them, ``*_per_step``, ``flops_unknown_ops``
  (kernels with no FLOP figure, left out of ``flops``) and ``warnings``.
* :func:`fused_instruction_costs` -> the inside of one fusion.
"""

from traceview.cost.collectives import CollectiveInfo, collective_info
from traceview.cost.model import Cost, ModuleAnalysis
from traceview.cost.table import COLUMNS, fused_instruction_costs, instruction_costs, module_totals

__all__ = ["COLUMNS", "CollectiveInfo", "Cost", "ModuleAnalysis", "collective_info", "fused_instruction_costs",
           "instruction_costs", "module_totals"]
