"""The README's example outputs come from the code: run each `$ traceview ...` block and compare, or rewrite.

A fenced block of README.md (or of a page of docs/ listed in DOCUMENTS) whose
first line is ``$ traceview ARGS`` is an example: the lines after it are what
the command prints. ``python scripts/readme_examples.py`` runs every example
and prints a diff of those that no longer match (exit 1); ``--write`` puts the
commands' output in the files instead. ``tests/e2e/test_readme_examples.py`` runs the check, so a
change of the output fails the suite until the README shows it.

The commands run as a user runs them from a fresh clone: from the repository
root, without colour, without the finished-output cache.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCUMENTS = (README, ROOT / "docs" / "scopes.md", ROOT / "docs" / "ci.md")
_BLOCK = re.compile(r"^```[^\n]*\n(\$ traceview [^\n]*)\n(.*?)^```$", re.S | re.M)


@dataclass(frozen=True)
class Example:
    """One example: the command line as written, the output the README shows, where that output is."""

    command: str
    shown: str
    start: int          # offsets of `shown` in the README text
    end: int

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.command.removeprefix("$ traceview "))


def examples(text: str) -> list[Example]:
    """The README's examples, in order."""
    return [Example(m.group(1), m.group(2), m.start(2), m.end(2)) for m in _BLOCK.finditer(text)]


def run(example: Example) -> str:
    """What the example's command prints today (stdout; a command that fails is an error, not an output)."""
    env = {**os.environ, "TRACEVIEW_NO_RESULT_CACHE": "1", "NO_COLOR": "1", "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "traceview", *example.argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode not in (0, 1):           # 1: a regression found by diff / check, a valid example
        raise RuntimeError(f"{example.command} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def differences(text: str) -> list[str]:
    """A unified diff per example whose shown output is not what its command prints."""
    out = []
    for example in examples(text):
        printed = run(example)
        if printed != example.shown:
            out.append("".join(difflib.unified_diff(example.shown.splitlines(True), printed.splitlines(True),
                                                    f"README: {example.command}", "printed")))
    return out


def rewritten(text: str) -> str:
    """The README with every example's output replaced by what its command prints."""
    for example in reversed(examples(text)):       # from the end: earlier offsets stay valid
        text = text[:example.start] + run(example) + text[example.end:]
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="put the commands' output in the files")
    args = parser.parse_args(argv)
    found = 0
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        if args.write:
            document.write_text(rewritten(text), encoding="utf-8")
            continue
        for diff in differences(text):
            print(f"{document.relative_to(ROOT)}:\n{diff}")
            found += 1
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
