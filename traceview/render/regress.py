"""Render a Diff and its Verdict: terminal text, Markdown (PR comment / job summary), JSON, JUnit XML."""

from __future__ import annotations

import dataclasses
import math
import xml.etree.ElementTree as ET
from typing import Any

import pandas as pd

from traceview.regress.check import Check, Verdict, run_checks
from traceview.regress.diff import Diff, Pair
from traceview.render.escape import markdown_code, markdown_text, terminal_lines, xml_text
from traceview.render.tables import colour, markdown_table, text_table, use_colour
from traceview.units import PS_PER_US, fmt_bytes, fmt_pct, fmt_si, fmt_time_us, json_scalar, number
from traceview.version import __version__
from traceview.vocabulary import BOUNDS_AND_IDLE

# ------------------------------------------------------------------ cells

def _time(ps) -> str:
    ps = number(ps)
    return "-" if ps is None else fmt_time_us(ps / PS_PER_US)


def _change(value) -> str:
    value = number(value)
    if value is None:
        return "-"
    if math.isinf(value):
        return "new" if value > 0 else "-"
    return f"{value:+.1%}"


def _value(value, unit: str, kind: str = "") -> str:
    """A check's figure: times, shares, memory sizes in binary units, FLOPs and bytes moved in decimal ones."""
    if number(value) is None:
        return "-"
    if unit == "ps":
        return _time(value)
    if unit == "fraction":
        return fmt_pct(value)
    if unit == "bytes" and kind == "memory":
        return fmt_bytes(value)
    return fmt_si(value, "B" if unit == "bytes" else "")


def _limit(check: Check) -> str:
    if check.limit is None:
        return "-"
    if check.kind == "absolute":
        sign = ">=" if check.name.startswith("min_") else "<="
        return f"{sign} {_value(check.limit, check.unit)}"
    return f"<= {check.limit:+.1%}"


def _interval(check: Check) -> str:
    return "-" if check.low is None else f"{check.low:+.1%} .. {check.high:+.1%}"


def _bound(base, new) -> str:
    b = "-" if base is None or base != base else str(base)
    n = "-" if new is None or new != new else str(new)
    return b if b == n else f"{b} -> {n}"


def _eff(base, new) -> str:
    return f"{fmt_pct(number(base))} -> {fmt_pct(number(new))}"


# ------------------------------------------------------------------ shared pieces

def _headline(diff: Diff, verdict: Verdict) -> str:
    failed = len(verdict.failed)
    total = len(verdict.gated)
    ungated = len(verdict.checks) - total
    rest = f" ({ungated} more reported, not gated)" if ungated else ""
    if verdict.passed:
        return f"PASS: {total} gated checks within budget{rest}"
    return f"FAIL: {failed} of {total} gated checks over budget{rest}"


def _programs_line(verdict: Verdict, limit: int = 6) -> str | None:
    """Which programs the checks gated and which they only report, with why (regress/gating.py)."""
    if not verdict.programs:
        return None
    gated = [f"{g.program} ({g.why})" for g in verdict.programs if g.gated]
    by_why: dict[str, list[str]] = {}
    for g in verdict.programs:
        if not g.gated:
            by_why.setdefault(g.why, []).append(g.program)
    parts = ["gated programs: " + ("; ".join(gated) if gated else "none")]
    for why, names in by_why.items():
        more = f" and {len(names) - limit} more" if len(names) > limit else ""
        parts.append(f"reported, not gated ({why}): {', '.join(names[:limit])}{more}")
    return "; ".join(parts)


def _step_line(diff: Diff) -> str | None:
    st = diff.summary.step_time
    if st is None or st.change is None:
        return None
    what = "step time (median)" if st.name == "step_time" else "device time (whole capture)"
    text = f"{what} {_time(st.base_ps)} -> {_time(st.new_ps)}: {_change(st.change)}"
    if st.low is not None and st.high is not None:
        text += f" (interval {st.low:+.1%} .. {st.high:+.1%})"
    return text + f"; {st.method}"


def _check_rows(checks: list[Check], on: bool = False) -> list[list[str]]:
    rows = []
    for c in checks:
        result = "not gated" if not c.gated else colour("ok", "green", on) if c.passed else colour("FAIL", "red", on)
        rows.append([c.name, c.statistic or "-", _value(c.baseline, c.unit, c.kind), _value(c.current, c.unit, c.kind),
                     _change(c.change), _interval(c), _limit(c), result, c.detail])
    return rows


CHECK_HEADERS = ["check", "statistic", "baseline", "current", "change", "interval", "limit", "result", "note"]
CHECK_ALIGN = "llrrrrrll"


def _legend(confidence: float) -> str:
    """What the columns of the checks and ops tables are, said once under them."""
    return (f"baseline, current: the row's statistic (median/step: median over the steps it ran in; "
            f"mean/step: capture total / steps; per module; peak); change = current / baseline - 1; "
            f"interval: {confidence:.0%} Mann-Whitney interval of the change from per-step times")


def _bound_rows(diff: Diff) -> list[list[str]]:
    by = diff.summary.time_by_bound_ps
    if not by:
        return []
    rows = []
    for bound in BOUNDS_AND_IDLE:
        b, n = by[bound].base or 0.0, by[bound].new or 0.0
        if not b and not n:
            continue
        rows.append([bound, _time(b), _time(n), _change(n / b - 1 if b else (math.inf if n else 0.0))])
    return rows


def _op_table(ops: pd.DataFrame, timed: bool) -> tuple[list[str], list[list[str]], str]:
    """Changed ops: times, bounds and efficiency for traces; FLOPs and bytes for HLO (no times)."""
    if timed:
        headers = ["module", "op", "status", "statistic", "base", "new", "time change", "FLOPs/step change",
                   "bytes/step change", "bound", "efficiency"]
        align = "llllrrrrrll"
    else:
        headers = ["module", "op", "status", "FLOPs base", "FLOPs new", "change", "bytes base", "bytes new", "change"]
        align = "lllrrrrrr"
    rows = []
    for r in ops.to_dict("records"):
        name = r["op"] if r["matched_by"] in ("name", "") else f"{r['op']} (was {r['base_op']})"
        if timed:
            rows.append([r["module"], name, r["status"], r.get("time_statistic") or "-",
                         _time(r["base_time_ps"]), _time(r["new_time_ps"]),
                         _change(r["change"]), _change(r["flops_change"]), _change(r["bytes_change"]),
                         _bound(r["base_bound"], r["new_bound"]), _eff(r["base_efficiency"], r["new_efficiency"])])
        else:
            rows.append([r["module"], name, r["status"], fmt_si(number(r["base_flops"])), fmt_si(number(r["new_flops"])),
                         _change(r["flops_change"]), fmt_si(number(r["base_bytes"]), "B"),
                         fmt_si(number(r["new_bytes"]), "B"), _change(r["bytes_change"])])
    return headers, rows, align


def _module_rows(diff: Diff) -> list[list[str]]:
    rows = []
    for r in diff.modules.to_dict("records"):
        rows.append([r["module"], r["status"], fmt_si(r["base_flops"]), fmt_si(r["new_flops"]),
                     _change(r["flops_change"]), fmt_si(r["base_bytes_accessed"], "B"),
                     fmt_si(r["new_bytes_accessed"], "B"), _change(r["bytes_accessed_change"]),
                     fmt_si(r["base_collective_bytes"], "B"), fmt_si(r["new_collective_bytes"], "B"),
                     _change(r["collective_bytes_change"])])
    return rows


MODULE_HEADERS = ["module", "status", "FLOPs base", "FLOPs new", "change", "bytes base", "bytes new", "change",
                  "collective base", "collective new", "change"]
MODULE_ALIGN = "llrrrrrrrrr"


def _interesting_ops(diff: Diff, top: int) -> pd.DataFrame:
    """Changed ops by size of the time change; where there are no times (HLO), by FLOPs/bytes change."""
    ops = diff.ops[diff.ops["status"] == "changed"]
    if ops["time_change_ps"].notna().any():
        return ops.head(top)
    weight = (ops["new_flops"].fillna(0) - ops["base_flops"].fillna(0)).abs() \
        + (ops["new_bytes"].fillna(0) - ops["base_bytes"].fillna(0)).abs()
    return ops.loc[weight.sort_values(ascending=False).index].head(top)


def _by_size(ops: pd.DataFrame, side: str) -> pd.DataFrame:
    time = ops[f"{side}_time_ps"]
    key = time if time.notna().any() else ops[f"{side}_flops"]
    return ops.loc[key.fillna(0).sort_values(ascending=False).index]


def _listing(ops: pd.DataFrame, side: str, limit: int) -> str:
    ops = _by_size(ops, side)
    parts = []
    for r in ops.head(limit).to_dict("records"):
        t = number(r[f"{side}_time_ps"])
        parts.append(f"{r['module']}/{r['op']} ({_time(t) + '/step' if t is not None else fmt_si(r[f'{side}_flops']) + ' FLOPs'})")
    more = f", and {len(ops) - limit} more" if len(ops) > limit else ""
    return ", ".join(parts) + more


def _sections(diff: Diff, verdict: Verdict, top: int) -> dict:
    """What every human-readable format shows, as rows and lines."""
    ops = diff.ops
    new_ops, gone = ops[ops["status"] == "new"], ops[ops["status"] == "vanished"]
    relabel = ops[ops["label_changed"]]
    counts = diff.summary.ops
    return {
        "step": _step_line(diff),
        "counts": (f"ops: {counts.same} same, {counts.changed} changed, {counts.new} new, "
                   f"{counts.vanished} vanished, {counts.label_changed} with a new bound, "
                   f"{counts.renamed} matched under a new name"),
        "bounds": _bound_rows(diff),
        "mfu": diff.summary.mfu,
        "ops": _op_table(_interesting_ops(diff, top), diff.ops["time_change_ps"].notna().any()),
        "new": _listing(new_ops, "new", 10) if len(new_ops) else "",
        "vanished": _listing(gone, "base", 10) if len(gone) else "",
        "relabel": [f"{r['module']}/{r['op']}: {r['base_bound']} -> {r['new_bound']}"
                    for r in relabel.head(top).to_dict("records")],
        "modules": _module_rows(diff) if len(diff.modules) else [],
        "scopes": _scope_rows(diff, top),
    }


SCOPE_HEADERS = ["scope", "statistic", "base", "new", "change", "interval"]


def _scope_rows(diff: Diff, top: int) -> list[list[str]]:
    """The named scopes (below the programs) whose time per step moved most (traceview.regress.scopes)."""
    scopes = diff.scopes
    if scopes is None or scopes.empty:
        return []
    moved = scopes[scopes["depth"] > 1].head(top)
    return [[r["scope"], "mean/step" if r["method"] == "per-step totals" else "median/step",
             _time(r["base_time_ps"]), _time(r["new_time_ps"]), _change(r["change"]),
             "-" if number(r["change_low"]) is None else f"{r['change_low']:+.1%} .. {r['change_high']:+.1%}"]
            for r in moved.to_dict("records")]


def _work_line(diff: Diff) -> str | None:
    """FLOPs and bytes per step of the ops that ran: a change here is added work, not noise."""
    if diff.base.kind != "trace" or diff.new.kind != "trace":
        return None
    per = diff.summary.per_step
    parts = []
    for key, label, unit in (("flops", "FLOPs", ""), ("bytes", "bytes", "B"), ("collective_bytes", "collective", "B")):
        b, n = number(per[key].base), number(per[key].new)
        if b is None or n is None or (key == "collective_bytes" and not b and not n):
            continue
        parts.append(f"{label} {fmt_si(b, unit)} -> {fmt_si(n, unit)} ({_change(n / b - 1 if b else math.inf)})")
    stepped = len(diff.base.step_times_ps) and len(diff.new.step_times_ps)
    return (("per step: " if stepped else "whole capture: ") + ", ".join(parts)) if parts else None


def _projected(diff: Diff) -> str:
    """" (projected onto CHIP)" when either side was judged against a chip its trace did not run on."""
    sides = [s for s in (diff.base, diff.new) if s.projected and s.target]
    return f" (projected onto {', '.join(dict.fromkeys(s.target or '' for s in sides))})" if sides else ""


def _projected_line(diff: Diff) -> str | None:
    """Which figures a projection judged: bounds, efficiency and MFU; the times are measured."""
    where = _projected(diff)
    return f"bounds, efficiency and MFU{where}; times as measured" if where else None


def _mfu_line(mfu: Pair) -> str | None:
    if mfu.base is None and mfu.new is None:
        return None
    return f"MFU {fmt_pct(number(mfu.base))} -> {fmt_pct(number(mfu.new))}"


# ------------------------------------------------------------------ text

def diff_text(diff: Diff, verdict: Verdict | None = None, top: int = 15, colour_enabled: bool | None = None,
              command: str = "diff") -> str:
    """The terminal report; `command` ("diff" or "check") names it in the header."""
    on = use_colour() if colour_enabled is None else colour_enabled
    verdict = verdict or run_checks(diff)
    s = _sections(diff, verdict, top)
    head = _headline(diff, verdict)
    out = [colour(f"traceview {__version__} {command}", "bold", on) + f"  {diff.base.label}  ->  {diff.new.label}",
           colour(head, "green" if verdict.passed else "red", on), ""]
    for line in (s["step"], _work_line(diff), _mfu_line(s["mfu"]), s["counts"], _programs_line(verdict),
                 _projected_line(diff)):
        if line:
            out.append("  " + line)
    out.append("")
    if verdict.checks:
        ordered = verdict.failed + [c for c in verdict.checks if c.passed and c.gated] \
            + [c for c in verdict.checks if not c.gated]
        out += [colour("Checks", "bold", on), text_table(CHECK_HEADERS, _check_rows(ordered, on), CHECK_ALIGN),
                _legend(verdict.budgets.confidence), ""]
    if s["bounds"]:
        out += [colour(f"Time by bound, per step{_projected(diff)}", "bold", on),
                text_table(["bound", "base", "new", "change"], s["bounds"], "lrrr"), ""]
    if s["modules"]:
        out += [colour("HLO modules (cost model)", "bold", on),
                text_table(MODULE_HEADERS, s["modules"], MODULE_ALIGN), ""]
    if s["scopes"]:
        out += [colour(f"Named scopes, time per step (top {top} by change)", "bold", on),
                text_table(SCOPE_HEADERS, s["scopes"], "llrrrr"), ""]
    if s["ops"][1]:
        out += [colour(f"Changed ops (top {top})", "bold", on), text_table(*s["ops"]), ""]
    if s["new"]:
        out += [colour("New ops: ", "bold", on) + s["new"]]
    if s["vanished"]:
        out += [colour("Vanished ops: ", "bold", on) + s["vanished"]]
    if s["relabel"]:
        out += [colour("Bound changed: ", "bold", on) + "; ".join(s["relabel"])]
    out += [f"note: {n}" for n in verdict.notes]
    out += [colour(f"warning: {w}", "yellow", on) for w in diff.warnings]
    return terminal_lines("\n".join(out).rstrip()) + "\n"


# ------------------------------------------------------------------ markdown

def diff_markdown(diff: Diff, verdict: Verdict | None = None, top: int = 15, command: str = "diff") -> str:
    """Markdown for a pull-request comment or $GITHUB_STEP_SUMMARY; `command` names it ("diff", "check")."""
    verdict = verdict or run_checks(diff)
    s = _sections(diff, verdict, top)
    mark = ":white_check_mark:" if verdict.passed else ":x:"
    out = [f"### {mark} traceview {command}: {_headline(diff, verdict)}", "",
           f"{markdown_code(diff.base.label)} -> {markdown_code(diff.new.label)}", ""]
    out += [f"- {markdown_text(line)}" for line in (s["step"], _work_line(diff), _mfu_line(s["mfu"]), s["counts"],
                                                  _programs_line(verdict), _projected_line(diff)) if line]
    out.append("")
    if verdict.failed:
        out += ["#### Over budget", "", markdown_table(CHECK_HEADERS, _check_rows(verdict.failed), CHECK_ALIGN), ""]
    passed = [c for c in verdict.checks if c.passed and c.gated]
    if passed:
        out += [f"<details><summary>{len(passed)} checks within budget</summary>", "",
                markdown_table(CHECK_HEADERS, _check_rows(passed), CHECK_ALIGN), "", "</details>", ""]
    ungated = [c for c in verdict.checks if not c.gated]
    if ungated:
        out += [f"<details><summary>{len(ungated)} checks reported, not gated (programs that do not run every "
                "step)</summary>", "", markdown_table(CHECK_HEADERS, _check_rows(ungated), CHECK_ALIGN), "",
                "</details>", ""]
    if s["bounds"]:
        out += [f"#### Time by bound, per step{markdown_text(_projected(diff))}", "",
                markdown_table(["bound", "base", "new", "change"], s["bounds"],
                                                                  "lrrr"), ""]
    if s["modules"]:
        out += ["#### HLO modules (cost model)", "", markdown_table(MODULE_HEADERS, s["modules"], MODULE_ALIGN), ""]
    if s["scopes"]:
        out += [f"#### Named scopes, time per step (top {top} by change)", "",
                markdown_table(SCOPE_HEADERS, s["scopes"], "llrrrr"), ""]
    if s["ops"][1]:
        out += [f"#### Changed ops (top {top})", "", markdown_table(*s["ops"]), ""]
    if verdict.checks or s["ops"][1]:
        out += [f"_{markdown_text(_legend(verdict.budgets.confidence))}_", ""]
    for title, key in (("New ops", "new"), ("Vanished ops", "vanished")):
        if s[key]:
            out += [f"**{title}:** {markdown_text(s[key])}", ""]
    if s["relabel"]:
        out += ["**Bound changed:** " + markdown_text("; ".join(s["relabel"])), ""]
    notes = [f"note: {n}" for n in verdict.notes] + [f"warning: {w}" for w in diff.warnings]
    if notes:
        out += ["<details><summary>notes and warnings</summary>", ""] + [f"- {markdown_text(n)}" for n in notes] + ["", "</details>"]
    return "\n".join(out).rstrip() + "\n"


# ------------------------------------------------------------------ json

def _check_record(c: Check) -> dict:
    record = dataclasses.asdict(c)
    if c.unit == "ps":  # JSON times are microseconds
        keys = ("baseline", "current", "baseline_total", "current_total")
        for key in (*keys, "limit") if c.kind == "absolute" else keys:
            record[key] = None if record[key] is None else record[key] / PS_PER_US
        record["unit"] = "us"
    return {k: json_scalar(v) for k, v in record.items()}


def _frame_records(frame: pd.DataFrame) -> list[dict]:
    """Rows with `*_ps` columns as `*_us` and JSON-safe values."""
    out = frame.copy()
    renames = {}
    for column in out.columns:
        if column.endswith("_ps"):
            out[column] = pd.to_numeric(out[column], errors="coerce") / PS_PER_US
            renames[column] = column[:-3] + "_us"
    out = out.rename(columns=renames).astype(object)
    return [{k: json_scalar(v) for k, v in row.items()} for row in out.to_dict("records")]


def _summary_record(summary: dict) -> dict:
    def convert(obj, key=""):
        if isinstance(obj, dict):
            return {(k[:-3] + "_us" if k.endswith("_ps") else k): convert(v, k) for k, v in obj.items()}
        if key.endswith("_ps") and number(obj) is not None:
            return obj / PS_PER_US
        return json_scalar(obj)

    record = convert(summary)
    by = summary.get("time_by_bound_ps")
    if by:
        record["time_by_bound_us"] = {b: {s: json_scalar(v / PS_PER_US) for s, v in d.items()} for b, d in by.items()}
    return record


def diff_json(diff: Diff, verdict: Verdict | None = None, command: str = "diff") -> dict:
    """`{"verdict", "checks", "ops", ...}` as docs/architecture.md specifies; times in microseconds."""
    verdict = verdict or run_checks(diff)
    return {
        "traceview_version": __version__,
        "command": command,
        "verdict": verdict.label,
        "checks": [_check_record(c) for c in verdict.checks],
        "ops": _frame_records(diff.ops),
        "modules": _frame_records(diff.modules),
        "scopes": _frame_records(diff.scopes) if diff.scopes is not None else [],
        "steps": _frame_records(diff.steps),
        "summary": _summary_record(diff.summary.to_dict()),
        "budgets": _clean_budgets(verdict),
        "programs": [dataclasses.asdict(g) for g in verdict.programs],
        "notes": list(verdict.notes),
        "warnings": list(diff.warnings),
    }


def _clean_budgets(verdict: Verdict) -> dict:
    b = dataclasses.asdict(verdict.budgets)
    out: dict[str, Any] = {}
    for key, value in b.items():
        if key == "ops":
            out["ops"] = [{k[:-3] + "_us" if k.endswith("_ps") else k:
                           (v / PS_PER_US if k.endswith("_ps") and v is not None else v) for k, v in r.items()}
                          for r in value]
        elif key.endswith("_ps"):
            out[key[:-3] + "_us"] = None if value is None else value / PS_PER_US
        else:
            out[key] = value
    return out


# ------------------------------------------------------------------ junit

def diff_junit(diff: Diff, verdict: Verdict | None = None) -> str:
    """JUnit XML: one testcase per checked quantity, a failure element for each one over budget."""
    verdict = verdict or run_checks(diff)
    suites = ET.Element("testsuites", name="traceview", tests=str(len(verdict.checks)),
                        failures=str(len(verdict.failed)))
    suite = ET.SubElement(suites, "testsuite", name="traceview check", tests=str(len(verdict.checks)),
                          failures=str(len(verdict.failed)), errors="0",
                          skipped=str(len(verdict.checks) - len(verdict.gated)))
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="baseline", value=diff.base.label)
    ET.SubElement(props, "property", name="current", value=diff.new.label)
    for c in verdict.checks:
        case = ET.SubElement(suite, "testcase", classname=f"traceview.{c.kind or 'check'}", name=c.name, time="0")
        summary = (f"{c.name} ({c.statistic or '-'}): {_value(c.baseline, c.unit, c.kind)} -> "
                   f"{_value(c.current, c.unit, c.kind)} "
                   f"({_change(c.change)}; limit {_limit(c)}; interval {_interval(c)})")
        if not c.gated:
            ET.SubElement(case, "skipped", message=c.detail)
            ET.SubElement(case, "system-out").text = summary + f"; {c.detail}"
        elif c.passed:
            ET.SubElement(case, "system-out").text = summary + (f"; {c.detail}" if c.detail else "")
        else:
            failure = ET.SubElement(case, "failure", message=summary, type="regression")
            failure.text = summary + (f"\n{c.detail}" if c.detail else "") + (f"\nmethod: {c.method}" if c.method else "")
    out = ET.SubElement(suite, "system-out")
    out.text = "\n".join([line for line in (_step_line(diff),) if line] + [f"note: {n}" for n in verdict.notes]
                         + [f"warning: {w}" for w in diff.warnings])
    ET.indent(suites)
    # Names from traces may hold characters XML forbids (ElementTree writes them as they are).
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + xml_text(ET.tostring(suites, encoding="unicode")) + "\n"


def render(diff: Diff, verdict: Verdict, fmt: str, top: int = 15, command: str = "diff") -> str:
    """The report in format `fmt` (table, markdown, json, junit), headed by `command` ("diff", "check")."""
    from traceview.render import jsontext

    if fmt == "json":
        return jsontext.dumps(diff_json(diff, verdict, command=command)) + "\n"
    if fmt == "junit":
        return diff_junit(diff, verdict)
    if fmt == "markdown":
        return diff_markdown(diff, verdict, top=top, command=command)
    return diff_text(diff, verdict, top=top, command=command)

