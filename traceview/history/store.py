"""The history store: runs in a SQLite file or a PostgreSQL database, through SQLAlchemy.

``open_store(DB)``: DB is a file path (SQLite) or a URL (``postgresql://user@host/db``; also
``sqlite:///path``). Opening migrates an older schema (schema.py) in one transaction. Each write is
one transaction, so a process killed midway leaves every run stored before it, and nothing of its
own. Two writers at once: SQLite runs in WAL mode with a busy timeout and takes the write lock at
BEGIN (BEGIN IMMEDIATE), so the second waits; PostgreSQL serializes schema creation with an
advisory lock, and the unique label makes a duplicate fail, whoever comes second. Every database
error is one UserError line naming the store (a URL's password hidden).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import Connection, Engine, create_engine, event, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, SQLAlchemyError

from traceview.errors import UserError
from traceview.history import schema
from traceview.history.record import RunRecord, iso
from traceview.units import finite
from traceview.version import __version__

BUSY_TIMEOUT_S = 60       # how long a SQLite writer waits for another's transaction
_ADVISORY_KEY = 0x7472_6163_6576   # "tracev": serializes schema creation on PostgreSQL
_SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class Location:
    """Where a store lives: the SQLAlchemy URL, how to name it in messages, and the SQLite file if any."""

    url: str
    shown: str
    file: Path | None


def locate(db: str | Path) -> Location:
    """A path or URL -> Location; UserError for a URL of another database than SQLite or PostgreSQL."""
    text_db = str(db)
    if "://" not in text_db:
        path = Path(text_db).expanduser()
        return Location(f"sqlite:///{path.resolve()}", str(db), path)
    try:
        url = make_url(text_db)
    except ArgumentError:
        raise UserError(f"{text_db.split('://')[0]}://...: not a database URL") from None
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


def _one_line(exc: BaseException) -> str:
    detail = getattr(exc, "orig", None) or exc
    return " ".join(str(detail).split())[:300]


def _sqlite_engine(location: Location) -> Engine:
    engine = create_engine(location.url, connect_args={"timeout": BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None          # SQLAlchemy's BEGIN below, not the driver's
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("write") else "BEGIN")

    return engine


class HistoryStore:
    """An open history database. Use :func:`open_store`; close it (or use it as a context manager)."""

    def __init__(self, location: Location, engine: Engine):
        self.location = location
        self.engine = engine
        self.sqlite = location.file is not None

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def close(self) -> None:
        """Release every connection (SQLite then folds its write-ahead log back into the file)."""
        self.engine.dispose()

    @contextmanager
    def transaction(self, write: bool = False) -> Iterator[Connection]:
        """One transaction; database errors become one UserError line naming the store."""
        try:
            with self.engine.connect() as conn:
                conn = conn.execution_options(write=write)
                with conn.begin():
                    yield conn
        except UserError:
            raise
        except IntegrityError as exc:
            raise UserError(f"{self.location.shown}: refused by the database: {_one_line(exc)}") from None
        except SQLAlchemyError as exc:
            raise UserError(f"{self.location.shown}: {_one_line(exc)}") from None
        except UnicodeDecodeError:
            raise UserError(f"{self.location.shown}: damaged: text that is not UTF-8") from None

    # ------------------------------------------------------------ writing

    def migrate(self) -> int:
        """Create or upgrade the schema (one write transaction, only when needed); the version now stored.

        A store already at this version is only read, so a report may read a store it cannot write.
        """
        with self.transaction() as conn:
            version = schema.stored_version(conn, self.location.shown)
        if version != schema.SCHEMA_VERSION:
            with self.transaction(write=True) as conn:
                if not self.sqlite:
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_KEY})
                version = schema.migrate(conn, self.location.shown)
        if self.sqlite:   # only once the file is known to be a history (the mode is kept in the file)
            self._write_ahead_log()
        return version

    def _write_ahead_log(self) -> None:
        """SQLite's WAL mode: readers never block the writer; a torn write is rolled back on the next open."""
        try:
            raw = self.engine.raw_connection()      # outside any transaction, as the pragma needs
            try:
                cursor = raw.cursor()
                cursor.execute("PRAGMA journal_mode")
                mode = cursor.fetchone()
                if mode is None or str(mode[0]).lower() != "wal":
                    cursor.execute("PRAGMA journal_mode = WAL")
            finally:
                raw.close()
        except SQLAlchemyError as exc:
            raise UserError(f"{self.location.shown}: {_one_line(exc)}") from None

    def add(self, run: RunRecord) -> int:
        """Store one run in one transaction; its id. UserError when its label is already recorded."""
        with self.transaction(write=True) as conn:
            taken = conn.execute(select(schema.runs.c.id).where(schema.runs.c.label == run.label)).first()
            if taken is not None:
                raise UserError(f"{self.location.shown}: a run labelled {run.label!r} is already recorded "
                                "(labels are unique: use the commit, or add the job number)")
            run_id = conn.execute(schema.runs.insert().values(
                label=run.label, time=iso(run.time), recorded_at=iso(datetime.now(timezone.utc)),
                trace_path=run.trace_path, meta=json.dumps(run.meta, sort_keys=True), target=run.target,
                steps=int(run.steps), traceview_version=__version__)).inserted_primary_key
            assert run_id is not None
            run_id = run_id[0]
            rows = [{"run_id": run_id, "metric": name[:schema.MAX_METRIC], "value": finite(m.value),
                     "low": finite(m.low), "high": finite(m.high), "unit": m.unit,
                     "samples": None if m.samples is None else json.dumps([finite(s) for s in m.samples])}
                    for name, m in run.metrics.items()]
            if rows:
                conn.execute(schema.metrics.insert(), rows)
            ops = _op_rows(run_id, run.ops)
            if ops:
                conn.execute(schema.ops.insert(), ops)
            return int(run_id)

    # ------------------------------------------------------------ reading

    def runs(self) -> pd.DataFrame:
        """Every run, oldest first: id, label, time (ISO, UTC), meta (dict), trace_path, target, steps."""
        with self.transaction() as conn:
            rows = conn.execute(select(schema.runs).order_by(schema.runs.c.time, schema.runs.c.id)).mappings().all()
        frame = pd.DataFrame([dict(r) for r in rows], columns=[c.name for c in schema.runs.columns])
        # A damaged row (no id, label or time) is left out rather than shown as something it is not.
        frame = frame[frame["id"].notna() & frame["label"].notna() & frame["time"].notna()].reset_index(drop=True)
        frame["label"] = frame["label"].astype(str)
        frame["time"] = frame["time"].astype(str)
        for column in ("trace_path", "target"):
            frame[column] = [None if v is None or v != v else str(v) for v in frame[column]]
        frame["steps"] = pd.to_numeric(frame["steps"], errors="coerce").fillna(0).clip(lower=0).astype(int)
        frame["meta"] = [_json_object(m) for m in frame["meta"]]
        return frame

    def metrics(self, run_ids: list[int] | None = None) -> pd.DataFrame:
        """run_id, metric, value, low, high, unit, samples (list or None) of the runs given (default all)."""
        query = select(schema.metrics)
        if run_ids is not None:
            query = query.where(schema.metrics.c.run_id.in_(run_ids))
        with self.transaction() as conn:
            rows = conn.execute(query).mappings().all()
        frame = pd.DataFrame([dict(r) for r in rows], columns=[c.name for c in schema.metrics.columns])
        frame["samples"] = [_json_list(s) for s in frame["samples"]]
        for column in ("value", "low", "high"):
            frame[column] = [finite(v) for v in frame[column]]
        frame["unit"] = frame["unit"].fillna("").astype(str)
        return frame[frame["metric"].notna()].astype({"metric": str})

    def ops(self, run_ids: list[int]) -> pd.DataFrame:
        """The stored ops of these runs: run_id, the regress Snapshot's op columns, step_times_ps (list or None)."""
        with self.transaction() as conn:
            rows = conn.execute(select(schema.ops).where(schema.ops.c.run_id.in_(run_ids))).mappings().all()
        frame = pd.DataFrame([dict(r) for r in rows], columns=[c.name for c in schema.ops.columns])
        frame["step_times_ps"] = [_json_list(s) for s in frame["step_times_ps"]]
        for column in schema.OP_NUMBERS:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
        return frame


def _json_object(textual: str | None) -> dict[str, str]:
    try:
        value = json.loads(textual if isinstance(textual, str) else "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _json_list(textual: str | None) -> list[float | None] | None:
    if not isinstance(textual, str):
        return None
    try:
        value = json.loads(textual)
    except ValueError:
        return None
    if not isinstance(value, list):
        return None
    return [finite(v) for v in value]


def _op_rows(run_id: int, ops: pd.DataFrame) -> list[dict]:
    rows = []
    for record in ops.to_dict("records"):
        row: dict[str, Any] = {"run_id": run_id}
        for name in schema.OP_TEXT:
            value = record.get(name)
            row[name] = None if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
        for name in schema.OP_NUMBERS:
            row[name] = finite(record.get(name))
        steps = record.get("step_times_ps")
        row["step_times_ps"] = None if steps is None else json.dumps([finite(s) for s in steps])
        rows.append(row)
    return rows


def _check_sqlite_file(location: Location, create: bool) -> None:
    """A missing file is created only when asked (and its folder exists); any other file must be SQLite."""
    path = location.file
    assert path is not None
    if not path.exists():
        if not create:
            raise UserError(f"{location.shown}: no such history database (record a run first: "
                            "`traceview history add DB PATH --label L`)")
        if not path.parent.is_dir():
            raise UserError(f"{location.shown}: no such folder: {path.parent}")
        return
    if path.is_dir():
        raise UserError(f"{location.shown}: is a folder, not a history database file")
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise UserError(f"{location.shown}: cannot read: {exc.strerror}") from None
    if head and head != _SQLITE_MAGIC:   # an empty file is an empty database
        raise UserError(f"{location.shown}: not a SQLite database (a history file is one)")


def open_store(db: str | Path, create: bool = False) -> HistoryStore:
    """Open (with `create`: make) a history store and bring its schema up to date.

    UserError, with the store untouched, for a missing store (without `create`), a file that is not a
    database, another application's database, a schema from a newer traceview, or a server that
    cannot be reached.
    """
    location = locate(db)
    if location.file is not None:
        _check_sqlite_file(location, create)
        engine = _sqlite_engine(location)
    else:
        try:
            engine = create_engine(location.url, pool_pre_ping=True)
        except ModuleNotFoundError:
            raise UserError(f"{location.shown}: PostgreSQL needs psycopg: pip install 'traceview[history]'") from None
    store = HistoryStore(location, engine)
    try:
        store.migrate()
    except BaseException:
        store.close()
        raise
    return store
