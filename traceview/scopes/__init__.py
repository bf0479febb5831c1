"""Where in the model: device time, gain and bound by named scope and by source line.

A view of an analysis (``PipelineResult``): every executed op is placed at the
path of its HLO ``op_name`` metadata (JAX named scopes and module names) with
the transformation markers stripped (``paths``), and the op table's numbers are
summed over every prefix of those paths (``tree``). docs/scopes.md defines the
numbers.
"""

from traceview.scopes.paths import PASSES, ScopePath, parse_op_name
from traceview.scopes.tree import ScopeTree, build_scopes

__all__ = ["PASSES", "ScopePath", "ScopeTree", "build_scopes", "parse_op_name"]
