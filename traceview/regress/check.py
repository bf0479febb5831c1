"""Verdicts: does a Diff stay within its budgets (budgets.py)?

A timing check fails only when the slowdown is larger than its budget and,
where per-step times give an interval, real: the interval's lower bound is
above zero. Ops below a minimum time per step are not judged (their timings
are mostly noise). Static checks (FLOPs, bytes, collective bytes per module
of an HLO dump) have no noise and compare exactly. Checks of programs that do
not run every step (initialisation, helpers) are reported but not gated unless
the budgets name them (regress/gating.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from traceview.regress.budgets import Budgets
from traceview.regress.diff import Diff
from traceview.regress.gating import ProgramGate, gate_program
from traceview.regress.stats import Shift
from traceview.units import finite


@dataclass
class Check:
    """One checked quantity: `change` is relative (current/baseline - 1, always of the two values shown),
    `limit` the largest change allowed (for "absolute" checks, the bound on `current` itself).

    `statistic` says what `baseline` and `current` are ("median/step", "mean/step", "per module",
    "peak", ...): timed checks with per-step samples on both sides give the median per step and the
    Mann-Whitney interval of the change (`low`, `high`); `baseline_total` / `current_total` are the
    whole capture's totals (None where a total means nothing, e.g. a peak)."""

    name: str
    baseline: float | None
    current: float | None
    change: float | None
    limit: float | None
    passed: bool
    unit: str = ""                 # "ps", "flops", "bytes", "fraction"
    kind: str = ""                 # "step", "op", "scope", "static", "memory", "absolute"
    low: float | None = None       # confidence interval of `change`, when there is one
    high: float | None = None
    method: str = ""
    detail: str = ""
    statistic: str = ""
    baseline_total: float | None = None
    current_total: float | None = None
    gated: bool = True             # False: reported, never failed (a program that does not run every step)
    program: str | None = None     # the program (HLO module) an op, static or static-memory check is about


@dataclass
class Verdict:
    """The checks of one Diff against its budgets; ``passed`` when none failed.

    ``notes`` say what was not judged and why; ``diff`` is the comparison judged.
    """

    checks: list[Check]
    budgets: Budgets
    notes: list[str] = field(default_factory=list)
    diff: Diff | None = None
    programs: list[ProgramGate] = field(default_factory=list)   # every program a check was about

    @property
    def gated(self) -> list[Check]:
        return [c for c in self.checks if c.gated]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    @property
    def label(self) -> str:
        return "pass" if self.passed else "fail"


def _timing_passed(shift: Shift | None, change: float | None, limit: float) -> tuple[bool, str]:
    """Fail only when the change is over the budget and, if an interval exists, significantly above zero."""
    if change is None or change <= limit:
        return True, ""
    if shift is not None and shift.low is not None and shift.low <= 0:
        return True, f"+{change:.1%} is within noise (interval {shift.low:+.1%} .. {shift.high:+.1%})"
    return False, ""


def op_check_name(module: str, op: str) -> str:
    """The name of an op's timing check in reports: "op:<module>/<op>"."""
    return f"op:{module}/{op}"


def _step_check(diff: Diff, budgets: Budgets) -> list[Check]:
    shift = diff.step_shift
    if shift is None or shift.estimate is None:
        return []
    st = diff.summary.step_time
    assert st is not None  # a step shift comes with its step time
    passed, detail = _timing_passed(shift, shift.estimate, budgets.max_step_regression)
    stepped = st.name == "step_time"
    totals = (float(diff.base.step_times_ps.sum()), float(diff.new.step_times_ps.sum())) if stepped \
        else (st.base_ps, st.new_ps)
    return [Check(st.name, st.base_ps, st.new_ps, shift.estimate, budgets.max_step_regression, passed,
                  "ps", "step", shift.low, shift.high, shift.method, detail,
                  statistic="median/step" if stepped else "whole capture", baseline_total=totals[0],
                  current_total=totals[1])]


def _op_checks(diff: Diff, budgets: Budgets) -> tuple[list[Check], list[str]]:
    ops = diff.ops
    matched = ops[(ops["status"] != "new") & (ops["status"] != "vanished")]
    checks, skipped = [], 0
    for row in matched.itertuples(index=False):
        rule = budgets.rule_for(row.module, row.op)
        if rule is not None and rule.ignore:
            continue
        min_time = rule.min_time_ps if rule and rule.min_time_ps is not None else budgets.min_op_time_ps
        limit = rule.max_regression if rule and rule.max_regression is not None else budgets.max_op_regression
        base_t, new_t = finite(row.base_time_ps), finite(row.new_time_ps)
        if base_t is None or new_t is None:
            continue
        if max(base_t, new_t) < min_time:
            skipped += 1
            continue
        # The row's own statistic (median per step with per-step times, else mean per step) and its change.
        shift = diff.op_shifts.get((row.module, row.op))
        change = finite(row.change) if base_t > 0 else None
        passed, detail = _timing_passed(shift, change, limit)
        if row.matched_by not in ("name", ""):
            detail = (detail + "; " if detail else "") + f"was {row.base_op} (matched by {row.matched_by})"
        checks.append(Check(op_check_name(row.module, row.op), base_t, new_t, change, limit, passed, "ps", "op",
                            finite(row.change_low), finite(row.change_high),
                            shift.method if shift else "per-step totals / steps", detail,
                            statistic=row.time_statistic, baseline_total=finite(row.base_total_time_ps),
                            current_total=finite(row.new_total_time_ps), program=row.module))
    notes = [f"{skipped} matched ops under the minimum op time were not judged"] if skipped else []
    return checks, notes


_STATIC = (("flops", "max_flops_increase", "flops"), ("bytes_accessed", "max_bytes_increase", "bytes"),
           ("collective_bytes", "max_collective_increase", "bytes"))


def _static_checks(diff: Diff, budgets: Budgets) -> tuple[list[Check], list[str]]:
    checks, notes = [], []
    modules = diff.modules
    for row in modules.to_dict("records"):
        if row["status"] in ("new", "vanished"):
            notes.append(f"module {row['module']} is {row['status']} in {diff.new.label if row['status'] == 'new' else diff.base.label}")
            continue
        for quantity, budget, unit in _STATIC:
            base, new = finite(row[f"base_{quantity}"]), finite(row[f"new_{quantity}"])
            if base is None or new is None:
                if quantity == "flops":   # unknown, never 0: e.g. a module whose only math is custom kernels
                    sides = " and ".join(label for label, v in (("baseline", base), ("current", new)) if v is None)
                    notes.append(f"FLOPs of module {row['module']} not checked: unknown in the {sides} (no op "
                                 "has a FLOP figure, e.g. custom kernels without a cost estimate)")
                continue
            limit = getattr(budgets, budget)
            if base > 0:
                relative = finite(row[f"{quantity}_change"])
                change = new / base - 1.0 if relative is None else relative
            else:
                change = 0.0 if new == 0 else math.inf
            passed = change <= limit
            checks.append(Check(f"{quantity}:{row['module']}", base, new, None if math.isinf(change) else change,
                                limit, passed, unit, "static", method="HLO cost model",
                                detail="" if passed or base > 0 else "appears from zero", statistic="per module",
                                program=row["module"]))
    return checks, notes


def _memory_checks(diff: Diff, budgets: Budgets) -> tuple[list[Check], list[str]]:
    """Peak memory per device allocator (runtime) and per HLO module (static) against its budget."""
    budget = budgets.max_peak_memory_increase
    base, new = diff.base.memory, diff.new.memory
    checks = []
    for key in sorted(set(base) & set(new)):
        b, n = float(base[key]), float(new[key])
        limit = budget.limit_for(b)
        change = n / b - 1.0 if b > 0 else (0.0 if n == 0 else math.inf)
        passed = n - b <= budget.bytes if budget.bytes is not None else change <= limit
        grew = f"{n - b:+,.0f} bytes; budget {budget}"
        checks.append(Check(f"peak_memory:{key}", b, n, None if math.isinf(change) else change,
                            None if math.isinf(limit) else limit, passed, "bytes", "memory",
                            method="allocator events" if key.startswith("runtime:") else "buffer assignment",
                            detail=grew, statistic="peak",
                            program=key[len("static:"):] if key.startswith("static:") else None))
    only = sorted(set(base) ^ set(new))
    notes = [f"peak memory of {len(only)} allocator(s)/module(s) found on one side only: {', '.join(only[:5])}"
             + (" ..." if len(only) > 5 else "")] if only else []
    return checks, notes


def _absolute_checks(diff: Diff, budgets: Budgets) -> tuple[list[Check], list[str]]:
    checks, notes = [], []
    if budgets.max_step_time_ps is not None:
        st = diff.summary.step_time
        new = st.new_ps if st is not None and st.name == "step_time" else None
        if new is None:
            notes.append("max_step_time not checked: the new input has no step times")
        else:
            checks.append(Check("max_step_time", None, new, None, budgets.max_step_time_ps,
                                new <= budgets.max_step_time_ps, "ps", "absolute", method="median step time",
                                statistic="median/step"))
    if budgets.min_mfu is not None:
        mfu = finite(diff.new.mfu)
        if mfu is None:
            notes.append("min_mfu not checked: the new input has no MFU (no target chip, or no FLOPs)")
        else:
            checks.append(Check("min_mfu", finite(diff.base.mfu), mfu, None, budgets.min_mfu,
                                mfu >= budgets.min_mfu, "fraction", "absolute", statistic="whole capture"))
    return checks, notes


def _scope_checks(diff: Diff, budgets: Budgets) -> tuple[list[Check], list[str]]:
    """Each named scope below the programs against max_scope_regression (when set), as ops are judged:
    over budget and, where per-step times give an interval, significantly; scopes under min_op_time skip."""
    limit = budgets.max_scope_regression
    if limit is None:
        return [], []
    scopes = diff.scopes
    if scopes is None or scopes.empty:
        return [], ["max_scope_regression not checked: the inputs' ops carry no op_name metadata (named scopes)"]
    checks, skipped = [], 0
    for row in scopes[scopes["depth"] > 1].itertuples(index=False):
        base_t, new_t = finite(row.base_time_ps), finite(row.new_time_ps)
        if base_t is None or new_t is None:
            continue
        if max(base_t, new_t) < budgets.min_op_time_ps:
            skipped += 1
            continue
        change = finite(row.change)
        low, high = finite(row.change_low), finite(row.change_high)
        shift = Shift(change, low, high, row.method, 0, 0) if low is not None else None
        passed, detail = _timing_passed(shift, change, limit)
        checks.append(Check(f"scope:{row.scope}", base_t, new_t, change, limit, passed, "ps", "scope",
                            low, high, row.method, detail,
                            statistic="mean/step" if row.method == "per-step totals" else "median/step"))
    notes = [f"{skipped} scopes under the minimum op time were not judged"] if skipped else []
    return checks, notes


def _gate(checks: list[Check], diff: Diff, budgets: Budgets) -> list[ProgramGate]:
    """Ungate the checks of programs that do not run every step; the gate of every program checked.

    An op check stays gated when a per-op rule names it (a budget naming it)."""
    sides = [(diff.base.programs, len(diff.base.step_times_ps)), (diff.new.programs, len(diff.new.step_times_ps))]
    gates: dict[str, ProgramGate] = {}
    for c in checks:
        program = c.program
        if program is None:
            continue
        if program not in gates:
            gates[program] = gate_program(program, budgets.programs, sides)
        gate = gates[program]
        named = c.kind == "op" and budgets.rule_for(program, c.name[len(op_check_name(program, "")):]) is not None
        if not gate.gated and not named:
            over = "" if c.passed else "over budget, "
            c.gated, c.passed = False, True
            c.detail = f"{over}not gated ({gate.why})" + (f"; {c.detail}" if c.detail else "")
    return sorted(gates.values(), key=lambda g: (not g.gated, g.program))


def run_checks(diff: Diff, budgets: Budgets | None = None) -> Verdict:
    """Every check the diff supports: step time, ops, static module totals, absolute budgets."""
    budgets = budgets or Budgets()
    checks = _step_check(diff, budgets)
    op_checks, notes = _op_checks(diff, budgets)
    scope_checks, scope_notes = _scope_checks(diff, budgets)
    static, static_notes = _static_checks(diff, budgets)
    memory, memory_notes = _memory_checks(diff, budgets)
    absolute, absolute_notes = _absolute_checks(diff, budgets)
    checks += op_checks + scope_checks + static + memory + absolute
    notes += scope_notes + static_notes + memory_notes + absolute_notes
    programs = _gate(checks, diff, budgets)
    if not checks:
        notes.append("nothing to check: the inputs share no step times, judged ops or HLO modules")
    return Verdict(checks=checks, budgets=budgets, notes=notes, diff=diff, programs=programs)
