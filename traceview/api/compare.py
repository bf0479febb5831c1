"""``traceview.diff(base, new) -> Diff`` and ``traceview.check(new, baseline) -> Verdict``.

Either side may be an :class:`~traceview.api.analysis.Analysis`, a
:class:`~traceview.regress.baseline.Snapshot`, or a path: a trace (log dir,
run dir, file), an HLO dump or file, or JSON written by ``traceview analyze``
or ``traceview hlo`` (a stored baseline).
"""

from __future__ import annotations

from pathlib import Path

from traceview.api.analysis import Analysis
from traceview.errors import UserError
from traceview.regress.baseline import Snapshot, load_snapshot, snapshot_from_analysis
from traceview.regress.budgets import BUDGET_KEYS, Budgets, make_budgets
from traceview.regress.check import Verdict, run_checks
from traceview.regress.comparable import not_comparable
from traceview.regress.diff import Diff, diff_analyses

__all__ = ["check", "diff"]

Side = Analysis | Snapshot | str | Path
_WHAT = {"trace": "a trace (or its analyze JSON)", "hlo": "HLO (a dump folder, file or hlo JSON)"}


def _snapshot(side: Side, run: str | None, target: str | None, hardware_file: str | Path | None,
              stage: str) -> Snapshot:
    if isinstance(side, Snapshot):
        return side
    if isinstance(side, Analysis):
        source = side.pipeline.profile.source
        return snapshot_from_analysis(side.pipeline, label=str(source.run or source.path))
    if isinstance(side, (str, Path)):
        return load_snapshot(side, run=run, target=target, hardware_file=hardware_file, stage=stage)
    raise TypeError(f"cannot compare a {type(side).__name__}: give an Analysis, a Snapshot or a path")


def _budgets(budgets: Budgets | str | Path | dict | None) -> Budgets:
    if isinstance(budgets, Budgets):
        return budgets
    if isinstance(budgets, dict):
        overrides = {}
        for key, value in budgets.items():
            if key not in BUDGET_KEYS:
                raise UserError(f"unknown budget {key!r}; known: {', '.join(BUDGET_KEYS)}")
            name, parse = BUDGET_KEYS[key]
            overrides[name] = parse(value, key)
        return make_budgets(None, **overrides)
    return make_budgets(budgets)


def diff(base: Side, new: Side, *, run: str | None = None, base_run: str | None = None,
         target: str | None = None, hardware_file: str | Path | None = None, stage: str = "after",
         budgets: Budgets | str | Path | dict | None = None) -> Diff:
    """Compare ``new`` with ``base``: per op, per step, per module (see docs/api.md for ``Diff.ops``).

    ``run``/``base_run`` pick runs of log dirs; ``target`` judges both sides
    on one chip; ``stage`` picks the HLO dump stage. ``budgets`` (a Budgets,
    a TOML config path or a dict of overrides with the config file's keys
    and values, e.g. ``{"max_op_regression": "20%", "min_op_time": "0.5ms"}``) sets the confidence of the noise
    intervals, the relative time change that makes an op "changed" and the
    minimum op time per step. UserError when one side is a trace and the
    other HLO.
    """
    b = _budgets(budgets)
    base_snap = _snapshot(base, base_run, target, hardware_file, stage)
    new_snap = _snapshot(new, run, target, hardware_file, stage)
    if base_snap.kind != new_snap.kind:
        raise UserError(f"cannot compare {_WHAT[base_snap.kind]} {base_snap.label} with "
                        f"{_WHAT[new_snap.kind]} {new_snap.label}: give two traces or two HLO inputs")
    return diff_analyses(base_snap, new_snap, confidence=b.confidence, time_tolerance=b.max_op_regression,
                         min_time_ps=b.min_op_time_ps)


def check(new: Side | Diff, baseline: Side | None = None, budgets: Budgets | str | Path | dict | None = None, *,
          run: str | None = None, base_run: str | None = None, target: str | None = None,
          hardware_file: str | Path | None = None, stage: str = "after") -> Verdict:
    """Judge ``new`` against ``baseline`` within ``budgets`` (as ``traceview check``): a :class:`Verdict`.

    ``new`` may also be a :class:`Diff` already made (``baseline`` is then
    not needed). ``budgets``: a Budgets, a TOML config path, a dict of
    overrides, or None for the defaults. ``Verdict.passed`` is False when a
    check failed; ``Verdict.diff`` is the comparison it judged. UserError
    when the two sides are not comparable (they share too few ops or
    modules: ``traceview.regress.comparable``) or nothing could be checked.
    """
    b = _budgets(budgets)
    if isinstance(new, Diff):
        compared = new
    elif baseline is None:
        raise TypeError("check(new, baseline): give the baseline, or a Diff as `new`")
    else:
        compared = diff(baseline, new, run=run, base_run=base_run, target=target, hardware_file=hardware_file,
                        stage=stage, budgets=b)
    reason = not_comparable(compared)
    if reason:
        raise UserError(f"not comparable: {reason}")
    verdict = run_checks(compared, b)
    if not verdict.checks:  # a verdict saying "pass" would be a lie
        raise UserError(f"{compared.base.label} and {compared.new.label} have nothing in common to check (no step "
                        "or device times, no common ops over the minimum time, no common HLO modules)")
    return verdict
