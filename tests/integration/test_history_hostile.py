"""The history store against hostile and careless input: a read never writes, a failed add leaves the file
byte for byte as it was in any journal mode, a damaged store is refused before it is trusted, a server that
never answers is a deadline, and a long history reports its window."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from pathlib import Path

import pytest

from traceview.cli import main

pytest.importorskip("sqlalchemy", reason="the history needs the `history` extra")
pytest.importorskip("scipy", reason="the history needs the `history` extra")


@pytest.fixture(scope="module")
def store(sample_traces, tmp_path_factory) -> Path:
    """A store of two runs of the mlp sample (WAL mode, as `history add` leaves it)."""
    db = tmp_path_factory.mktemp("history") / "good.db"
    for label in ("a", "b"):
        assert main(["history", "add", str(db), str(sample_traces / "mlp"), "--label", label]) == 0
    return db


def _copy(store: Path, tmp_path: Path, name: str = "h.db") -> Path:
    folder = tmp_path / name.replace(".", "_")
    folder.mkdir()
    path = folder / name
    shutil.copy(store, path)
    return path


def _state(path: Path) -> tuple[str, list[str]]:
    """The file's digest and what lies beside it."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""
    return digest, sorted(p.name for p in path.parent.iterdir())


def _one_line(argv: list[str], capsys, code: int) -> str:
    capsys.readouterr()
    assert main(argv) == code, argv
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def _journal(path: Path, mode: str) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA journal_mode = {mode}")


@pytest.mark.parametrize("mode", ["DELETE", "TRUNCATE", "WAL"])
def test_a_failed_add_leaves_the_file_byte_identical(store, sample_traces, tmp_path, capsys, mode):
    """A duplicate label used to switch a rollback-journal store to WAL mode (header bytes 18-19) on the way."""
    path = _copy(store, tmp_path)
    _journal(path, mode)
    before = _state(path)
    err = _one_line(["history", "add", str(path), str(sample_traces / "mlp"), "--label", "a"], capsys, 2)
    assert "already recorded" in err
    assert _state(path) == before


def test_a_report_never_writes(store, tmp_path, capsys):
    """An empty file, a store in rollback-journal mode, a store in WAL mode: read and left as they were,
    nothing created beside them; a store whose version row is missing is refused, untouched."""
    empty = tmp_path / "empty" / "e.db"
    empty.parent.mkdir()
    empty.write_bytes(b"")
    rollback = _copy(store, tmp_path, "rollback.db")
    _journal(rollback, "DELETE")
    wal = _copy(store, tmp_path, "wal.db")
    no_version = _copy(store, tmp_path, "noversion.db")
    with closing(sqlite3.connect(no_version)) as conn:
        conn.execute("DELETE FROM traceview_schema")
        conn.commit()
    for path, code, wanted in ((empty, 0, ""), (rollback, 0, ""), (wal, 0, ""), (no_version, 2, "damaged")):
        before = _state(path)
        assert wanted in _one_line(["history", "report", str(path), "--format", "json"], capsys, code)
        assert _state(path) == before, path


@pytest.mark.parametrize("damage", ["last byte missing", "cut at a page", "page zeroed"])
def test_a_damaged_store_is_refused_by_report_and_add(store, sample_traces, tmp_path, capsys, damage):
    path = _copy(store, tmp_path)
    _journal(path, "DELETE")            # the whole store in the file
    data = path.read_bytes()
    page = int.from_bytes(data[16:18], "big")
    if damage == "last byte missing":
        data = data[:-1]
    elif damage == "cut at a page":
        data = data[:(len(data) // page - 1) * page]
    else:
        data = data[:2 * page] + bytes(page) + data[3 * page:]
    path.write_bytes(data)
    before = _state(path)
    for argv in (["history", "report", str(path)], ["history", "add", str(path), str(sample_traces / "mlp"),
                                                      "--label", "c"]):
        err = _one_line(argv, capsys, 2)
        assert str(path) in err and "damaged" in err, err
    assert _state(path) == before


def test_stored_json_nested_too_deeply_is_a_damaged_value(store, tmp_path, capsys):
    path = _copy(store, tmp_path)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE traceview_metrics SET samples = ?", ("[" * 100_000 + "]" * 100_000,))
        conn.execute("UPDATE traceview_runs SET meta = ?", ('{"a":' * 100_000 + "1" + "}" * 100_000,))
        conn.commit()
    _one_line(["history", "report", str(path), "--format", "json"], capsys, 0)


def test_a_url_with_a_port_that_is_not_a_number(capsys):
    err = _one_line(["history", "report", "postgresql://ci:s3cret@127.0.0.1:abc/x"], capsys, 2)
    assert "port" in err and "127.0.0.1" in err and "s3cret" not in err


def test_a_server_that_never_answers_is_a_deadline(sample_traces, capsys, monkeypatch):
    """A port that accepts connections and never answers: `report` and `add` end at the connect deadline."""
    pytest.importorskip("psycopg")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    url = f"postgresql://ci:s3cret@127.0.0.1:{server.getsockname()[1]}/x"
    monkeypatch.setenv("TRACEVIEW_DB_CONNECT_TIMEOUT", "1")
    try:
        for argv in (["history", "report", url], ["history", "add", url, str(sample_traces / "mlp"), "--label", "a"]):
            err = _one_line(argv, capsys, 2)
            assert "timeout" in err and "s3cret" not in err, err
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def _long_store(path: Path, runs: int) -> None:
    """`runs` runs written straight into the tables (as many `history add`s would), a step change at the
    middle of the last 1,000."""
    from sqlalchemy import create_engine

    from traceview.history import schema

    with create_engine(f"sqlite:///{path}").begin() as conn:
        schema.migrate(conn, str(path))
    rows, metrics = [], []
    for i in range(runs):
        step = 1000.0 * (1.5 if i >= runs - 500 else 1.0)
        steps = [step * (1 + 0.01 * ((i * 7 + k) % 5 - 2)) for k in range(4)]
        rows.append((i + 1, f"run-{i}", f"2026-01-01T00:00:00.{i:06d}+00:00", "2026", None, "{}", "tpu-v6e", 4, "0"))
        metrics.append((i + 1, "step_time", sorted(steps)[2], min(steps), max(steps), "us", json.dumps(steps)))
        metrics.append((i + 1, "mfu", 0.4 + 0.001 * (i % 3), None, None, "fraction", None))
    with closing(sqlite3.connect(path)) as conn:
        conn.executemany("INSERT INTO traceview_runs VALUES (?,?,?,?,?,?,?,?,?)", rows)
        conn.executemany("INSERT INTO traceview_metrics VALUES (?,?,?,?,?,?,?)", metrics)
        conn.commit()


def test_a_long_history_reports_the_window_asked_for(tmp_path):
    """20,000 runs: the report reads the last 1,000 by default (and says so), or the window --last names,
    and finds the change in it; the rest of the store is not read."""
    path = tmp_path / "long.db"
    _long_store(path, 20_000)
    for argv, shown in (([], 1000), (["--last", "600"], 600)):
        done = subprocess.run([sys.executable, "-m", "traceview", "history", "report", str(path), "--format", "json",
                               *argv], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert len(report["runs"]) == shown and report["runs"][-1]["label"] == "run-19999"
        assert any("of 20000 runs" in w for w in report["warnings"]) == (not argv)
        step = next(s for s in report["series"] if s["metric"] == "step_time")
        assert [c["label"] for c in step["changes"] if c["significant"]] == ["run-19500"]


def test_a_label_missing_from_its_index_is_a_damaged_store(store, sample_traces, tmp_path, capsys):
    """The runs table holds 'a' while its unique label index holds another label (the index page spliced in
    from a copy where the run was renamed): SQLite's quick check does not compare the two, and an add took
    'a' again (found by the fuzz campaign, seed 44003). The add is refused as damaged; the file is untouched."""
    path, renamed = _copy(store, tmp_path), _copy(store, tmp_path, "renamed.db")
    for db in (path, renamed):
        _journal(db, "DELETE")            # the whole store in the file
    with closing(sqlite3.connect(renamed)) as conn:
        conn.execute("UPDATE traceview_runs SET label = 'z' WHERE label = 'a'")
        conn.commit()
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE type = 'index' "
                               "AND tbl_name = 'traceview_runs' AND sql IS NULL").fetchone()
    data, other = bytearray(path.read_bytes()), renamed.read_bytes()
    size = int.from_bytes(data[16:18], "big")
    start = (root - 1) * size
    data[start:start + size] = other[start:start + size]
    path.write_bytes(bytes(data))
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA quick_check").fetchone() == ("ok",)       # what the open checks passes
        assert conn.execute("SELECT count(*) FROM traceview_runs WHERE label = 'a'").fetchone() == (0,)
    before = _state(path)
    err = _one_line(["history", "add", str(path), str(sample_traces / "mlp"), "--label", "a"], capsys, 2)
    assert "damaged" in err and "'a'" in err, err
    assert _state(path) == before
