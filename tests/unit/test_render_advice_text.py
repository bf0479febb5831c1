"""The advice blocks of the analyze report as text: the stragglers line says what one step can and cannot
tell, and long host event names (C++ kernels) are folded in the idle block (the JSON keeps them whole)."""

from __future__ import annotations

import random

import pandas as pd
import pytest

from traceview.advice.idle import CAUSES, IdleCauses
from traceview.advice.stragglers import STEP_COLUMNS, Stragglers
from traceview.advice.view import AdviceReport
from traceview.render.advice import advice_sections, idle_causes_json


def _steps(rng: random.Random, devices: list[str], n: int) -> pd.DataFrame:
    rows = [{"step": s, "devices": len(devices), "last_to_start": rng.choice(devices),
             "start_lag_ps": rng.randint(0, 10**6), "last_to_finish": rng.choice(devices),
             "finish_lag_ps": rng.randint(0, 10**6), "wait_ps": rng.randint(10**6, 10**9)} for s in range(n)]
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def _report(late: Stragglers, idle: IdleCauses | None = None) -> AdviceReport:
    return AdviceReport(idle=idle or IdleCauses(), stragglers=late, items=[], span_ps=1e9, active_devices=2)


def _section(report: AdviceReport, title: str) -> tuple[str, ...]:
    return next(s.lines for s in advice_sections(report) if s.title.startswith(title))


@pytest.mark.parametrize("seed", range(5))
def test_one_step_names_no_straggler_and_says_why(seed: int) -> None:
    """GPU-multi-worker: one step, GPU:6 last in it; "no device finished last in most steps (most often GPU:6:
    1 of 1)" contradicts itself."""
    rng = random.Random(seed)
    devices = [f"host{rng.randint(0, 9)}/GPU:{i}" for i in range(rng.randint(2, 8))]
    steps = _steps(rng, devices, 1)
    last = steps["last_to_finish"][0]
    (line,) = _section(_report(Stragglers(steps=steps, most_often_last=last, device_late_steps=1)), "Stragglers")
    assert line.startswith(f"one step only, too few to name a straggler ({last} finished last in it)")
    assert "most steps" not in line and "1 of 1" not in line and "at the step's end" in line


def test_several_steps_keep_the_majority_wording() -> None:
    rng = random.Random(1)
    steps = _steps(rng, ["h/GPU:0", "h/GPU:1", "h/GPU:2"], 4)
    (line,) = _section(_report(Stragglers(steps=steps, most_often_last="h/GPU:1", device_late_steps=2)),
                       "Stragglers")
    assert line.startswith("no device finished last in most steps (most often h/GPU:1: 2 of 4)")
    assert "at the steps' ends" in line
    (line,) = _section(_report(Stragglers(steps=steps, device="h/GPU:2", most_often_last="h/GPU:2",
                                          device_late_steps=3)), "Stragglers")
    assert line.startswith("h/GPU:2 finished last in 3 of 4 steps")


def test_idle_block_folds_long_kernel_names_and_the_json_keeps_them() -> None:
    rng = random.Random(5)
    kernel = "void Eigen::internal::EigenMetaKernel<" + ", ".join(
        f"Eigen::TensorMap<Eigen::Tensor<float, {rng.randint(1, 4)}>>" for _ in range(rng.randint(4, 9))) \
        + ">(Eigen::GpuDevice, long)"
    causes = dict.fromkeys(CAUSES, 0) | {"launch": 900}
    idle = IdleCauses(idle_ps=900, causes=causes, evidence={"launch": [
        {"name": "ExecutorState::Process", "time_ps": 500, "source": "host"},
        {"name": kernel, "time_ps": 400, "source": "host"}]})
    (line,) = _section(_report(Stragglers(), idle), "Why the devices were idle")
    assert line.endswith("; ExecutorState::Process, void Eigen::internal::EigenMetaKernel<...>(...)")
    assert idle_causes_json(idle)[CAUSES.index("launch")]["evidence"][1]["name"] == kernel
