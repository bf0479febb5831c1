"""Join measured ops with their HLO cost: (program_id, op) first, then (module, op).

The cost table holds one row per HLO instruction and execution (see
traceview.cost.table.instruction_costs); the op table one row per distinct op
with its occurrences. Costs are per execution, so the joined totals are
cost x occurrences: every `flops`, `bytes_accessed` and `collective_bytes`
in an op row is a total over its occurrences, comparable to its total time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.units import counted

COST_COLUMNS = ["opcode", "shape", "dtype", "flops", "transcendentals", "bytes_read",
                "bytes_written", "bytes_accessed", "collective_kind", "payload_bytes",
                "group_size", "groups", "crosses_dcn", "ring_directions", "unknown", "source_file",
                "source_line", "fusion_kind", "computation", "cost_category", "fingerprint",
                "execution_thread", "cost_lower_bound", "contraction", "op_name",
                "source_function", "precision", "partial_access"]

NUMERIC_COST_COLUMNS = {"flops", "transcendentals", "bytes_read", "bytes_written", "bytes_accessed",
                        "payload_bytes", "group_size", "ring_directions", "source_line"}

# Per-execution quantities that become totals over the op's occurrences.
ADDITIVE = ["flops", "transcendentals", "bytes_read", "bytes_written", "bytes_accessed",
            "payload_bytes"]


def attach_costs(ops: pd.DataFrame, costs: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Add cost columns to aggregated ops; `has_cost` says whether an op was found in the HLO.

    `costs` needs columns module, name, program_id (-1 when unknown) and the
    cost columns. Ops with no HLO instruction keep NaN costs and are counted
    in a warning, never given zeros.
    """
    warnings: list[str] = []
    out = ops.copy()
    if costs is None or costs.empty:
        out["has_cost"] = False
        for column in COST_COLUMNS:
            if column in ("unknown", "cost_lower_bound"):
                out[column] = False
            elif column in NUMERIC_COST_COLUMNS:
                out[column] = np.nan
            else:
                out[column] = pd.Series([None] * len(out), index=out.index, dtype=object)
        if not ops.empty:
            warnings.append(_trace_reported_costs(out))
        return out, warnings

    costs = costs.rename(columns={"category": "cost_category", "name": "op"})
    wanted = ["module", "program_id", "op"] + [c for c in COST_COLUMNS if c in costs.columns]
    costs = costs[wanted]
    costs = costs.assign(module=costs["module"].astype(str), op=costs["op"].astype(str))

    by_program = costs[costs["program_id"] != -1].drop(columns="module")
    by_program = by_program.drop_duplicates(["program_id", "op"])
    by_module = costs.drop(columns="program_id").drop_duplicates(["module", "op"])

    out = out.assign(module=out["module"].astype(str), op=out["op"].astype(str))
    out["_row"] = np.arange(len(out))
    first = out.merge(by_program, on=["program_id", "op"], how="inner")
    rest = out[~out["_row"].isin(first["_row"])]
    second = rest.merge(by_module, on=["module", "op"], how="left", indicator=True)
    matched_second = second["_merge"] == "both"
    second = second.drop(columns="_merge")
    joined = pd.concat([first.assign(has_cost=True), second.assign(has_cost=matched_second.values)],
                       ignore_index=True)
    joined = joined.sort_values("_row").drop(columns="_row").reset_index(drop=True)

    # Where the trace names no category (CPU, GPU), the cost model's XProf-like one stands in.
    if "cost_category" in joined.columns:
        empty = joined["category"].fillna("").astype(str) == ""
        joined["category"] = joined["category"].astype(str).where(~empty, joined["cost_category"].fillna(""))
    occurrences = joined["occurrences"].astype("float64")
    for column in ADDITIVE:
        if column in joined.columns:
            joined[column] = joined[column].astype("float64") * occurrences
    missing = int((~joined["has_cost"]).sum())
    if missing:
        share = joined.loc[~joined["has_cost"], "self_time_ps"].sum() / max(joined["self_time_ps"].sum(), 1)
        examples = ", ".join(joined.loc[~joined["has_cost"], "op"].head(5))
        verb = "has" if missing == 1 else "have"
        warnings.append(f"{counted(missing, 'op')} ({100 * share:.1f}% of self time) {verb} no matching HLO "
                        f"instruction, so no cost: {examples}")
    return joined, warnings


def _trace_reported_costs(out: pd.DataFrame) -> str:
    """Without HLO, the FLOPs and bytes the trace reports itself per op (TPU events' ``flops`` /
    ``model_flops`` and ``bytes_accessed``, as totals over the occurrences) stand in; the warning says which."""
    nothing = pd.Series(np.nan, index=out.index)
    flops = out["trace_flops"].astype("float64") if "trace_flops" in out.columns else nothing
    nbytes = out["trace_bytes"].astype("float64") if "trace_bytes" in out.columns else nothing
    reported = flops.notna() | nbytes.notna()
    if not reported.any():
        return "no HLO modules found for this trace: ops have no FLOPs or bytes (pass --hlo DIR with an XLA dump)"
    out["flops"] = flops.where(reported)
    out["bytes_accessed"] = nbytes.where(reported)
    out["has_cost"] = reported.to_numpy()
    n = int(reported.sum())
    others = "" if n == len(out) else f"; the other {len(out) - n} have none"
    return (f"no HLO modules found for this trace: the FLOPs and bytes of {n} of {len(out)} ops are the ones "
            f"the trace reports itself (no dtype, no breakdown){others} (pass --hlo DIR with an XLA dump)")
