"""Which programs a check gates by default: the ones that run every step.

A capture holds programs that run once (parameter initialisation, the small
`jit_true_divide`-style helpers JAX compiles on the way) next to the step
program. Their sizes and times change with any edit to the model's shapes,
and a budget on them is noise that buries the step's own regression. So by
default a check gates (can fail on) only what runs every step:

- with steps in the capture, a program that ran in every step, on either side;
- without steps, a program that ran in the capture at all (there is nothing
  to tell a step program from a one-off one);
- an input that records no executions (an HLO dump, an HLO JSON) cannot tell
  either: every module is gated;
- a program named in the budgets (`programs = ["glob", ...]` in `[check]`)
  is gated whatever it did.

The others are still compared and reported, never failed. Program keys are
the names the memory checks use: the module name, or ``name(program_id)``
where one name was compiled more than once.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

import pandas as pd

from traceview.parsers.tables.conventions import as_uint64

PROGRAM_COLUMNS = ["module", "program_id", "steps_run", "outside"]
_WITH_ID = re.compile(r"^(?P<name>.*)\((?P<id>[^()]*)\)$")


@dataclass(frozen=True)
class ProgramGate:
    """Whether the checks of one program can fail, and why (one phrase a report prints)."""

    program: str
    gated: bool
    why: str


def programs_that_ran(ops: pd.DataFrame) -> pd.DataFrame:
    """PROGRAM_COLUMNS from a profile's op table (module, program_id, step; step -1 outside every step)."""
    if ops.empty:
        return pd.DataFrame(columns=PROGRAM_COLUMNS)
    ids = ops["program_id"].astype("int64") if "program_id" in ops.columns else pd.Series(-1, index=ops.index)
    frame = pd.DataFrame({"module": ops["module"].astype(str).to_numpy(),
                          "program_id": ["" if i == -1 else str(as_uint64(int(i))) for i in ids],
                          "step": ops["step"].to_numpy()})
    grouped = frame.groupby(["module", "program_id"], sort=True)
    return pd.DataFrame({
        "steps_run": grouped["step"].agg(lambda s: int(s[s >= 0].nunique())),
        "outside": grouped["step"].agg(lambda s: bool((s < 0).any())),
    }).reset_index()[PROGRAM_COLUMNS]


def programs_from_records(records: list, n_steps: int) -> pd.DataFrame:
    """PROGRAM_COLUMNS from `analyze --format json` op records (their `step_times_us`, when present)."""
    steps: dict[tuple[str, str], set[int]] = {}
    for r in records:
        if not isinstance(r, dict) or not r.get("self_time_us"):
            continue
        key = (str(r.get("module") or ""), str(r.get("program_id") or ""))
        times = r.get("step_times_us")
        ran = {i for i, t in enumerate(times) if isinstance(t, (int, float)) and t > 0} \
            if isinstance(times, list) else set(range(n_steps))   # no per-step record: counted as every step
        steps.setdefault(key, set()).update(ran)
    rows = [(m, p, len(s), False) for (m, p), s in sorted(steps.items())]
    return pd.DataFrame(rows, columns=PROGRAM_COLUMNS)


def _rows_for(programs: pd.DataFrame, program: str) -> pd.DataFrame:
    """The rows of `programs` that `program` ("name" or "name(program_id)") names."""
    exact = programs[programs["module"] == program]
    m = _WITH_ID.match(program)
    if m is None:
        return exact
    with_id = programs[(programs["module"] == m["name"]) & (programs["program_id"] == m["id"])]
    return pd.concat([exact, with_id]) if len(exact) else with_id


def _side(programs: pd.DataFrame | None, n_steps: int, program: str) -> tuple[bool | None, str]:
    """Whether one side ran `program` every step (None: the side records no executions) and the phrase."""
    if programs is None:
        return None, "no executions recorded"
    rows = _rows_for(programs, program)
    if rows.empty:
        return False, "did not run in the capture"
    if n_steps == 0:
        return True, "ran (the capture has no steps)"
    ran = int(rows["steps_run"].max())
    return ran >= n_steps, f"ran in {ran} of {n_steps} steps"


def gate_program(program: str, patterns: list[str], sides: list[tuple[pd.DataFrame | None, int]]
                 ) -> ProgramGate:
    """Whether `program`'s checks are gated: named by a glob of `patterns`, or run every step on a side.

    `sides`: (programs, steps captured) of the base and the new side.
    """
    if any(fnmatch.fnmatchcase(program, p) for p in patterns):
        return ProgramGate(program, True, "named in the budgets")
    verdicts = [_side(programs, n_steps, program) for programs, n_steps in sides]
    if all(every is None for every, _ in verdicts):
        return ProgramGate(program, True, "no executions recorded: every module gated")
    why = " / ".join(dict.fromkeys(phrase for _, phrase in verdicts))
    return ProgramGate(program, any(every for every, _ in verdicts), why)
