"""``traceview.diff(base, new) -> Diff`` and ``traceview.check(new, baseline) -> Verdict``.

Either side may be an :class:`~traceview.api.analysis.Analysis`, a
:class:`~traceview.regress.baseline.Snapshot`, or a path: a trace (log dir,
run dir, file), an HLO dump or file, or JSON written by ``traceview analyze``
or ``traceview hlo`` (a stored baseline).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from traceview.analysis.build import apply_target
from traceview.api.analysis import Analysis
from traceview.config.values import optional_path, path_like
from traceview.errors import UserError
from traceview.hardware.chips import Chip
from traceview.hardware.database import get_chip, load_hardware
from traceview.parsers.hlo.dump import check_stage
from traceview.regress.baseline import Snapshot, load_snapshot, snapshot_from_analysis
from traceview.regress.budgets import Budgets, budget_values, check_confidence, make_budgets
from traceview.regress.check import Verdict, run_checks
from traceview.regress.comparable import not_comparable
from traceview.regress.diff import Diff, diff_analyses

__all__ = ["check", "diff"]

Side = Analysis | Snapshot | str | Path
_WHAT = {"trace": "a trace (or its analyze JSON)", "hlo": "HLO (a dump folder, file or hlo JSON)"}


def _snapshot(side: Side, what: str, run: str | None, target: Chip | None, hardware_file: str | Path | None,
              stage: str) -> Snapshot:
    """One side of a comparison (``what`` names the argument in errors), an Analysis judged on ``target``."""
    if isinstance(side, Snapshot):
        return side
    if isinstance(side, Analysis):
        source = side.pipeline.profile.source
        judged = side.pipeline if target is None else apply_target(side.pipeline, target, detected=False)
        return snapshot_from_analysis(judged, label=str(source.run or source.path))
    if not isinstance(side, (str, os.PathLike)):
        raise UserError(f"{what}={side!r}: cannot compare it; give an Analysis, a Snapshot or a path")
    path = path_like(side, what)
    name = None if target is None else target.name
    return load_snapshot(path, run=run, target=name, hardware_file=hardware_file, stage=stage)


def _budgets(budgets: Budgets | str | Path | dict | None) -> Budgets:
    """Budgets from what the caller gave (a Budgets, a TOML config path, a dict of the config's keys, None
    for the defaults), their confidence checked whichever way they came."""
    if isinstance(budgets, Budgets):
        b = budgets
    elif isinstance(budgets, Mapping):
        b = make_budgets(None, **budget_values(budgets, "budgets"))
    elif budgets is None or isinstance(budgets, (str, os.PathLike)):
        b = make_budgets(optional_path(budgets, "budgets"))
    else:
        raise UserError(f"budgets={budgets!r}: expected a Budgets, a TOML config path or a dict such as "
                        "{'max_step_regression': '5%'}")
    check_confidence(b.confidence, "budgets")
    return b


def _target(target: str | None, hardware_file: str | Path | None) -> Chip | None:
    """The chip ``target`` names, looked up before anything is read (an Analysis side is judged on it too)."""
    if target is None or (isinstance(target, str) and not target):   # "": as `--target ""`, each side's own
        return None
    return get_chip(target, load_hardware(hardware_file))


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
    other HLO, or for an argument of the wrong kind (checked before anything is read).
    """
    b = _budgets(budgets)
    hardware_file = optional_path(hardware_file, "hardware_file")
    check_stage(stage)
    chip = _target(target, hardware_file)
    base_snap = _snapshot(base, "base", base_run, chip, hardware_file, stage)
    new_snap = _snapshot(new, "new", run, chip, hardware_file, stage)
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
        if baseline is not None:
            raise UserError("check(new, baseline): a Diff carries its baseline; give the Diff alone")
        compared = new
    elif baseline is None:
        raise UserError("check(new, baseline): give the baseline, or a Diff as `new`")
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
