"""The advice view in the analyze report: "What to fix first", idle causes and stragglers as text
blocks (escaped by the report's renderer), and its JSON fields."""

from __future__ import annotations

from typing import Any

import pandas as pd

from traceview.advice.findings import Advice, short_name
from traceview.advice.idle import CAUSES, IdleCauses
from traceview.advice.view import TOP, AdviceReport
from traceview.render.analyze import Section
from traceview.units import fmt_pct, fmt_share, fmt_time_us


def saving_sentence(item: Advice, span_ps: float) -> str:
    """What an item would save, per device and as a share of the span, in words."""
    if item.saving_ps is None:
        return saving_words(None, None)
    return saving_words(item.saving_ps / 1e6, item.saving_ps / span_ps if span_ps else None)


def saving_words(saving_us: float | None, share: float | None) -> str:
    """The same sentence from an item of the JSON ``advice`` list (its ``saving_us`` and ``saving_share``)."""
    if saving_us is None:
        return "saving not estimated"
    return f"saves up to {fmt_time_us(saving_us)} per device ({fmt_share(share)} of the span)"


def advice_sections(report: AdviceReport, top: int = TOP) -> list[Section]:
    """"What to fix first" (the ``top`` items), then why the devices were idle, then stragglers."""
    lines: list[str] = []
    for item in report.items[:top]:
        lines.append(f"{item.rank}. [{item.kind}] {item.title}: {saving_sentence(item, report.span_ps)}")
        if item.evidence:
            lines.append(f"   {item.evidence[0]}")
        if item.fix:
            lines.append(f"   fix: {item.fix}")
    if not lines:
        lines.append("nothing notable: no op, mesh axis or idle cause holds 1% of the span "
                     "(5% for idle causes), and memory is neither tight nor roomy")
    elif len(report.items) > top:
        lines.append(f"({len(report.items) - top} more in --format json, 'advice')")
    sections = [Section("What to fix first", tuple(lines))]
    idle = report.idle
    if idle.causes and idle.idle_ps:
        rows = []
        for cause in CAUSES:
            t = idle.causes[cause]
            if not t:
                continue
            names = ", ".join(short_name(e["name"]) for e in idle.evidence.get(cause, [])[:3])
            rows.append(f"{cause}: {fmt_time_us(t / 1e6)} ({fmt_pct(t / idle.idle_ps)})"
                        + (f"; {names}" if names else ""))
        sections.append(Section(f"Why the devices were idle ({fmt_time_us(idle.idle_ps / 1e6)} over "
                                f"{report.active_devices} device(s))", tuple(rows)))
    late = report.stragglers
    if not late.steps.empty:
        if late.device:
            text = f"{late.device} finished last in {late.device_late_steps} of {len(late.steps)} steps"
        elif len(late.steps) < 2:      # one step names no straggler (stragglers: at least two steps)
            text = (f"one step only, too few to name a straggler ({late.most_often_last} finished last in it)"
                    if late.most_often_last else "one step only, too few to name a straggler")
        else:
            text = (f"no device finished last in most steps (most often {late.most_often_last}: "
                    f"{late.device_late_steps} of {len(late.steps)})")
        wait = late.steps["wait_ps"].sum() / 1e6
        ends = "the step's end" if len(late.steps) == 1 else "the steps' ends"
        lines = [f"{text}; the others waited {fmt_time_us(wait)} in all at {ends}"]
        if late.host:
            lines.append(f"host {late.host} finished last in {late.host_late_steps} of {len(late.host_steps)} steps")
        sections.append(Section("Stragglers", tuple(lines)))
    return sections


def stragglers_json(report: AdviceReport) -> dict[str, Any]:
    """``summary.stragglers``: the late device (and host), and per step who started / finished last."""
    late = report.stragglers
    if late.steps.empty:
        return {"device": None, "reason": late.reason or "no step ran on two or more devices"}

    def steps(table) -> list[dict[str, Any]]:
        return [{"step": int(r.step), "devices": int(r.devices), "last_to_start": str(r.last_to_start),
                 "start_lag_us": r.start_lag_ps / 1e6, "last_to_finish": str(r.last_to_finish),
                 "finish_lag_us": r.finish_lag_ps / 1e6, "wait_us": r.wait_ps / 1e6}
                for r in table.itertuples(index=False)]

    return {"device": late.device, "most_often_last": late.most_often_last, "late_steps": late.device_late_steps,
            "steps": len(late.steps), "wait_us": float(late.steps["wait_ps"].sum()) / 1e6,
            "host": late.host, "host_late_steps": late.host_late_steps,
            "per_step": steps(late.steps), "per_host_step": steps(late.host_steps), "reason": None}


def advice_json(item: Advice, span_ps: float) -> dict[str, Any]:
    """One item as the ``advice`` list of ``analyze --format json`` holds it."""
    saving_us = None if item.saving_ps is None else item.saving_ps / 1e6
    return {"rank": item.rank, "kind": item.kind, "title": item.title, "saving_us": saving_us,
            "saving_share": None if item.saving_ps is None or span_ps <= 0 else item.saving_ps / span_ps,
            "rule": item.rule, "evidence": list(item.evidence), "fix": item.fix, "tab": item.tab}


def advice_list_json(report: AdviceReport) -> list[dict[str, Any]]:
    """The top-level ``advice`` list of ``analyze --format json``."""
    return [advice_json(item, report.span_ps) for item in report.items]


def idle_causes_json(idle: IdleCauses) -> list[dict[str, Any]]:
    """``summary.idle_causes``: per cause, its time summed over devices, share of idle, evidence."""
    if not idle.causes:
        return []
    return [{"cause": c, "time_us": idle.causes[c] / 1e6,
             "share": idle.causes[c] / idle.idle_ps if idle.idle_ps else None,
             "evidence": [{"name": e["name"], "time_us": e["time_ps"] / 1e6, "source": e["source"]}
                          for e in idle.evidence.get(c, [])]} for c in CAUSES]


def per_step_json(idle: IdleCauses) -> list[dict[str, Any]]:
    """Per step: its devices' idle time inside the step's window, by cause (us, summed over devices)."""
    return _rows_us(idle.per_step, "step")


def per_device_json(idle: IdleCauses) -> list[dict[str, Any]]:
    """Per device: its idle time by cause (us)."""
    return _rows_us(idle.per_device, "device")


def _rows_us(table: pd.DataFrame, key: str) -> list[dict[str, Any]]:
    if table.empty:
        return []
    out = []
    for row in table.to_dict("records"):
        record: dict[str, Any] = {key: row[key] if key == "device" else int(row[key]),
                                  "idle_us": row["idle_ps"] / 1e6}
        record["causes_us"] = {c: row[f"{c}_ps"] / 1e6 for c in CAUSES}
        out.append(record)
    return out


def add_advice_record(record: dict[str, Any], report: AdviceReport) -> None:
    """The advice view's fields in the analyze JSON record (the contract: ``summary.idle_causes``,
    top-level ``advice``; beside them the per-device and per-step split, and stragglers)."""
    summary = record.setdefault("summary", {})
    summary["idle_causes"] = idle_causes_json(report.idle)
    summary["idle_causes_reason"] = report.idle.reason
    summary["idle_causes_by_device"] = per_device_json(report.idle)
    summary["idle_causes_by_step"] = per_step_json(report.idle)
    summary["stragglers"] = stragglers_json(report)
    record["advice"] = advice_list_json(report)
    warnings = record.setdefault("warnings", [])
    warnings.extend(w for w in report.warnings if w not in warnings)
