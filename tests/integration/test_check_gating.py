"""Default budgets gate what runs every step: one-off programs are reported, not failed (regress/gating.py)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from traceview.errors import UserError
from traceview.regress.baseline import OP_COLUMNS, Snapshot, load_snapshot
from traceview.regress.budgets import OpRule, make_budgets
from traceview.regress.check import run_checks
from traceview.regress.diff import diff_analyses
from traceview.regress.gating import PROGRAM_COLUMNS, programs_that_ran
from traceview.render.regress import diff_json, diff_junit, diff_text


def test_mlp_slow_fails_on_the_step_and_its_ops_not_on_initialisation(sample_traces):
    diff = diff_analyses(load_snapshot(sample_traces / "mlp"), load_snapshot(sample_traces / "mlp_slow"))
    verdict = run_checks(diff)
    assert not verdict.passed
    failed = {c.name for c in verdict.failed}
    assert "step_time" in failed and any(n.startswith("op:jit_train_step/") for n in failed)
    # every failure is about the step program (or the step itself), none about a one-off program
    assert all(c.program in (None, "jit_train_step") for c in verdict.failed), failed
    ungated = [c for c in verdict.checks if not c.gated]
    assert ungated and all(c.passed and c.program != "jit_train_step" for c in ungated)
    # some of them did grow beyond the budget: reported as such, not hidden
    assert any("over budget" in c.detail for c in ungated)
    gates = {g.program: g for g in verdict.programs}
    assert gates["jit_train_step"].gated and gates["jit_train_step"].why == "ran in 5 of 5 steps"
    text = diff_text(diff, verdict, colour_enabled=False)
    assert "gated programs: jit_train_step (ran in 5 of 5 steps)" in text
    data = diff_json(diff, verdict)
    assert {p["program"] for p in data["programs"] if p["gated"]} == {"jit_train_step"}
    assert sum(not c["gated"] for c in data["checks"]) == len(ungated)
    root = ET.fromstring(diff_junit(diff, verdict))
    skipped = {c.get("name") for c in root.iter("testcase") if c.find("skipped") is not None}
    assert skipped == {c.name for c in ungated}


def _snapshot(rng, programs: dict[str, tuple[int, int]], steps: int, op_ms: float) -> Snapshot:
    """Programs -> (program id, steps it ran in); one op per program that ran; a static peak per program."""
    rows, per_step, memory, ran = [], [], {}, []
    for name, (pid, steps_run) in programs.items():
        memory[f"static:{name}({pid})"] = int(rng.integers(1 << 20, 1 << 24))
        if steps_run == 0:
            continue
        rows.append({"module": name, "op": "fusion.1", "opcode": "fusion", "category": "", "shape": "", "dtype": "",
                     "occurrences": float(steps_run), "time_ps": op_ms * 1e9 * steps_run, "judged_time_ps": np.nan,
                     "roofline_time_ps": np.nan, "flops": 1e9, "bytes": 1e6, "collective_bytes": 0.0,
                     "bound": "compute", "source_file": "", "source_line": np.nan, "fingerprint": "", "op_name": ""})
        per_step += [{"module": name, "op": "fusion.1", "step": i, "time_ps": op_ms * 1e9} for i in range(steps_run)]
        ran.append({"module": name, "program_id": str(pid), "steps_run": steps_run, "outside": False})
    return Snapshot(kind="trace", label="x", ops=pd.DataFrame(rows, columns=OP_COLUMNS),
                    step_times_ps=np.full(steps, 1e10), op_steps=pd.DataFrame(per_step), memory=memory,
                    programs=pd.DataFrame(ran, columns=PROGRAM_COLUMNS))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_only_programs_run_every_step_are_gated_unless_named(seed):
    rng = np.random.default_rng(seed)
    steps = int(rng.integers(2, 7))
    names = [f"jit_{rng.integers(1 << 30):x}" for _ in range(6)]
    runs = {n: (int(rng.integers(1, 99)), int(rng.choice([0, 1, steps]))) for n in names}
    runs[names[0]] = (runs[names[0]][0], steps)     # at least one per-step program
    runs[names[1]] = (runs[names[1]][0], 0)         # and one that never ran
    base = _snapshot(np.random.default_rng(seed), runs, steps, 1.0)
    grown = {k: v * 3 for k, v in base.memory.items()}
    new = _snapshot(np.random.default_rng(seed), runs, steps, 3.0)
    new.memory = grown
    named = names[1]
    for budgets, extra in ((make_budgets(min_op_time_ps=0), set()),
                           (make_budgets(min_op_time_ps=0, programs=[named[:-2] + "*"]), {named})):
        verdict = run_checks(diff_analyses(base, new), budgets)
        every = {n for n, (_, s) in runs.items() if s == steps} | extra
        failed = {c.program.split("(")[0] for c in verdict.failed if c.program is not None}
        assert failed == every
        for c in verdict.checks:
            if c.program is not None:
                assert c.gated == (c.program.split("(")[0] in every)
        assert {g.program.split("(")[0] for g in verdict.programs if g.gated} == every


def test_an_op_rule_gates_the_op_of_a_one_off_program():
    rng = np.random.default_rng(7)
    runs = {"jit_step": (1, 4), "jit_init": (2, 1)}
    base, new = _snapshot(rng, runs, 4, 1.0), _snapshot(rng, runs, 4, 3.0)
    verdict = run_checks(diff_analyses(base, new), make_budgets(min_op_time_ps=0))
    assert {c.name for c in verdict.failed} >= {"op:jit_step/fusion.1"}
    assert "op:jit_init/fusion.1" not in {c.name for c in verdict.failed}
    budgets = make_budgets(min_op_time_ps=0, ops=[OpRule("jit_init/*", max_regression=0.5)])
    verdict = run_checks(diff_analyses(base, new), budgets)
    assert "op:jit_init/fusion.1" in {c.name for c in verdict.failed}


def test_programs_config_key_and_its_schema(tmp_path):
    path = tmp_path / "budgets.toml"
    path.write_text('[check]\nprograms = ["jit_init*", "jit_eval"]\n')
    assert make_budgets(path).programs == ["jit_init*", "jit_eval"]
    path.write_text('[check]\nprograms = [3]\n')
    with pytest.raises(UserError, match="programs"):
        make_budgets(path)


def test_programs_that_ran_counts_steps_per_program():
    ops = pd.DataFrame({"module": ["a", "a", "a", "b", "b"], "program_id": [5, 5, 5, -1, -1],
                        "step": [0, 1, 1, -1, 2]})
    got = programs_that_ran(ops)
    assert json.loads(got.to_json(orient="records")) == [
        {"module": "a", "program_id": "5", "steps_run": 2, "outside": False},
        {"module": "b", "program_id": "", "steps_run": 1, "outside": True}]
