"""Every sub-package and data folder of traceview is listed in pyproject.toml, so a wheel (not only an
editable install) ships it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_and_data_folder_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {"traceview"}
    for folder, name in ((ROOT / "traceview", "traceview"), (ROOT / "parsers", "traceview.parsers"),
                         (ROOT / "dashboards", "traceview.dashboards")):
        found.add(name)
        for sub in folder.rglob("*"):
            if sub.is_dir() and "__pycache__" not in sub.parts and any(sub.glob("*.py")) or \
                    sub.is_dir() and any(sub.glob("*.json")):
                found.add(name + "." + ".".join(sub.relative_to(folder).parts))
    assert found - listed == set()
    data = config["package-data"]
    assert data["traceview.data"] == ["*.json"] and data["traceview.schemas"] == ["*.json"]


def test_the_build_backend_drops_only_setuptools_informational_notice():
    """pip relays a build backend's warnings even under -q: the in-tree backend silences setuptools'
    informational editable-install notice and nothing else, and still exposes the PEP 517 hooks."""
    backend = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    probe = (
        "import importlib, warnings\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        f"    hooks = importlib.import_module({backend['build-backend']!r})\n"
        "    from setuptools.warnings import InformationOnly, SetuptoolsWarning\n"
        "    InformationOnly.emit('Editable installation.', 'notice')\n"
        "    SetuptoolsWarning.emit('Something to act on.', 'warning')\n"
        "print(sorted(type(w.message).__name__ for w in seen))\n"
        "print(all(callable(getattr(hooks, h)) for h in ('build_wheel', 'build_sdist', 'build_editable')))\n"
    )
    paths = [str(ROOT / p) for p in backend["backend-path"]]
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.path[:0] = {paths!r}\n" + probe],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "['SetuptoolsWarning']" and out[1] == "True"
