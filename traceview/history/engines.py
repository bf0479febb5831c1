"""Where a history store lives and how it is reached: the location, and SQLAlchemy engines that cannot hang,
write when they should only read, or trust a damaged file.

* A PostgreSQL server is given deadlines: a connect timeout (a port that accepts connections and never
  answers is an error after CONNECT_TIMEOUT_S, not a hang) and a statement timeout (a lock held by
  someone else, a runaway query), both in seconds, from ``TRACEVIEW_DB_CONNECT_TIMEOUT`` and
  ``TRACEVIEW_DB_STATEMENT_TIMEOUT`` when set (a ``connect_timeout`` in the URL wins).
* A SQLite file is checked before it is trusted: its header and size (a file cut short is refused), then
  ``PRAGMA quick_check``; a reader opens it read-only, so a report never writes a byte; text that is not
  UTF-8 is replaced, never an exception.
* A malformed URL is one line with its password masked.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import QueuePool

from traceview.errors import UserError

BUSY_TIMEOUT_S = 60       # how long a SQLite writer waits for another's transaction
CONNECT_TIMEOUT_S = 5.0   # PostgreSQL: establishing a connection, answer included
STATEMENT_TIMEOUT_S = 30.0  # PostgreSQL: one statement, lock waits included
_SQLITE_MAGIC = b"SQLite format 3\x00"
_HEADER = 100
_PASSWORD = re.compile(r"(://[^/@:]*:)[^/@]*@")


@dataclass(frozen=True)
class Location:
    """Where a store lives: the SQLAlchemy URL, how to name it in messages, and the SQLite file if any."""

    url: str
    shown: str
    file: Path | None


def mask_password(url: str) -> str:
    """A URL as it may be shown: any password replaced by ``***``."""
    return _PASSWORD.sub(r"\1***@", url)


def locate(db: str | Path) -> Location:
    """A path or URL -> Location; UserError for a malformed URL or one of another database."""
    text_db = str(db)
    if "://" not in text_db:
        path = Path(text_db).expanduser()
        return Location(f"sqlite:///{path.resolve()}", str(db), path)
    try:
        url = make_url(text_db)
        url.port  # noqa: B018 - parsed here, so a port that is no number fails now, not at connect
    except (ArgumentError, ValueError) as exc:
        why = "a port that is not a number" if "int" in str(exc) else "not a database URL"
        raise UserError(f"{mask_password(text_db)}: {why}") from None
    shown = url.render_as_string(hide_password=True)
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise UserError(f"{shown}: give a SQLite file (sqlite:///path/history.db)")
        return Location(text_db, shown, Path(url.database))
    if backend in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
        return Location(url.render_as_string(hide_password=False), shown, None)
    raise UserError(f"{shown}: unsupported database (give a SQLite file or a postgresql:// URL)")


def _seconds(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 86400:
        raise UserError(f"{name}={value!r}: give a number of seconds, e.g. 5")
    return seconds


def postgres_engine(location: Location) -> Engine:
    """An engine with a connect and a statement deadline (module docstring)."""
    connect = _seconds("TRACEVIEW_DB_CONNECT_TIMEOUT", CONNECT_TIMEOUT_S)
    statement = _seconds("TRACEVIEW_DB_STATEMENT_TIMEOUT", STATEMENT_TIMEOUT_S)
    args: dict[str, object] = {"options": f"-c statement_timeout={int(statement * 1000)}"}
    if "connect_timeout" not in make_url(location.url).query:
        args["connect_timeout"] = max(int(round(connect)), 1)     # libpq counts whole seconds
    try:
        return create_engine(location.url, pool_pre_ping=True, connect_args=args)
    except ModuleNotFoundError:
        raise UserError(f"{location.shown}: PostgreSQL needs psycopg: pip install 'traceview[history]'") from None


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def sqlite_engine(location: Location, read_only: bool) -> Engine:
    """An engine on the file: read-only (a reader), or writing with BEGIN IMMEDIATE when asked (a writer)."""
    path = location.file
    assert path is not None
    uri = f"file:{quote(str(path.resolve()))}?mode={'ro' if read_only else 'rwc'}"
    if read_only and not any(Path(f"{path}{log}").exists() for log in ("-wal", "-journal")):
        # No writer has the file open, nor left a journal to roll back (a WAL writer keeps its log until it
        # closes): read it as it is, so that SQLite does not leave a -wal and -shm file beside it, which a
        # read-only connection cannot remove.
        uri += "&immutable=1"
    engine = create_engine("sqlite://", poolclass=QueuePool,      # a pool, as for any file (not one per thread)
                           creator=lambda: sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S,
                                                           check_same_thread=False))

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None          # SQLAlchemy's BEGIN below, not the driver's
        dbapi_connection.text_factory = _text
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("write") else "BEGIN")

    return engine


def check_sqlite_file(location: Location, create: bool) -> bool:
    """Whether the file exists; a missing one is fine only when asked to create it (and its folder exists);
    any other must be a whole SQLite file (its header, and a size of whole pages)."""
    path = location.file
    assert path is not None
    if not path.exists():
        if not create:
            raise UserError(f"{location.shown}: no such history database (record a run first: "
                            "`traceview history add DB PATH --label L`)")
        if not path.parent.is_dir():
            raise UserError(f"{location.shown}: no such folder: {path.parent}")
        return False
    if path.is_dir():
        raise UserError(f"{location.shown}: is a folder, not a history database file")
    if not path.is_file():      # a FIFO would wait for a writer; /dev/null would read as an empty store
        from traceview.parsers.discover import kind_of

        raise UserError(f"{location.shown}: {kind_of(path)}, not a history database file")
    try:
        with path.open("rb") as handle:
            head = handle.read(_HEADER)
        size = path.stat().st_size
    except OSError as exc:
        raise UserError(f"{location.shown}: cannot read: {exc.strerror}") from None
    if not head:    # an empty file is an empty database
        return True
    if head[:len(_SQLITE_MAGIC)] != _SQLITE_MAGIC:
        raise UserError(f"{location.shown}: not a SQLite database (a history file is one)")
    if not _whole(head, size, Path(f"{path}-wal").exists()):
        raise UserError(f"{location.shown}: damaged: the file is cut short ({size} bytes is not the whole "
                        "database its header describes)")
    return True


def _whole(head: bytes, size: int, has_wal: bool) -> bool:
    """A size of whole pages, and (without a write-ahead log holding more) the page count the header gives."""
    if len(head) < _HEADER:
        return False
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1) or size % page:
        return False
    pages, counter, valid_for = (int.from_bytes(head[a:a + 4], "big") for a in (28, 24, 92))
    return has_wal or counter != valid_for or pages == 0 or pages * page == size


def quick_check(conn: Connection, location: Location) -> None:
    """UserError naming the store when SQLite's own check finds damage."""
    rows = [str(r[0]) for r in conn.exec_driver_sql("PRAGMA quick_check(3)").fetchall()]
    if rows != ["ok"]:
        raise UserError(f"{location.shown}: damaged: {' '.join('; '.join(rows).split())[:200]}")
