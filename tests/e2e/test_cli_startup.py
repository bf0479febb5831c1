"""`traceview --version` and `--help` import no heavy module (pandas, numpy): the CLI starts fast.

Speed itself is measured by benchmarks/bench_scale.py; here only what is imported.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import sys
from traceview.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(sorted(m for m in ("pandas", "numpy", "google.protobuf") if m in sys.modules), file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["analyze", "--help"], ["diff", "--help"],
                                  ["check", "--help"], ["roofline", "--help"], ["hlo", "--help"]])
def test_help_and_version_import_no_heavy_module(argv):
    res = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip(), res.stderr  # it printed the help / version
    assert res.stderr.strip().splitlines()[-1] == "[]"
