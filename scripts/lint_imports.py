"""Check the import-linter contracts in pyproject.toml on the package as it is installed.

`parsers/` and `dashboards/` live at the top of the repository but import as
`traceview.parsers` and `traceview.dashboards` (pyproject's package-dir). import-linter
finds a package's modules by walking its folder, so it is run on a copy laid out as
installed: traceview/, with parsers/ and dashboards/ inside it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYOUT = {"traceview": "traceview", "parsers": "traceview/parsers", "dashboards": "traceview/dashboards"}


def main() -> int:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    with tempfile.TemporaryDirectory(prefix="traceview-layers-") as tmp:
        for source, dest in LAYOUT.items():
            shutil.copytree(ROOT / source, Path(tmp) / dest, ignore=ignore)
        env = dict(os.environ, PYTHONPATH=tmp)
        lint = Path(sys.executable).with_name("lint-imports")
        return subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                              cwd=tmp, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
