"""The history store on a real PostgreSQL server (tests/support/postgres.py starts and stops one).

Skips, saying why, where Debian's `postgresql` is not installed; .ci/run installs it, so CI runs these.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.support.history import WRITER, env
from tests.support.postgres import find_binaries, postgres_server
from traceview.cli import main

sqlalchemy = pytest.importorskip("sqlalchemy", reason="the history needs the `history` extra")
pytest.importorskip("psycopg", reason="PostgreSQL needs psycopg (the `history` extra)")
pytest.importorskip("scipy", reason="the history needs the `history` extra")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server():
    binaries, reason = find_binaries()
    if binaries is None:
        pytest.skip(reason)
    with postgres_server() as url:
        yield url


_COUNT = 0


@pytest.fixture
def database(server) -> str:
    """A fresh database of the server, for one test."""
    global _COUNT
    _COUNT += 1
    name = f"history_{_COUNT}"
    engine = sqlalchemy.create_engine(server.replace("postgresql://", "postgresql+psycopg://"),
                                      isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    engine.dispose()
    return server.rsplit("/", 1)[0] + f"/{name}"


def _engine(url: str):
    return sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))


def test_series_on_postgres_finds_the_same_change(sample_traces, database, capsys):
    names = ["mlp", "mlp_repeat"] * 3 + ["mlp"] + ["mlp_slow"] * 5
    for i, name in enumerate(names):
        assert main(["history", "add", database, str(sample_traces / name), "--label", f"pg-{i}",
                     "--time", f"2026-10-{i + 1:02d}T12:00:00+02:00", "--meta", f"job={i}"]) == 0
    capsys.readouterr()
    assert main(["history", "report", database, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["runs"][0]["time"] == "2026-10-01T10:00:00.000000+00:00"     # stored in UTC
    step = next(s for s in report["series"] if s["metric"] == "step_time")
    assert [(c["label"], c["significant"]) for c in step["changes"]] == [("pg-7", True)]
    # check --history on the server: the slower program now passes against its own window.
    assert main(["check", str(sample_traces / "mlp_slow"), "--history", database, "--record", "pg-12"]) == 0


def test_two_processes_adding_at_once_on_postgres(sample_traces, database, tmp_path):
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, database, str(sample_traces / "mlp"), prefix, "8",
                               str(go)], env=env(), stderr=subprocess.PIPE, text=True) for prefix in ("a", "b")]
    time.sleep(0.5)
    go.touch()     # both create the schema of an empty database, then add, at the same moment
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    engine = _engine(database)
    with engine.connect() as conn:
        labels = [r[0] for r in conn.exec_driver_sql("SELECT label FROM traceview_runs")]
        metrics = conn.exec_driver_sql("SELECT count(DISTINCT run_id) FROM traceview_metrics").scalar()
    engine.dispose()
    assert sorted(labels) == sorted(f"{p}-{i}" for p in "ab" for i in range(8)) and metrics == 16


def test_bad_input_on_postgres(sample_traces, database, capsys):
    trace = str(sample_traces / "mlp")
    assert main(["history", "add", database, trace, "--label", "one"]) == 0
    capsys.readouterr()
    assert main(["history", "add", database, trace, "--label", "one"]) == 2
    assert "already recorded" in capsys.readouterr().err
    engine = _engine(database)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE traceview_schema SET value = '7' WHERE key = 'version'")
    assert main(["history", "report", database]) == 2
    err = capsys.readouterr().err.strip()
    assert "newer traceview" in err and "\n" not in err
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT value FROM traceview_schema").scalar() == "7"   # left as it was
        assert conn.exec_driver_sql("SELECT count(*) FROM traceview_runs").scalar() == 1
    engine.dispose()
    missing = database.rsplit("/", 1)[0] + "/no_such_database"
    assert main(["history", "report", missing]) == 2
    assert "no_such_database" in capsys.readouterr().err


def test_a_statement_that_waits_too_long_is_stopped(sample_traces, database, capsys, monkeypatch):
    """Another session holds the schema lock: the add waits at most the statement deadline, then says so in
    one line, and nothing is stored."""
    from traceview.history.store import _ADVISORY_KEY

    trace = str(sample_traces / "mlp")
    assert main(["history", "add", database, trace, "--label", "one"]) == 0
    engine = _engine(database)
    with engine.connect() as holder:
        holder.exec_driver_sql(f"SELECT pg_advisory_lock({_ADVISORY_KEY})")
        monkeypatch.setenv("TRACEVIEW_DB_STATEMENT_TIMEOUT", "1")
        capsys.readouterr()
        assert main(["history", "add", database, trace, "--label", "two"]) == 2
        err = capsys.readouterr().err.strip()
        assert "statement timeout" in err and "\n" not in err
        holder.exec_driver_sql(f"SELECT pg_advisory_unlock({_ADVISORY_KEY})")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT label FROM traceview_runs").scalars().all() == ["one"]
    engine.dispose()
