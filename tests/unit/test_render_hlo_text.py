"""The hlo report: modules of one name (a dump compiles jit__normal once per shape) told apart by their
program id, a cut shape says it was cut, and the CSV writes counts as integers."""

from __future__ import annotations

import csv
import io
import random
from types import SimpleNamespace

import pandas as pd
import pytest

from traceview.render.hlo import hlo_csv, hlo_text


def _costs(rng: random.Random, module: str, n: int, shape: str | None = None) -> pd.DataFrame:
    return pd.DataFrame({
        "module": [module] * n, "computation": ["main"] * n, "name": [f"fusion.{i}" for i in range(n)],
        "opcode": ["fusion"] * n, "category": ["loop fusion"] * n,
        "shape": [shape or f"f32[{rng.randint(1, 512)},{rng.randint(1, 512)}]" for _ in range(n)],
        "dtype": ["f32"] * n, "flops": [float(rng.randint(0, 10**9)) for _ in range(n)],
        "bytes_accessed": [float(rng.randint(1, 10**8)) for _ in range(n)], "collective_kind": [""] * n,
        "group_size": [float("nan")] * n, "payload_bytes": [0.0] * n, "unknown": [False] * n,
        "cost_lower_bound": [False] * n, "source_line": [float(rng.randint(1, 900)) for _ in range(n)]})


def _report(rng: random.Random, names: list[str]) -> list:
    report = []
    for name in names:
        costs = _costs(rng, name, rng.randint(1, 4))
        module = SimpleNamespace(name=name, stage="after", program_id=rng.randint(1, 50_000), file="x.pb")
        totals = {"flops": float(costs["flops"].sum()), "transcendentals": 0.0,
                  "bytes_accessed": float(costs["bytes_accessed"].sum()), "flops_per_step": 0.0,
                  "bytes_accessed_per_step": 0.0}
        report.append((module, costs, totals))
    return report


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("markdown", [False, True])
def test_modules_of_one_name_are_told_apart_by_program_id(seed: int, markdown: bool) -> None:
    """h200 kernels: three rows "jit__normal" with other FLOPs, and three sections of that title."""
    rng = random.Random(seed)
    shared = rng.choice(["jit__normal", "jit_multiply", "jit_convert_element_type"])
    names = [shared] * rng.randint(2, 4) + ["jit_train_step"]
    rng.shuffle(names)
    report = _report(rng, names)
    text = hlo_text(report, [], markdown=markdown).replace("\\_", "_")
    for module, _, _ in report:
        label = f"{module.name}({module.program_id})" if module.name == shared else module.name
        assert (f"| {label} |" if markdown else f"\n{label} ") in text
        assert f"{label}: top 10 instructions" in text
    assert "jit_train_step(" not in text


def test_a_cut_shape_says_so() -> None:
    rng = random.Random(1)
    long_shape = "(" + ", ".join(f"bf16[{rng.randint(100, 999)},{rng.randint(100, 999)}]" for _ in range(6)) + ")"
    costs = _costs(rng, "jit_f", 1, shape=long_shape)
    module = SimpleNamespace(name="jit_f", stage="after", program_id=3, file="x.pb")
    text = hlo_text([(module, costs, {"flops": 0.0, "transcendentals": 0.0, "bytes_accessed": 0.0,
                                      "flops_per_step": 0.0})], [])
    assert long_shape[:37] + "..." in text and long_shape[:41] not in text


def test_the_csv_writes_source_lines_and_counts_as_integers() -> None:
    rng = random.Random(2)
    rows = list(csv.DictReader(io.StringIO(hlo_csv(_report(rng, ["jit_a", "jit_b"])))))
    assert rows and all("." not in r["source_line"] for r in rows)
    assert all(r["flops"].isdigit() for r in rows)
