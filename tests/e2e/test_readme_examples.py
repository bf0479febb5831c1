"""The README's example outputs are what the commands print (scripts/readme_examples.py; `--write` updates)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("readme_examples", REPO_ROOT / "scripts" / "readme_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("readme_examples", module)   # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_the_readme_shows_examples_on_the_samples():
    script = _script()
    found = script.examples(script.README.read_text(encoding="utf-8"))
    assert found, "the README shows no `$ traceview ...` example"
    assert all("sample_traces/" in e.command for e in found)      # the project's own samples: never skipped


@pytest.mark.parametrize("document", ["README.md", "docs/scopes.md", "docs/ci.md"])
def test_each_example_is_what_its_command_prints(sample_traces, document):
    script = _script()
    assert REPO_ROOT / document in script.DOCUMENTS
    text = (REPO_ROOT / document).read_text(encoding="utf-8")
    assert script.examples(text)
    diffs = script.differences(text)
    assert not diffs, f"{document}: examples differ from the commands' output (python scripts/readme_examples.py " \
        "--write updates them):\n" + "\n".join(diffs)


def test_a_changed_output_is_found(tmp_path):
    """The check can fail: an example whose shown output is edited is reported."""
    script = _script()
    text = script.README.read_text(encoding="utf-8")
    first = script.examples(text)[0]
    edited = text[:first.start] + first.shown.replace("ms", "us", 1) + text[first.end:]
    if edited == text:
        pytest.fail("the first example shows no time to edit")
    assert len(script.differences(edited)) == 1
