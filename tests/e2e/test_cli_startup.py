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


def test_a_command_module_that_fails_to_import_is_a_bug_not_a_missing_command(tmp_path):
    """A command whose module does not import (a dependency missing, a module not shipped) fails loudly:
    one line saying it is a bug, exit 3, the traceback with --debug; `--version` still answers."""
    probe = ("import sys\n"
             "from traceview import cli\n"
             "cli.COMMANDS = cli.COMMANDS + ('not_shipped',)\n"
             "sys.exit(cli.main(sys.argv[1:]))\n")
    for argv, code in ((["--help"], 3), (["not_shipped", "x"], 3), (["--debug", "--help"], 3), (["--version"], 0)):
        res = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=60)
        assert res.returncode == code, (argv, res.stderr)
        if code == 3:
            assert res.stderr.splitlines()[-1].startswith("internal error in traceview"), res.stderr
            assert "traceview.commands.not_shipped" in res.stderr.splitlines()[-1]
            assert ("Traceback" in res.stderr) == ("--debug" in argv)
    ok = subprocess.run([sys.executable, "-c", probe, "hardware", "--format", "json"], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr   # the other commands import only themselves: unaffected
