"""Memory in CI: `diff` / `check` compare peak memory (runtime per allocator, static per module) with a budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traceview.cli import main
from traceview.errors import UserError
from traceview.regress.budgets import MemoryBudget, parse_memory_budget

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
# Let only the memory checks decide: the wider MLP also has more FLOPs and bytes.
LOOSE = ["--max-flops-increase", "1000%", "--max-bytes-increase", "1000%", "--max-collective-increase", "1000%"]


def test_parse_memory_budget():
    assert parse_memory_budget("5%") == MemoryBudget(fraction=0.05)
    assert parse_memory_budget(0.1) == MemoryBudget(fraction=0.1)
    assert parse_memory_budget("256MiB") == MemoryBudget(bytes=256 * 2**20)
    assert parse_memory_budget("1 GB") == MemoryBudget(bytes=1e9)
    assert parse_memory_budget("4096b") == MemoryBudget(bytes=4096)
    for bad in ("lots", "-1MiB", "5 parsecs", True):
        with pytest.raises(UserError):
            parse_memory_budget(bad, "--max-peak-memory-increase")
    assert MemoryBudget(bytes=100).limit_for(1000) == 0.1


def _dumps() -> tuple[Path, Path]:
    base, new = SAMPLES / "mlp" / "hlo", SAMPLES / "mlp_slow" / "hlo"
    if not (any(base.glob("*after_optimizations.hlo.pb")) and any(new.glob("*after_optimizations.hlo.pb"))):
        pytest.skip("the mlp / mlp_slow samples have no after-optimizations HLO protos")
    return base, new


def _check(capsys, *args: str) -> tuple[int, dict]:
    code = main(["check", *args, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_static_peak_growth_fails_check_from_hlo_dumps_alone(capsys):
    base, new = _dumps()
    # MLP 512-1024-1024-128 -> 512-2048-2048-128: the static peak grows from 17,581,124 to 51,151,940 bytes
    # (both worked out by hand from the shapes in test_memory.py's way: parameters, outputs, activations).
    code, report = _check(capsys, str(new), "--baseline", str(base), *LOOSE)
    assert code == 1 and report["verdict"] == "fail"
    (mem,) = [c for c in report["checks"] if c["name"].startswith("peak_memory:")]
    assert mem["name"] == "peak_memory:static:jit_train_step"
    assert mem["baseline"] == 17581124 and mem["current"] == 51151940 and not mem["passed"]
    assert mem["change"] == pytest.approx(51151940 / 17581124 - 1)
    # An absolute budget: the peak grew by 33,570,816 bytes (32.02 MiB).
    code, report = _check(capsys, str(new), "--baseline", str(base), *LOOSE, "--max-peak-memory-increase", "33MiB")
    assert code == 0 and report["verdict"] == "pass"
    code, _ = _check(capsys, str(new), "--baseline", str(base), *LOOSE, "--max-peak-memory-increase", "32MiB")
    assert code == 1
    code, _ = _check(capsys, str(new), "--baseline", str(base), *LOOSE, "--max-peak-memory-increase", "200%")
    assert code == 0
    # and a shrinking peak always passes
    code, report = _check(capsys, str(base), "--baseline", str(new), *LOOSE)
    assert code == 0


def test_memory_budget_from_the_config_file(capsys, tmp_path):
    base, new = _dumps()
    config = tmp_path / "budgets.toml"
    config.write_text('[check]\nmax_peak_memory_increase = "40MiB"\nmax_flops_increase = "1000%"\n'
                      'max_bytes_increase = "1000%"\n')
    code, _ = _check(capsys, str(new), "--baseline", str(base), "--config", str(config))
    assert code == 0
    config.write_text('[check]\nmax_peak_memory_increase = "lots"\n')
    assert main(["check", str(new), "--baseline", str(base), "--config", str(config)]) == 2
    assert "max_peak_memory_increase" in capsys.readouterr().err


def test_runtime_peak_per_allocator_from_traces(capsys):
    gemm = SHARED / "AMD-AGI-TraceLens" / "jax08_gemm" / "tw003.xplane.pb"
    elementwise = SHARED / "AMD-AGI-TraceLens" / "jax08_elementwise" / "tw003.xplane.pb"
    if not (gemm.exists() and elementwise.exists()):
        pytest.skip("the MI300X traces are not available in ../shared/traces")
    code, report = _check(capsys, str(gemm), "--baseline", str(gemm))
    checks = {c["name"]: c for c in report["checks"]}
    assert code == 0 and checks["peak_memory:runtime:GPU_0_bfc"]["current"] == 482345216   # XProf's peak
    assert "peak_memory:runtime:xla_gpu_host_bfc" not in checks          # pinned host memory is not HBM
    assert "peak_memory:static:jit_dot(49)" in checks
    # The elementwise capture peaks at 671,286,528 bytes (XProf), 39% above the GEMM's 482,345,216.
    main(["diff", str(gemm), str(elementwise), "--format", "json", "--max-step-regression", "1000%",
          "--max-op-regression", "1000%"])
    report = json.loads(capsys.readouterr().out)
    runtime = next(c for c in report["checks"] if c["name"] == "peak_memory:runtime:GPU_0_bfc")
    assert runtime["baseline"] == 482345216 and runtime["current"] == 671286528 and not runtime["passed"]
