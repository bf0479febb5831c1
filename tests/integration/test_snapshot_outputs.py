"""scripts/snapshot_outputs.py: one process, a pool and the table cache write the same bytes for a sample, and
``--compare`` catches one changed byte in a snapshot (the refactor's byte-identity check relies on both).
The compare tests use ``--no-run`` (compare the snapshot already written) so the CLI runs only five times."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "snapshot_outputs.py"
INPUT = "sample-sharded"


def _load_script():
    spec = importlib.util.spec_from_file_location("snapshot_outputs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("snapshot_outputs", module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _snapshot(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--only", INPUT,
                           "--commands", "analyze.json", *extra], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory, sample_traces) -> Path:
    """One snapshot of the sharded sample's analyze.json: one process, a pool, and the three cache runs."""
    out = tmp_path_factory.mktemp("snap") / "a"
    done = _snapshot(out, "--modes", "one,pool,cache")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "modes: compared 16 files with mode one's: 0 differ" in done.stdout, done.stdout
    return out


def test_modes_write_the_same_bytes(snapshot):
    modes = ("one", "pool", "cache_cold", "cache_tables", "cache_results")
    outputs = [(snapshot / m / INPUT / "analyze.json").read_bytes() for m in modes]
    assert all(o == outputs[0] for o in outputs)
    assert (snapshot / "one" / INPUT / "analyze.json.rc").read_text() == "0\n"
    report = json.loads(outputs[0])
    assert report["ops"], "an analysis with no ops compares nothing"
    # the input's path is written in the tree-independent form, the flags of the mode left out
    assert report["source"]["path"] == "<SAMPLES>/sharded"
    assert json.loads((snapshot / "pool" / INPUT / "analyze.json.args").read_text()) == \
        ["analyze", "<SAMPLES>/sharded", "--format", "json"]


def test_compare_finds_one_changed_byte(snapshot, tmp_path):
    base = tmp_path / "base"
    shutil.copytree(snapshot, base)
    same = _snapshot(snapshot, "--no-run", "--compare", str(base))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "compared 20 files" in same.stdout and ": 0 differ, 0 missing" in same.stdout, same.stdout

    target = base / "one" / INPUT / "analyze.json"
    data = bytearray(target.read_bytes())
    at = data.index(b'"ops"') + 2           # one letter of a key: "ops" -> "oqs"
    data[at] += 1
    target.write_bytes(bytes(data))
    changed = _snapshot(snapshot, "--no-run", "--compare", str(base))
    assert changed.returncode == 1, changed.stdout
    assert f"DIFF one/{INPUT}/analyze.json" in changed.stdout
    assert "1 differ, 0 missing" in changed.stdout
    lines = [line.strip() for line in changed.stdout.splitlines()]
    assert any(line.startswith("-") and '"oqs"' in line for line in lines), changed.stdout
    assert any(line.startswith("+") and '"ops"' in line for line in lines), changed.stdout


def test_compare_counts_a_missing_file_and_modes_disagreeing(tmp_path, capsys):
    module = _load_script()
    for mode, text in (("one", "a\n"), ("pool", "b\n")):
        (tmp_path / "new" / mode / "x").mkdir(parents=True)
        (tmp_path / "new" / mode / "x" / "out.txt").write_text(text)
    assert module.compare_modes(tmp_path / "new", 5) == 1
    assert "DIFF pool/x/out.txt" in capsys.readouterr().out
    shutil.copytree(tmp_path / "new", tmp_path / "base")
    (tmp_path / "base" / "one" / "x" / "gone.txt").write_text("kept only in the base\n")
    assert module.compare_trees(tmp_path / "base", tmp_path / "new", 5) == 1
    assert "MISSING" in capsys.readouterr().out
