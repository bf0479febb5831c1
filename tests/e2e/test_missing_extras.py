"""A command whose optional packages are not installed says, in one line and exit 2, which extra to install.

The README's first install (`.[dashboard,plot]`) has no history extra; the history commands then must
name `traceview[history]`, never report an internal error. The environment without the extra is real: the
test's own site-packages with the extra's packages left out, in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from traceview.errors import UserError, missing_extra

REPO = Path(__file__).resolve().parents[2]
HISTORY_PACKAGES = ("sqlalchemy", "scipy", "psycopg", "ruptures")


def _site_without(tmp_path: Path, left_out: tuple[str, ...]) -> Path:
    """A site folder holding every installed distribution but those named (links to the real ones)."""
    real = Path(sysconfig.get_paths()["purelib"])
    site = tmp_path / "site"
    site.mkdir()
    for entry in real.iterdir():
        if not entry.name.lower().startswith(left_out):
            (site / entry.name).symlink_to(entry)
    return site


def _run(site: Path, *argv: str) -> subprocess.CompletedProcess:
    code = ("import site, sys\n"
            f"site.addsitedir({str(site)!r})\n"
            "from traceview.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    return subprocess.run([sys.executable, "-S", "-c", code, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_history_commands_without_the_history_extra_name_it(sample_traces, tmp_path):
    site = _site_without(tmp_path, HISTORY_PACKAGES)
    check = _run(site, "-c", "import sqlalchemy")   # the environment really lacks the package
    assert check.returncode != 0
    db = tmp_path / "runs.db"
    trace = str(sample_traces / "mlp")
    for argv in (["history", "add", str(db), trace, "--label", "L"], ["history", "report", str(db)],
                 ["check", trace, "--history", str(db)], ["dashboard", trace, "--history", str(db)]):
        done = _run(site, *argv)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (argv, done.stderr[-500:])
        assert len(lines) == 1 and "pip install 'traceview[history]'" in lines[0], (argv, lines)
        assert "internal error" not in done.stderr
    assert not db.exists()


def test_only_optional_packages_are_the_users_to_install():
    missing = missing_extra(ModuleNotFoundError("No module named 'matplotlib.pyplot'", name="matplotlib.pyplot"),
                            "analyze")
    assert isinstance(missing, UserError) and "traceview[plot]" in str(missing) and "analyze" in str(missing)
    # a module of traceview itself, or a core dependency, missing is a broken install: a bug, not an extra
    assert missing_extra(ModuleNotFoundError("No module named 'pandas'", name="pandas")) is None
    assert missing_extra(ImportError("cannot import name 'x' from 'scipy'", name="scipy")) is None


def test_a_missing_core_module_is_still_an_internal_error(monkeypatch, capsys):
    from traceview import cli
    from traceview.commands import runner

    def broken(_args):
        raise ModuleNotFoundError("No module named 'pandas'", name="pandas")

    monkeypatch.setattr(runner, "run_command", broken)
    assert cli.main(["hardware"]) == 3
    assert "internal error" in capsys.readouterr().err


@pytest.mark.parametrize("package", sorted({"sqlalchemy", "streamlit", "matplotlib", "jax", "fsspec", "dask"}))
def test_every_named_extra_exists_in_pyproject(package):
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the project's own dependency
        import tomli as tomllib

    from traceview.errors import EXTRAS

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert EXTRAS[package] in extras
    assert any(req.lower().startswith(package.replace("_", "-")) for req in extras[EXTRAS[package]])
