"""The ``traceview hlo`` report: terminal/Markdown tables, JSON and CSV of costed modules."""

from __future__ import annotations

import io
from collections import Counter

import pandas as pd

from traceview.parsers.hlo.model import HloModule
from traceview.render.analyze import integral_columns_as_int
from traceview.render.escape import markdown_text, terminal_lines
from traceview.render.tables import markdown_table, text_table
from traceview.units import clipped, fmt_si, json_scalar

INSTRUCTION_FIELDS = ["module", "computation", "name", "opcode", "category", "shape", "dtype", "flops",
                      "transcendentals", "bytes_read", "bytes_written", "multiplier", "unknown",
                      "source_file", "source_line", "fusion_kind", "trip_count", "execution_thread",
                      "cost_lower_bound"]


def _collective(row: dict) -> dict | None:
    if not row.get("collective_kind"):
        return None
    groups = row.get("groups")
    return {"kind": row["collective_kind"], "payload_bytes": json_scalar(row["payload_bytes"]),
            "group_size": json_scalar(row["group_size"]),
            "groups": None if groups is None else [list(map(int, g)) for g in groups],
            "crosses_dcn": row.get("crosses_dcn")}


def module_record(module: HloModule, costs: pd.DataFrame, totals: dict) -> dict:
    instructions = []
    for row in costs.to_dict("records"):
        record = {k: json_scalar(row.get(k)) for k in INSTRUCTION_FIELDS}
        record["collective"] = _collective(row)
        instructions.append(record)
    return {
        "name": module.name, "file": module.file, "stage": module.stage,
        "program_id": module.program_id,
        "flops": totals["flops"], "transcendentals": totals["transcendentals"],
        "bytes_accessed": totals["bytes_accessed"],
        "flops_per_step": totals["flops_per_step"], "bytes_accessed_per_step": totals["bytes_accessed_per_step"],
        "flops_unknown_ops": totals.get("flops_unknown_ops", []),
        "collective_bytes": float(costs["payload_bytes"].sum()) if len(costs) else 0.0,
        "instructions": instructions,
    }


def hlo_json(report, warnings: list[str], target: dict | None = None) -> dict:
    """The hlo JSON; ``target``: {"name", "source"} of the chip the dump names (its target config), if any."""
    out: dict = {"modules": [module_record(m, c, t) for m, c, t in report]}
    if target is not None:
        out["target"] = target
    out["warnings"] = warnings
    return out


def hlo_csv(report) -> str:
    """Every costed instruction, one row each; counts (source lines, FLOPs, bytes, trip counts) as integers."""
    frames = [c.drop(columns=["groups"], errors="ignore") for _, c, _ in report]
    buffer = io.StringIO()
    if frames:
        integral_columns_as_int(pd.concat(frames, ignore_index=True)).to_csv(buffer, index=False)
    return buffer.getvalue()


def module_labels(report) -> list[str]:
    """Each module's name, with its program id where several modules of the report share the name (a dump
    holds jit__normal once per shape): "jit__normal(3317)", as analyze names them."""
    names = Counter(m.name for m, _, _ in report)
    return [f"{m.name}({m.program_id})" if names[m.name] > 1 and m.program_id is not None else m.name
            for m, _, _ in report]


def _module_rows(report) -> list[list[str]]:
    return [[label, m.stage or "-", str(len(c)), fmt_si(t["flops"]), fmt_si(t["transcendentals"]),
             fmt_si(t["bytes_accessed"], "B"), fmt_si(float(c["payload_bytes"].sum()) if len(c) else 0.0, "B"),
             fmt_si(t["flops_per_step"])]
            for label, (m, c, t) in zip(module_labels(report), report)]


MODULE_HEADERS = ["module", "stage", "ops", "FLOPs", "transc.", "bytes", "collective", "FLOPs/step"]


def _collective_cell(kind: str, group_size: float) -> str:
    """"all-reduce x4"; "all-reduce x?" when the group size is unknown; "" for no collective."""
    if not kind:
        return ""
    return f"{kind} x{'?' if group_size is None or group_size != group_size else int(group_size)}"


def _top_rows(costs: pd.DataFrame, top: int) -> list[list[str]]:
    # kernels with no FLOP figure (NaN) first: their math may be the heaviest, and it is unknown
    ranked = costs.sort_values(["flops", "bytes_accessed"], ascending=False, na_position="first").head(top)
    return [[r["name"], r["opcode"], r["category"], _short_shape(r["shape"]), r["dtype"], fmt_si(r["flops"]),
             fmt_si(r["bytes_accessed"], "B"),
             _collective_cell(r["collective_kind"], r["group_size"]),
             "unknown" if r["unknown"] else "lower bound" if r.get("cost_lower_bound") else ""]
            for r in ranked.to_dict("records")]


SHAPE_WIDTH = 40


def _short_shape(shape: object) -> str:
    """A shape cut to SHAPE_WIDTH characters, with "..." where it was cut (a tuple of many arrays)."""
    return clipped(str(shape), SHAPE_WIDTH)


TOP_HEADERS = ["instruction", "opcode", "category", "shape", "dtype", "FLOPs", "bytes", "collective", ""]


def hlo_text(report, warnings: list[str], top: int = 10, markdown: bool = False,
             target: dict | None = None) -> str:
    table = markdown_table if markdown else text_table
    out = []
    if target is not None:
        where = str(target["source"]).removeprefix("dump: ")
        out += [f"target: {target['name']} (from the XLA dump's target config "
                f"{markdown_text(where) if markdown else where})", ""]
    out += [table(MODULE_HEADERS, _module_rows(report), "llrrrrrr"), ""]
    for label, (_, costs, _) in zip(module_labels(report), report):
        if costs.empty:
            continue
        name = f"### {markdown_text(label)}" if markdown else label
        out += [f"{name}: top {top} instructions by FLOPs, then bytes", ""]
        out += [table(TOP_HEADERS, _top_rows(costs, top), "lllllrrll"), ""]
    if markdown:
        out += [f"- warning: {markdown_text(w)}" for w in warnings]
        return "\n".join(out).rstrip() + "\n"
    out += [f"warning: {w}" for w in warnings]
    return terminal_lines("\n".join(out).rstrip()) + "\n"
