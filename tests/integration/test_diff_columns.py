"""Every change column of diff/check is the change between its own columns, in every format.

The rows are read back from the rendered text (terminal table, Markdown,
JUnit) and from the JSON: each change must equal current / baseline - 1 of
the two figures shown beside it, within the rounding of what is printed.
"""

from __future__ import annotations

import html
import json
import math
import re
import xml.etree.ElementTree as ET

import pytest

from traceview.regress.baseline import load_snapshot
from traceview.regress.check import run_checks
from traceview.regress.diff import diff_analyses
from traceview.render.regress import diff_json, diff_junit, diff_markdown, diff_text

_SCALE = {"s": 1e6, "ms": 1e3, "us": 1.0, "P": 1e15, "T": 1e12, "G": 1e9, "M": 1e6, "k": 1e3, "": 1.0,
          "KiB": 2.0 ** 10, "MiB": 2.0 ** 20, "GiB": 2.0 ** 30, "TiB": 2.0 ** 40}
_VALUE = re.compile(r"^(-?[0-9]+(?:\.([0-9]+))?)(?:e[+-]?\d+)?\s*(s|ms|us|KiB|MiB|GiB|TiB|[PTGMk]?)(?:B|B/s)?$")
_CHANGE = re.compile(r"^([+-][0-9]+\.[0-9])%$")


def _value(cell: str) -> tuple[float, float] | None:
    """A printed figure -> (value, half of its last digit); None for '-' and what is not a figure."""
    m = _VALUE.match(cell.strip())
    if not m:
        return None
    number, scale = float(m.group(1)), _SCALE[m.group(3)]
    decimals = len(m.group(2) or "")
    digits = len(m.group(1).lstrip("-").replace(".", "").lstrip("0")) or 1
    half = 0.5 * 10.0 ** -decimals
    if not m.group(2) and digits >= 3 and number >= 1000:   # "%.3g" of a big integer still has 3 figures
        half = 0.5 * 10.0 ** (len(str(int(abs(number)))) - 3)
    return number * scale, half * scale


def _agrees(base: str, new: str, change: str) -> bool | None:
    """Whether `change` is new/base - 1 within the printed precision; None when the cells hold no figures."""
    b, n, c = _value(base), _value(new), _CHANGE.match(change.strip())
    if b is None or n is None or c is None or b[0] <= 0:
        return None
    shown = float(c.group(1)) / 100.0
    ratio = n[0] / b[0]
    # the largest error of ratio from rounding both figures, plus the change's own 0.05% rounding
    slack = ratio * (b[1] / b[0] + n[1] / max(n[0], n[1])) * 1.01 + 0.0005 + 1e-9
    return abs(shown - (ratio - 1.0)) <= slack


def _tables(lines: list[str], markdown: bool) -> list[tuple[list[str], list[list[str]]]]:
    """Header and rows of each table in a rendered report."""
    out = []
    i = 0
    while i + 1 < len(lines):
        rule = lines[i + 1]
        is_rule = re.fullmatch(r"\|?(\s*:?-+:?\s*\|)+\s*:?-*:?\s*\|?", rule) if markdown else \
            re.fullmatch(r"-+(  -+)*", rule)
        if not lines[i].strip() or not is_rule:
            i += 1
            continue
        if markdown:
            split = lambda s: [c.strip() for c in s.strip().strip("|").split("|")]  # noqa: E731
        else:
            starts = [m.start() for m in re.finditer(r"-+", rule)]
            split = lambda s, starts=starts: [s[a:b].strip()  # noqa: E731
                                              for a, b in zip(starts, [*starts[1:], len(s)])]
        header, rows = split(lines[i]), []
        i += 2
        while i < len(lines) and lines[i].strip() and (not markdown or lines[i].startswith("|")):
            rows.append(split(lines[i]))
            i += 1
        out.append((header, rows))
    return out


def _change_pairs(header: list[str]) -> list[tuple[int, int, int]]:
    """(base, new, change) column indices: each change column and the two value columns before it.

    A change column whose header names another quantity ("FLOPs/step change") and has no value
    columns of its own is not paired; a change column with value columns before it always is.
    """
    pairs = []
    for k, name in enumerate(header):
        if not name.endswith("change") or k < 2:
            continue
        before = header[k - 2:k]
        if any(h.endswith("change") for h in before):
            assert "/" in name and not name.startswith("time"), f"change column {name!r} without its own columns"
            continue
        pairs.append((k - 2, k - 1, k))
    return pairs


def _check_report(text: str, markdown: bool) -> int:
    checked = 0
    if markdown:   # back from Markdown's escapes to the figures
        text = html.unescape(re.sub(r"\\(.)", r"\1", text))
    for header, rows in _tables(text.splitlines(), markdown):
        for b, n, c in _change_pairs(header):
            for row in rows:
                agrees = _agrees(row[b], row[n], row[c])
                assert agrees is not False, f"{header[c]} of {row[0]}: {row[b]} -> {row[n]} is not {row[c]}"
                checked += agrees is True
    for line in text.splitlines():   # the headline lines: "A -> B: +x%" and "A -> B (+x%)"
        for m in re.finditer(r"([0-9.]+ ?[a-zA-Z]*) -> ([0-9.]+ ?[a-zA-Z]*):? \(?([+-][0-9.]+%)", line):
            agrees = _agrees(m.group(1), m.group(2), m.group(3))
            assert agrees is not False, line
            checked += agrees is True
    return checked


@pytest.fixture(scope="module")
def diffs(sample_traces):
    """Two traces that differ, a trace against itself, and two HLO dumps that differ."""
    mlp, slow = load_snapshot(sample_traces / "mlp"), load_snapshot(sample_traces / "mlp_slow")
    hlo = [load_snapshot(sample_traces / name / "hlo") for name in ("mlp", "mlp_slow")]
    return [diff_analyses(mlp, slow), diff_analyses(slow, mlp), diff_analyses(mlp, mlp), diff_analyses(*hlo)]


def test_every_change_in_the_text_and_markdown_is_between_its_columns(diffs):
    checked = 0
    for diff in diffs:
        verdict = run_checks(diff)
        checked += _check_report(diff_text(diff, verdict, top=1000, colour_enabled=False), markdown=False)
        checked += _check_report(diff_markdown(diff, verdict, top=1000), markdown=True)
    assert checked > 300   # the parser found the rows: every table of every diff, in both formats


def test_every_change_in_the_json_is_between_its_fields(diffs):
    checked = 0
    for diff in diffs:
        data = json.loads(json.dumps(diff_json(diff, run_checks(diff))))
        rows = [(c["baseline"], c["current"], c["change"]) for c in data["checks"] if c["kind"] != "absolute"]
        rows += [(r["base_time_us"], r["new_time_us"], r["change"]) for r in data["ops"]]
        rows += [(r["base_time_us"], r["new_time_us"], r["change"]) for r in data["scopes"]]
        rows += [(r[f"base_{q}"], r[f"new_{q}"], r[f"{q}_change"]) for r in data["modules"]
                 for q in ("flops", "bytes_accessed", "collective_bytes")]
        for base, new, change in rows:
            if base is None or new is None or change is None or base == 0:
                continue
            assert change == pytest.approx(new / base - 1.0, rel=1e-9, abs=1e-12)
            checked += 1
    assert checked > 100


def test_json_keeps_the_totals_beside_the_per_step_figures(diffs):
    diff = diffs[0]
    data = diff_json(diff, run_checks(diff))
    ops = [r for r in data["ops"] if r["time_statistic"] == "median/step"]
    assert ops, "mlp vs mlp_slow: matched ops with per-step times give medians"
    for r in ops:
        assert r["base_total_time_us"] == pytest.approx(
            float(diff.base.ops.loc[(diff.base.ops["module"] == r["module"]) & (diff.base.ops["op"] == r["base_op"]),
                                    "time_ps"].sum()) / 1e6)
    for c in data["checks"]:
        if c["kind"] == "op":
            row = next(r for r in data["ops"] if f"op:{r['module']}/{r['op']}" == c["name"])
            assert (c["baseline_total"], c["current_total"]) == (row["base_total_time_us"], row["new_total_time_us"])
            assert c["statistic"] == row["time_statistic"]
    step = next(c for c in data["checks"] if c["name"] == "step_time")
    assert step["baseline_total"] == pytest.approx(float(diff.base.step_times_ps.sum()) / 1e6)


def test_every_junit_message_is_between_its_figures(diffs):
    checked = 0
    for diff in diffs:
        root = ET.fromstring(diff_junit(diff, run_checks(diff)))
        for case in root.iter("testcase"):
            text = "".join(e.get("message") or e.text or "" for e in case if e.tag in ("failure", "system-out"))
            m = re.search(r": (\S+(?: [a-zA-Z]+)?) -> (\S+(?: [a-zA-Z]+)?) \(([^;]+);", text)
            assert m, text
            agrees = _agrees(*m.groups())
            assert agrees is not False, text
            checked += agrees is True
    assert checked > 20


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_row_statistic_is_the_median_per_step_by_hand(seed):
    """Random per-step op times: each row's columns are the medians and its change their ratio."""
    import numpy as np
    import pandas as pd

    from traceview.regress.baseline import OP_COLUMNS, Snapshot

    rng = np.random.default_rng(seed)
    names = [f"op_{rng.integers(1e6)}" for _ in range(4)]
    steps = int(rng.integers(3, 9))
    sides = []
    for label in ("base", "new"):
        times = {n: rng.lognormal(np.log(2e9), 0.6, steps) for n in names}
        rows = [{"module": "m", "op": n, "opcode": "fusion", "category": "", "shape": "", "dtype": "",
                 "occurrences": float(steps), "time_ps": t.sum(), "judged_time_ps": math.nan,
                 "roofline_time_ps": math.nan, "flops": 1e9, "bytes": 1e6, "collective_bytes": 0.0,
                 "bound": "compute", "source_file": "", "source_line": math.nan, "fingerprint": "", "op_name": ""}
                for n, t in times.items()]
        per_step = pd.DataFrame([{"module": "m", "op": n, "step": i, "time_ps": v}
                                 for n, t in times.items() for i, v in enumerate(t)])
        sides.append((Snapshot(kind="trace", label=label, ops=pd.DataFrame(rows, columns=OP_COLUMNS),
                               step_times_ps=np.full(steps, 1e10), op_steps=per_step), times))
    diff = diff_analyses(sides[0][0], sides[1][0])
    for n in names:
        row = diff.ops[diff.ops["op"] == n].iloc[0]
        b, m = float(np.median(sides[0][1][n])), float(np.median(sides[1][1][n]))
        assert (row["base_time_ps"], row["new_time_ps"]) == (pytest.approx(b), pytest.approx(m))
        assert row["change"] == pytest.approx(m / b - 1.0)
        assert row["base_total_time_ps"] == pytest.approx(sides[0][1][n].sum())
