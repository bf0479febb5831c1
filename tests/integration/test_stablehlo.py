"""StableHLO text (parsers/hlo/stablehlo.py) costed against XLA's own cost analysis of the same lowering."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import traceview.parsers.hlo.stablehlo as stablehlo
from traceview.api.hlo import hlo

LOWER = r'''
import json, sys
import jax, jax.numpy as jnp

def loss(p, x, y):
    h = jax.nn.gelu(x @ p["w1"] + p["b1"])
    return jnp.mean((h @ p["w2"] - y) ** 2)

def train_step(p, x, y):
    l, g = jax.value_and_grad(loss)(p, x, y)
    return jax.tree.map(lambda a, b: a - 1e-3 * b, p, g), l

p = {"w1": jnp.ones((256, 512)), "b1": jnp.zeros((512,)), "w2": jnp.ones((512, 64))}
lowered = jax.jit(train_step).lower(p, jnp.ones((128, 256)), jnp.ones((128, 64)))
open(sys.argv[1], "w").write(lowered.as_text())
cost = lowered.cost_analysis()
cost = cost[0] if isinstance(cost, list) else cost
json.dump({k: float(v) for k, v in cost.items()}, open(sys.argv[2], "w"))
'''


@pytest.fixture(scope="module")
def lowered_train_step(tmp_path_factory) -> tuple[Path, dict]:
    """A train step's StableHLO (as Levanter logs it: train_step.hlo.txt) and XLA's cost analysis of it."""
    pytest.importorskip("jax")
    work = tmp_path_factory.mktemp("stablehlo")
    text, cost = work / "train_step.hlo.txt", work / "cost.json"
    subprocess.run([sys.executable, "-c", LOWER, str(text), str(cost)], check=True, timeout=300,
                   env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert text.read_text().startswith("module @jit_train_step")
    return text, json.loads(cost.read_text())


def test_stablehlo_train_step_is_costed_like_xla(lowered_train_step) -> None:
    text, xla = lowered_train_step
    report = hlo(text)
    (module,) = report.to_json()["modules"]
    assert module["name"] == "jit_train_step" and module["stage"] == "lowered"
    assert module["flops"] == pytest.approx(xla["flops"], rel=1e-6)
    assert module["transcendentals"] == pytest.approx(xla["transcendentals"], rel=1e-6)
    assert module["bytes_accessed"] == pytest.approx(xla["bytes accessed"], rel=1e-6)
    assert any("before XLA's optimizations" in w for w in report.warnings)


def test_stablehlo_in_a_dump_folder_and_as_mlir(lowered_train_step, tmp_path: Path) -> None:
    text, xla = lowered_train_step
    (tmp_path / "train_step.mlir").write_text(text.read_text())
    proc = subprocess.run([sys.executable, "-m", "traceview", "hlo", str(tmp_path / "train_step.mlir"),
                           "--format", "json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["modules"][0]["flops"] == pytest.approx(xla["flops"], rel=1e-6)


def test_without_jax_stablehlo_is_one_line_naming_what_to_install(lowered_train_step, monkeypatch, capsys) -> None:
    from traceview.cli import main

    text, _ = lowered_train_step
    monkeypatch.setattr(stablehlo, "_has_converter", lambda: False)
    assert main(["hlo", str(text)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "StableHLO" in err[0] and "pip install" in err[0] and str(text) in err[0]


def test_mlir_jaxlib_rejects_is_a_clean_error(tmp_path: Path, capsys) -> None:
    pytest.importorskip("jax")
    from traceview.cli import main

    bad = tmp_path / "bad.mlir"
    bad.write_text("module @m {\n  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
                   "    %0 = stablehlo.add %arg0, %undefined : tensor<4xf32>\n    return %0 : tensor<4xf32>\n  }\n}\n")
    assert main(["hlo", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "jaxlib cannot convert" in err[0]


def test_mhlo_text_is_costed_by_hand(tmp_path: Path) -> None:
    """MHLO (the dialect older tools print) goes through the same converter: a [4,8]x[8,2] dot is
    2*4*8*2 = 128 FLOPs, the add of its [4,2] result 8 more."""
    pytest.importorskip("jax")
    path = tmp_path / "m.mlir"
    path.write_text('module @m {\n  func.func @main(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) -> tensor<4x2xf32> {\n'
                    '    %0 = "mhlo.dot"(%a, %b) : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>\n'
                    '    %1 = mhlo.add %0, %0 : tensor<4x2xf32>\n    return %1 : tensor<4x2xf32>\n  }\n}\n')
    (module,) = hlo(path).to_json()["modules"]
    assert module["stage"] == "lowered" and module["flops"] == 2 * 4 * 8 * 2 + 4 * 2


# ---------------------------------------------------------------- hostile StableHLO: never a crash, one line

HOSTILE = ["calls itself", "mutual recursion", "attribute 100000 deep", "tuple type 100000 deep",
           "fused location 100000 deep", "case regions", "module nesting", "sharding '{{{'",
           "sharding '{devices=[99999999,9'"]     # the mutator names a sharding by its first 20 characters


def _hostile(what: str) -> bytes:
    """The fuzzer's StableHLO edit named `what`, drawn from its mutator until it comes up."""
    import random

    from tests.support.fuzz_hostile import stablehlo_hostile
    from tests.support.fuzzing import STABLEHLO

    rng = random.Random(0)
    for _ in range(2000):
        name, data, expect = stablehlo_hostile(rng, STABLEHLO.encode())
        if name == what:
            assert expect == "refused"
            return data
    raise AssertionError(f"the mutator never made {what!r}")


@pytest.mark.parametrize("what", HOSTILE)
def test_hostile_stablehlo_is_one_line_naming_the_file(what: str, tmp_path: Path) -> None:
    """Each of these crashed traceview (SIGSEGV), or was accepted silently, or printed a page of XLA's log."""
    pytest.importorskip("jax")
    path = tmp_path / "hostile.mlir"
    path.write_bytes(_hostile(what))
    done = subprocess.run([sys.executable, "-m", "traceview", "hlo", str(path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, (what, done.returncode, done.stderr[-500:])
    assert done.stderr.count("\n") == 1 and str(path) in done.stderr, done.stderr[-500:]
    assert "RET_CHECK" not in done.stderr


def test_the_converter_runs_where_its_crash_cannot_take_traceview_down(tmp_path: Path, monkeypatch) -> None:
    """With the bounds switched off, a module that recurses kills jaxlib's converter: in its child process,
    so this process lives on and says so in one line."""
    pytest.importorskip("jax")
    monkeypatch.setattr(stablehlo, "check_mlir", lambda text, where: None)
    with pytest.raises(stablehlo.HloError, match=r"hostile\.mlir: jaxlib's StableHLO converter died .*signal"):
        stablehlo.mlir_to_hlo_text(_hostile("calls itself").decode(), str(tmp_path / "hostile.mlir"))


def test_valid_shardings_are_kept(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    from tests.support.fuzzing import STABLEHLO

    sharded = STABLEHLO.replace("%arg0: tensor<8x16xf32>",
                                '%arg0: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}')
    path = tmp_path / "sharded.mlir"
    path.write_text(sharded)
    from traceview.parsers.hlo.dump import read_hlo_file

    module = read_hlo_file(path)
    assert any("devices=[2,1]" in (i.attributes.get("sharding") or "")
               for c in module.computations.values() for i in c.instructions)
