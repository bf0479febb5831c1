"""Every sub-package and data folder of traceview is listed in pyproject.toml, so a wheel (not only an
editable install) ships it."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


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
