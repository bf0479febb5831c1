"""The history store on a real SQLite file: two writers at once, a writer killed midway, hostile input.

Bad input (a file that is not a database, another application's database, a newer schema, a missing
store, a duplicate label) is one line on stderr and exit 2, and the file is left byte for byte as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.history import KILLED, WRITER
from tests.support.history import env as _env
from traceview.cli import main

pytest.importorskip("sqlalchemy", reason="the history needs the `history` extra")
pytest.importorskip("scipy", reason="the history needs the `history` extra")

def _labels(db: Path) -> list[str]:
    with closing(sqlite3.connect(db)) as conn:
        return [r[0] for r in conn.execute("SELECT label FROM traceview_runs ORDER BY id")]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_two_processes_adding_at_once(sample_traces, tmp_path):
    db, go = tmp_path / "shared.db", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), str(sample_traces / "mlp"), prefix, "12",
                               str(go)], env=_env(), stderr=subprocess.PIPE, text=True) for prefix in ("a", "b")]
    time.sleep(0.5)
    go.touch()
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    assert not (tmp_path / "shared.db-wal").exists()    # folded back: the file alone is the store
    labels = _labels(db)
    assert sorted(labels) == sorted([f"{p}-{i}" for p in "ab" for i in range(12)])
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        per_run = conn.execute("SELECT run_id, count(*) FROM traceview_metrics GROUP BY run_id").fetchall()
        assert len(per_run) == 24 and len({n for _, n in per_run}) == 1     # every run has all its metrics


def test_the_same_label_from_two_processes_is_stored_once(sample_traces, tmp_path):
    db, go = tmp_path / "dup.db", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), str(sample_traces / "mlp"), "same", "1",
                               str(go)], env=_env(), stderr=subprocess.PIPE, text=True) for _ in range(2)]
    time.sleep(0.5)
    go.touch()
    outcomes = sorted((p.wait(timeout=300), p.stderr.read()) for p in procs)
    # each writer's exit status and the end of its stderr, so that a failure says which writer failed and how
    told = [(code, err[-2000:]) for code, err in outcomes]
    assert outcomes[0][0] == 0 and outcomes[1][0] != 0, told
    assert "already recorded" in outcomes[1][1], told
    assert _labels(db) == ["same-0"]


def test_a_writer_killed_midway_loses_nothing_stored(sample_traces, tmp_path, capsys):
    db, marker = tmp_path / "crash.db", tmp_path / "inside"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(db), str(sample_traces / "mlp"), str(marker)],
                            env=_env())
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the writer never reached its transaction"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert (tmp_path / "crash.db-wal").exists()          # killed: the log was not folded back
    # The next open recovers: the three runs, nothing of the killed one, an intact file.
    assert main(["history", "report", str(db), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in report["runs"]] == ["kept-0", "kept-1", "kept-2"]
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM traceview_metrics WHERE run_id > 3").fetchone()[0] == 0
    assert main(["history", "add", str(db), str(sample_traces / "mlp"), "--label", "killed"]) == 0
    assert _labels(db)[-1] == "killed"


def _exits_2(argv: list[str], capsys, wanted: str) -> None:
    capsys.readouterr()
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip()
    assert err.startswith("traceview: error:") and wanted in err and "\n" not in err, err
    assert "Traceback" not in err


def test_bad_input_is_one_line_and_the_store_untouched(sample_traces, tmp_path, capsys):
    trace = str(sample_traces / "mlp")
    db = tmp_path / "good.db"
    assert main(["history", "add", str(db), trace, "--label", "v1"]) == 0
    before = _digest(db)
    # A duplicate label.
    _exits_2(["history", "add", str(db), trace, "--label", "v1"], capsys, "already recorded")
    _exits_2(["check", trace, "--history", str(db), "--record", "v1"], capsys, "already recorded")
    # Bad flags, before anything is read or written.
    _exits_2(["history", "add", str(db), trace, "--label", "v2", "--time", "yesterday"], capsys, "--time")
    _exits_2(["history", "add", str(db), trace, "--label", "v2", "--meta", "novalue"], capsys, "--meta")
    _exits_2(["history", "add", str(db), trace, "--label", "bad\nlabel"], capsys, "--label")
    _exits_2(["history", "report", str(db), "--last", "0"], capsys, "--last")
    assert _digest(db) == before and _labels(db) == ["v1"]

    # A file that is not a database; another application's SQLite database; a newer schema.
    text = tmp_path / "notes.db"
    text.write_text("not a database\n" * 100)
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE people (name TEXT)")
        conn.commit()
    newer = tmp_path / "newer.db"
    newer.write_bytes(db.read_bytes())
    with closing(sqlite3.connect(newer)) as conn:
        conn.execute("UPDATE traceview_schema SET value = '99' WHERE key = 'version'")
        conn.commit()
    for path, wanted in ((text, "not a SQLite database"), (other, "not a traceview history"),
                         (newer, "newer traceview")):
        digest = _digest(path)
        _exits_2(["history", "report", str(path)], capsys, wanted)
        _exits_2(["history", "add", str(path), trace, "--label", "x"], capsys, wanted)
        _exits_2(["check", trace, "--history", str(path)], capsys, wanted)
        assert _digest(path) == digest, path
    # A missing store: report and check say so; add makes one (only in an existing folder).
    _exits_2(["history", "report", str(tmp_path / "missing.db")], capsys, "no such history database")
    _exits_2(["check", trace, "--history", str(tmp_path / "missing.db")], capsys, "no such history database")
    _exits_2(["history", "add", str(tmp_path / "no" / "such.db"), trace, "--label", "x"], capsys, "no such folder")
    assert not (tmp_path / "missing.db").exists()
    # Not a trace; an unsupported or unreachable database URL.
    _exits_2(["history", "add", str(db), str(tmp_path), "--label", "x"], capsys, "not a trace")
    _exits_2(["history", "report", "mysql://u@localhost/x"], capsys, "unsupported database")
    _exits_2(["check", trace, "--history", "postgresql://u:secret@127.0.0.1:1/x"], capsys, "127.0.0.1")
    assert "secret" not in capsys.readouterr().err
    _exits_2(["check", trace, "--baseline", trace, "--record", "x"], capsys, "--history")
    _exits_2(["check", trace], capsys, "--baseline")
    assert _digest(db) == before


def test_an_older_schema_is_upgraded_by_the_next_add_in_its_transaction(sample_traces, tmp_path, monkeypatch,
                                                                         capsys):
    """The migration path: a store of version 1 met by a traceview whose schema is version 2. A report (a
    read) refuses it untouched; an add upgrades it in the transaction that stores its run."""
    from sqlalchemy import text

    from traceview.history import schema

    db = tmp_path / "old.db"
    trace = str(sample_traces / "mlp")
    assert main(["history", "add", str(db), trace, "--label", "v1-run"]) == 0

    def failing(conn):
        conn.execute(text("ALTER TABLE traceview_runs ADD COLUMN note TEXT"))
        raise RuntimeError("the upgrade broke halfway")

    monkeypatch.setattr(schema, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(schema, "MIGRATIONS", {1: failing})
    before = _digest(db)
    _exits_2(["history", "report", str(db)], capsys, "older traceview")
    assert main(["history", "add", str(db), trace, "--label", "v2-run"]) == 3   # a bug in an upgrade: exit 3
    assert _digest(db) == before                               # ... and nothing of it, nor of the run, stored

    monkeypatch.setattr(schema, "MIGRATIONS",
                        {1: lambda conn: conn.execute(text("ALTER TABLE traceview_runs ADD COLUMN note TEXT"))})
    assert main(["history", "add", str(db), trace, "--label", "v2-run"]) == 0
    capsys.readouterr()
    assert main(["history", "report", str(db), "--format", "json"]) == 0
    assert [r["label"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["v1-run", "v2-run"]
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT value FROM traceview_schema").fetchone()[0] == "2"
        assert "note" in [r[1] for r in conn.execute("PRAGMA table_info(traceview_runs)")]


def test_a_read_only_store_can_be_reported(sample_traces, tmp_path, capsys):
    """A store downloaded as a read-only artifact: the report reads it; a write says why it cannot."""
    if os.geteuid() == 0:
        pytest.skip("root writes to read-only files")
    db = tmp_path / "artifact.db"
    assert main(["history", "add", str(db), str(sample_traces / "mlp"), "--label", "one"]) == 0
    db.chmod(0o444)
    assert main(["history", "report", str(db)]) == 0
    _exits_2(["history", "add", str(db), str(sample_traces / "mlp"), "--label", "two"], capsys, "readonly")
