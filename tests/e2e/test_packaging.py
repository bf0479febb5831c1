"""Packaging: every sub-package and data folder of traceview is listed in pyproject.toml; the project's
build backend makes a wheel and an editable install that hold parsers/ and dashboards/ as
traceview.parsers and traceview.dashboards, install no top-level module of those names, and raise no
warning pip would relay (docs/architecture.md, "Packaging")."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

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


_BUILD = """
import json, sys, warnings
sys.path[:0] = {backend_path!r}
hooks = __import__({backend!r})
with warnings.catch_warnings(record=True) as seen:
    name = getattr(hooks, sys.argv[1])(sys.argv[2])
print(json.dumps({{"name": name, "warnings": [f"{{w.category.__name__}}: {{w.message}}" for w in seen]}}))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A wheel and an editable wheel built by the project's own backend from a copy of the sources (its
    hooks called as pip calls them, each in a process of its own, with this environment's setuptools:
    no network). -> (folder, sources, {hook: (wheel path, warnings raised)})."""
    pytest.importorskip("setuptools")
    tmp = tmp_path_factory.mktemp("packaging")
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("traceview", "parsers", "dashboards", "build_backend"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    backend = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    probe = _BUILD.format(backend=backend["build-backend"], backend_path=[str(src / p) for p in backend["backend-path"]])
    out = {}
    for hook in ("build_wheel", "build_editable"):
        (tmp / hook).mkdir()
        res = subprocess.run([sys.executable, "-c", probe, hook, str(tmp / hook)], cwd=src,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        made = json.loads(res.stdout.strip().splitlines()[-1])
        out[hook] = (tmp / hook / made["name"], made["warnings"])
    return tmp, src, out


def test_the_wheel_ships_parsers_and_dashboards_inside_traceview_only(built):
    _, _, out = built
    wheel, warned = out["build_wheel"]
    assert warned == []                   # what pip would relay, even under -q
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"traceview"}          # no top-level parsers, dashboards, build_backend or tests
    for needed in ("traceview/parsers/xspace/reader.py", "traceview/dashboards/app.py", "traceview/data/hardware.json",
                   "traceview/schemas/analyze.schema.json", "traceview/py.typed", "traceview/trace/read.py"):
        assert needed in names
    # The plain install is the fast one: numba is required (no extra), where it has wheels.
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [line for line in zipfile.ZipFile(wheel).read(meta).decode().splitlines()
                if line.startswith("Requires-Dist: numba")]
    assert any("extra ==" not in r and "platform_machine" in r for r in requires), requires


def test_the_editable_install_maps_the_folders_and_exposes_no_top_level_module(built):
    """The editable wheel's .pth and finder, on a path of their own (no other site directory, run from
    outside the sources): traceview.parsers and traceview.dashboards are the top-level folders."""
    tmp, src, out = built
    wheel, warned = out["build_editable"]
    assert warned == []
    site_dir = tmp / "site"
    zipfile.ZipFile(wheel).extractall(site_dir)
    probe = ("import importlib.util, site, sys\n"
             f"site.addsitedir({str(site_dir)!r})\n"
             "import traceview.parsers, traceview.dashboards, traceview.version\n"
             "print(traceview.parsers.__path__[0]); print(traceview.dashboards.__path__[0])\n"
             "print(importlib.util.find_spec('parsers'), importlib.util.find_spec('dashboards'))\n")
    res = subprocess.run([sys.executable, "-S", "-c", probe], cwd=tmp, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:3] == [str(src / "parsers"), str(src / "dashboards"), "None None"]
