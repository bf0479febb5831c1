"""The house: the package root holds the ground floor only, every package has its layer, and the
import-linter contracts in pyproject.toml hold (docs/architecture.md)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
GROUND_FLOOR = {"__init__", "__main__", "cache_root", "cli", "errors", "units", "vocabulary", "version"}
MAX_ROOT_MODULES = 8


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_package_root_holds_the_ground_floor_only():
    modules = {p.stem for p in (ROOT / "traceview").glob("*.py")}
    assert len(modules) <= MAX_ROOT_MODULES, sorted(modules)
    assert modules <= GROUND_FLOOR, f"move {sorted(modules - GROUND_FLOOR)} into the sub-package of its stage"


def test_every_package_sits_on_a_layer():
    """A package missing from the layers contract would be free to import anything: each one is listed."""
    (layers,) = [c["layers"] for c in _contracts() if c["type"] == "layers" and "containers" not in c]   # the top one
    listed = {name.strip() for line in layers for name in line.split("|")}
    packages = {f"traceview.{p.parent.name}" for p in (ROOT / "traceview").glob("*/__init__.py")}
    packages |= {"traceview.parsers", "traceview.dashboards"}
    ground = {f"traceview.{m}" for m in GROUND_FLOOR - {"__init__", "__main__"}}
    assert packages | ground <= listed, sorted((packages | ground) - listed)


def test_the_import_contracts_hold():
    """Layers follow the data flow (no import runs up a layer) and no import cycle, inside a package
    too (the acyclic_siblings contract): scripts/lint_imports.py, as .ci/run runs it."""
    if shutil.which("lint-imports", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    assert {c["type"] for c in _contracts()} >= {"layers", "acyclic_siblings"}
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "lint_imports.py")], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-1000:]
