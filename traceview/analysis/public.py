"""The pipeline's op and device tables in the public fields and units: the columns of ``Analysis.ops`` and
``Analysis.devices``, and the rows of the analyze JSON's ``ops`` and ``devices`` (docs/api.md lists each field).

The pipeline keeps picoseconds and internal column names; the public table has microseconds (``*_us``),
XLA's unsigned program ids, and None where a value is unknown (never NaN), so the DataFrame a notebook
reads and the JSON a program reads hold the same values.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from traceview.hardware.detect import device_model_name
from traceview.parsers.profile import Device
from traceview.parsers.tables.conventions import as_uint64
from traceview.units import PS_PER_US, json_scalar

# Op-frame column -> public field, in output order. `*_ps` columns are converted to microseconds.
# Flops and bytes are totals over the occurrences.
OP_FIELDS = {
    "device": "device",
    "program_id": "program_id",
    "module": "module",
    "op": "name",
    "category": "category",
    "opcode": "opcode",
    "occurrences": "occurrences",
    "kernels": "kernels",
    "total_time_ps": "total_time_us",
    "self_time_ps": "self_time_us",
    "judged_time_ps": "judged_time_us",
    "paired_start": "paired_start",
    "flops": "flops",
    "transcendentals": "transcendentals",
    "bytes_accessed": "bytes_accessed",
    "payload_bytes": "collective_bytes",
    "collective_kind": "collective_kind",
    "group_size": "group_size",
    "ring_directions": "ring_directions",
    "execution_thread": "execution_thread",
    "dtype": "dtype",
    "bound": "bound",
    "unknown_reason": "unknown_reason",
    "t_compute_ps": "t_compute_us",
    "t_memory_ps": "t_memory_us",
    "t_comm_ps": "t_comm_us",
    "roofline_time_ps": "roofline_time_us",
    "efficiency": "efficiency",
    "above_roofline_reason": "above_roofline_reason",
    "gap_ps": "gap_us",
    "gain_ps": "gain_us",
    "projected_time_ps": "projected_time_us",
    "exposed_time_ps": "exposed_time_us",
    "achieved_flops": "achieved_flops",
    "achieved_bandwidth": "achieved_bandwidth",
    "intensity": "intensity",
    "has_cost": "has_cost",
    "contraction": "contraction",
    "cost_lower_bound": "cost_lower_bound",
    "shape": "shape",
    "source_file": "source_file",
    "source_line": "source_line",
    "op_name": "op_name",
    "step_times_ps": "step_times_us",
    "fingerprint": "fingerprint",
}


def shared_module_names(ops: pd.DataFrame) -> set[str]:
    """The module names that more than one program (program id; -1: none) of the op table carries: a
    benchmark's jit_dot compiled once per shape. Reports name such a module with its program id."""
    if ops.empty or "module" not in ops.columns or "program_id" not in ops.columns:
        return set()
    known = ops[ops["program_id"] != -1]
    counts = known.groupby(known["module"].astype(str))["program_id"].nunique()
    return set(counts[counts > 1].index)


def public_op_columns(ops: pd.DataFrame) -> dict[str, list]:
    """The op table's public columns (field -> values, in :data:`OP_FIELDS` order; the fields the table
    has): Python scalars, None where unknown (NaN, infinities), program ids as XLA's uint64."""
    out: dict[str, list] = {}
    for column in (c for c in OP_FIELDS if c in ops.columns):
        values = ops[column]
        held: list
        if column == "program_id":        # uint64 in XLA, held bit for bit in int64
            held = [None if p == -1 else as_uint64(int(p)) for p in values]
        elif column == "step_times_ps":
            held = [[t / PS_PER_US for t in v] if isinstance(v, list) else None for v in values]
        elif column.endswith("_ps"):
            held = (pd.to_numeric(values, errors="coerce") / PS_PER_US).astype(object).tolist()
        else:
            held = values.astype(object).tolist()
        out[OP_FIELDS[column]] = [json_scalar(v) for v in held]
    return out


def op_rows(ops: pd.DataFrame) -> list[dict]:
    """One dict per op, its public fields in :data:`OP_FIELDS` order: the analyze JSON's ``ops`` and CSV rows."""
    columns = public_op_columns(ops)
    names = list(columns)
    return [dict(zip(names, row)) for row in zip(*columns.values())]


def public_ops(ops: pd.DataFrame) -> pd.DataFrame:
    """The public op table (``Analysis.ops``): one column per field of :func:`public_op_columns`, each of
    the dtype its values call for (float with NaN where a number is unknown, str, bool, object)."""
    columns = public_op_columns(ops)
    return pd.DataFrame(columns, columns=list(columns))


def device_rows(devices: list[Device]) -> list[dict]:
    """One row per device plane: its fields (Python scalars, None where unknown, less its raw ``stats``) and
    the model name the hardware database knows it by."""
    # the fields one by one: dataclasses.asdict would deep-copy each device's stats only to drop them
    names = [f.name for f in dataclasses.fields(Device) if f.name != "stats"]
    return [{**{k: json_scalar(getattr(d, k)) for k in names}, "model_name": device_model_name(d)} for d in devices]
