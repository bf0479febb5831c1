"""Costing the modules of an HLO dump or trace, once, for ``traceview hlo`` (rendering: render/hlo.py)."""

from __future__ import annotations

import pandas as pd

from traceview.cost import instruction_costs, module_totals
from traceview.parsers.hlo.model import HloModule


def hlo_report(modules: list[HloModule]) -> tuple[list[tuple[HloModule, pd.DataFrame, dict]], list[str]]:
    """Cost every module once: (module, instruction costs, totals) triples and the warnings."""
    out, warnings = [], []
    for module in modules:
        costs = instruction_costs(module)
        totals = module_totals(module)
        warnings += list(module.warnings) + costs.attrs.get("warnings", []) + totals["warnings"]
        out.append((module, costs, totals))
    return out, list(dict.fromkeys(warnings))
