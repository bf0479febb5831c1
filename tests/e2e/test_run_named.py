"""Every command names the run it read when PATH holds several (and none was named with --run)."""

from __future__ import annotations

import json
import shutil

import pytest

from traceview.cli import main
from traceview.parsers.discover import list_runs


@pytest.fixture(scope="module")
def two_runs(sample_traces, tmp_path_factory):
    """A log dir of two runs (copies of two samples' run folders)."""
    logs = tmp_path_factory.mktemp("logs") / "plugins" / "profile"
    for sample in ("mlp", "mlp_slow"):
        (run,) = (sample_traces / sample / "plugins" / "profile").iterdir()
        shutil.copytree(run, logs / f"{sample}_{run.name}")
    return logs.parent.parent


@pytest.mark.parametrize("command", ["analyze", "scopes", "memory", "parallelism", "roofline", "inference",
                                     "whatif"])
def test_each_command_names_the_run_it_read(two_runs, capsys, command):
    newest = list_runs(two_runs)[-1].name
    assert main([command, str(two_runs)]) in (0, 1)
    err = capsys.readouterr().err
    assert f"holds 2 runs: reading the newest, {newest}" in err
    (other,) = [r.name for r in list_runs(two_runs) if r.name != newest]
    assert main([command, str(two_runs), "--run", other]) in (0, 1)
    assert "holds 2 runs" not in capsys.readouterr().err     # named: nothing to say


def test_the_json_says_it_too(two_runs, capsys):
    newest = list_runs(two_runs)[-1].name
    assert main(["analyze", str(two_runs), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"]["run"] == newest
    assert any(f"read the newest, {newest}" in w for w in data["warnings"])


def test_diff_names_both_sides_runs(two_runs, sample_traces, capsys):
    main(["diff", str(two_runs), str(sample_traces / "mlp")])
    err = capsys.readouterr().err
    assert err.count("holds 2 runs") == 1
