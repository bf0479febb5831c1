"""What the trace says about each axis: executions, bytes, in-flight and exposed time of its collectives.

The times are the Analysis's (traceview.timeline computes in-flight and exposed time of every collective
for every report); nothing is re-measured here. Copies to host memory (host offload) get a row of their
own: communication, but over no mesh axis.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.hardware.chips import Chip
from traceview.parallelism.report import AxisReport
from traceview.parallelism.roles import AxisRole, Classified
from traceview.parallelism.rules import AxisVerdict, Link


def collective_key(row: Classified) -> tuple[str, str]:
    return row.attribution.site.module, row.attribution.site.name


def host_transfers(ops: pd.DataFrame, chip: Chip | None, span_ps: float | None) -> AxisReport | None:
    """Copies between device and host memory (host offload): no mesh axis, but communication all the same."""
    if "collective_kind" not in ops.columns:
        return None
    rows = ops[ops["collective_kind"].astype(str) == "host-transfer"]
    if rows.empty:
        return None
    link = Link("PCIe", chip.pcie_bandwidth if chip else None, "host link") if chip else None
    verdict = AxisVerdict(None, "host offload: not a mesh axis", reason="transfers to host memory are judged by "
                      "their exposed time, not by a C/W rule")
    axis = AxisReport("host", 1, AxisRole("host offload", [f"{len(rows)} host transfer ops (copy-start/done to "
                                                            "host memory space S(5))"]), link, verdict,
                      collectives=int((~rows["op"].astype(str).str.startswith("copy-done")).sum()))
    slots = []
    for rec in rows.to_dict("records"):
        t = rec.get("t_comm_ps")
        known = not (t is None or (isinstance(t, float) and np.isnan(t)))
        done = str(rec.get("op", "")).startswith("copy-done")
        slots.append({"executions": 0 if done else int(rec.get("occurrences") or 0),
                      "bytes": _num(rec.get("payload_bytes")),
                      "time": _num(rec.get("judged_time_ps")), "exposed": _num(rec.get("exposed_time_ps")),
                      "roofline": float(t) if known else 0.0, "roofline_known": known or done})
    fill_times(axis, slots, span_ps)
    return axis


def collective_times(ops: pd.DataFrame, rows: list[Classified]) -> dict[tuple[str, str], dict]:
    """Per collective (module, name): executions, payload bytes, in-flight / exposed / roofline time."""
    wanted = {collective_key(r) for r in rows}
    out: dict[tuple[str, str], dict] = {}
    if "collective_kind" not in ops.columns:
        return out
    frame = ops[ops["collective_kind"].fillna("").astype(str) != ""]
    for rec in frame.to_dict("records"):
        key = (str(rec.get("module")), str(rec.get("op")))
        if key not in wanted:
            continue
        slot = out.setdefault(key, {"executions": 0, "bytes": 0.0, "time": 0.0, "exposed": 0.0, "roofline": 0.0,
                                    "roofline_known": True, "crosses_dcn": False})
        occurrences = int(rec.get("occurrences") or 0)
        slot["executions"] += occurrences
        slot["bytes"] += _num(rec.get("payload_bytes"))      # the op table's figures are totals over executions
        slot["time"] += _num(rec.get("judged_time_ps"))
        slot["exposed"] += _num(rec.get("exposed_time_ps"))
        t = rec.get("t_comm_ps")
        if t is None or (isinstance(t, float) and np.isnan(t)):
            slot["roofline_known"] = False
        else:
            slot["roofline"] += float(t)
        slot["crosses_dcn"] = slot["crosses_dcn"] or rec.get("crosses_dcn") is True
    return out


def _num(value) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if np.isnan(value) else value


def fill_times(axis: AxisReport, slots: list[dict], span_ps: float | None) -> None:
    axis.executions = sum(s["executions"] for s in slots)
    axis.bytes = float(sum(s["bytes"] for s in slots))
    axis.time_ps = float(sum(s["time"] for s in slots))
    axis.exposed_ps = float(sum(s["exposed"] for s in slots))
    known = [s for s in slots if s["roofline_known"]]
    axis.roofline_ps = float(sum(s["roofline"] for s in known)) if known and len(known) == len(slots) else None
    axis.share = axis.exposed_ps / span_ps if span_ps else None
    axis.measured = measured_sentence(axis.share, axis.verdict.verdict)


EXPOSED_NOTABLE = 0.05   # exposed communication above 5% of device time is worth a look


def measured_sentence(share: float | None, verdict: str | None) -> str:
    """What the trace says about an axis: its exposed communication, and whether it agrees with the rule."""
    if share is None:
        return ""
    text = f"exposed communication {100 * share:.1f}% of device time"
    if share >= EXPOSED_NOTABLE:
        text += ": the trace finds this axis's communication costing time"
        if verdict == "compute-bound":
            text += " although the rule says compute-bound (overlap is missing, or the link is slower than its figure)"
    else:
        text += ": mostly overlapped or small"
        if verdict == "communication-bound":
            text += " although the rule says communication-bound (compute hides it at this size)"
    return text
