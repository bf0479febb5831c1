"""The history store: runs in a SQLite file or a PostgreSQL database, through SQLAlchemy.

``open_store(DB)``: DB is a file path (SQLite) or a URL (``postgresql://user@host/db``; also
``sqlite:///path``); engines.py reaches it (deadlines, checks of a SQLite file before it is trusted).
A reader (``open_store(DB)``) never writes: a SQLite file is opened read-only, and an empty store, or
one an older traceview wrote, is read as it is or refused, never created or upgraded. A writer
(``open_store(DB, create=True)``) creates or upgrades the schema in the transaction of its first
``add``, so a failed ``add`` (a duplicate label, a database error) leaves the file byte for byte as
it was, whatever its journal mode; a store is switched to SQLite's WAL mode only after a run is
stored. Two writers at once: SQLite waits on a busy timeout and takes the write lock at BEGIN (BEGIN
IMMEDIATE); PostgreSQL serializes schema creation with an advisory lock, and the unique label makes
a duplicate fail, whoever comes second. Every database error is one UserError line naming the store
(a URL's password hidden).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from sqlalchemy import Connection, Engine, func, select, text
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from traceview.errors import UserError
from traceview.history import schema
from traceview.history.engines import (
    Location,
    check_sqlite_file,
    locate,
    postgres_engine,
    quick_check,
    sqlite_engine,
)
from traceview.units import finite
from traceview.version import __version__

if TYPE_CHECKING:   # a reader needs none of what builds a run (record.py imports the regress baseline)
    from traceview.history.record import RunRecord

__all__ = ["HistoryStore", "Location", "locate", "open_store"]

_ADVISORY_KEY = 0x7472_6163_6576   # "tracev": serializes schema creation on PostgreSQL
MAX_STORED_JSON = 16 << 20          # characters of one stored JSON value (samples, meta) decoded at most
_IN_LIST = 500                      # run ids named one by one in a query; more: their range, then filtered


def _one_line(exc: BaseException) -> str:
    detail = getattr(exc, "orig", None) or exc
    return " ".join(str(detail).split())[:300]


class HistoryStore:
    """An open history database. Use :func:`open_store`; close it (or use it as a context manager)."""

    def __init__(self, location: Location, engine: Engine, writable: bool = False, created: bool = False):
        self.location = location
        self.engine = engine
        self.sqlite = location.file is not None
        self.writable = writable
        self.created = created          # the SQLite file did not exist before this writer
        self.version: int | None = None  # the schema stored (None: an empty store)

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

    def check(self, whole_file: bool) -> None:
        """Read the stored schema version (and on SQLite, with `whole_file`, run the quick check): UserError for
        damage, a newer schema, or (for a reader) an older one, which only a writer upgrades."""
        with self.transaction() as conn:
            if self.sqlite and whole_file:
                quick_check(conn, self.location)
            self.version = schema.stored_version(conn, self.location.shown)
        if self.version is not None and self.version > schema.SCHEMA_VERSION:
            schema.refuse_newer(self.version, self.location.shown)
        if self.version is not None and self.version < schema.SCHEMA_VERSION and not self.writable:
            raise UserError(f"{self.location.shown}: history schema {self.version}, written by an older traceview: "
                            "the next `traceview history add` upgrades it")

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
        """Store one run in one transaction (creating or upgrading the schema in it); its id. UserError when
        its label is already recorded; on any failure the store is left as it was."""
        if not self.writable:
            raise UserError(f"{self.location.shown}: opened for reading")
        try:
            run_id = self._add(run)
        except BaseException:
            self._forget_created_file()
            raise
        if self.sqlite:   # only once a run is stored (the mode is kept in the file)
            self._write_ahead_log()
        return run_id

    def _add(self, run: RunRecord) -> int:
        from traceview.history.record import iso

        with self.transaction(write=True) as conn:
            if not self.sqlite:
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_KEY})
            self.version = schema.migrate(conn, self.location.shown)
            taken = conn.execute(select(schema.runs.c.id).where(schema.runs.c.label == run.label)).first()
            if taken is None and self.sqlite and conn.execute(
                    text(f"SELECT id FROM {schema.runs.name} NOT INDEXED WHERE label = :label"), {"label": run.label}).first():
                # the label is in the table but not in its unique index (SQLite's quick check does not compare
                # the two): a damaged store, which would take the label twice
                raise UserError(f"{self.location.shown}: damaged store: run {run.label!r} is in the runs table but "
                                "not in its label index (sqlite3 DB '.recover', or start a new store)")
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

    def _forget_created_file(self) -> None:
        """A SQLite file this writer created and left empty (its first add failed) is removed again."""
        path = self.location.file
        if not self.created or path is None:
            return
        self.engine.dispose()
        try:
            if path.stat().st_size == 0:
                path.unlink()
        except OSError:
            pass

    # ------------------------------------------------------------ reading

    def runs(self, last: int | None = None) -> pd.DataFrame:
        """The runs (the `last` N by time; default all), oldest first: id, label, time (ISO, UTC), meta (dict),
        trace_path, target, steps."""
        columns = [c.name for c in schema.runs.columns]
        if self.version is None:
            return _typed_runs(pd.DataFrame(columns=columns))
        order = (schema.runs.c.time.desc(), schema.runs.c.id.desc())
        query = select(schema.runs).order_by(*order)
        if last is not None:
            query = query.limit(last)
        with self.transaction() as conn:
            rows = [tuple(r) for r in conn.execute(query).all()]
        return _typed_runs(pd.DataFrame.from_records(rows[::-1], columns=columns))

    def run_count(self) -> int:
        """How many runs are stored."""
        if self.version is None:
            return 0
        with self.transaction() as conn:
            return int(conn.execute(select(func.count()).select_from(schema.runs)).scalar() or 0)

    def metric_names(self, run_ids: list[int] | None = None) -> list[str]:
        """The metric names stored (for these runs, or their id range when many; default all), sorted."""
        if self.version is None:
            return []
        query = select(schema.metrics.c.metric).distinct()
        if run_ids is not None:
            query = query.where(_among(schema.metrics.c.run_id, run_ids))
        with self.transaction() as conn:
            names = conn.execute(query).scalars().all()
        return sorted(str(n) for n in names if n is not None)

    def metrics(self, run_ids: list[int] | None = None, names: list[str] | None = None) -> pd.DataFrame:
        """run_id, metric, value, low, high, unit, samples (list or None) of the runs and metrics given
        (default all)."""
        columns = [c.name for c in schema.metrics.columns]
        rows: list = []
        if self.version is not None and (names is None or names):
            query = select(schema.metrics)
            if run_ids is not None:
                query = query.where(_among(schema.metrics.c.run_id, run_ids))
            if names is not None:
                query = query.where(schema.metrics.c.metric.in_(names))
            with self.transaction() as conn:
                rows = [tuple(r) for r in conn.execute(query).all()]
        frame = pd.DataFrame.from_records(rows, columns=columns)
        if run_ids is not None and len(run_ids) > _IN_LIST:
            frame = frame[frame["run_id"].isin(run_ids)]
        frame["samples"] = [_json_list(s) for s in frame["samples"]]
        for column in ("value", "low", "high"):
            frame[column] = [finite(v) for v in frame[column]]
        frame["unit"] = frame["unit"].fillna("").astype(str)
        return frame[frame["metric"].notna()].astype({"metric": str}).reset_index(drop=True)

    def ops(self, run_ids: list[int]) -> pd.DataFrame:
        """The stored ops of these runs: run_id, the regress Snapshot's op columns, step_times_ps (list or None)."""
        columns = [c.name for c in schema.ops.columns]
        rows: list = []
        if self.version is not None and run_ids:
            with self.transaction() as conn:
                rows = [tuple(r) for r in conn.execute(select(schema.ops).where(_among(schema.ops.c.run_id, run_ids)))]
        frame = pd.DataFrame.from_records(rows, columns=columns)
        if len(run_ids) > _IN_LIST:
            frame = frame[frame["run_id"].isin(run_ids)].reset_index(drop=True)
        frame["step_times_ps"] = [_json_list(s) for s in frame["step_times_ps"]]
        for column in schema.OP_NUMBERS:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
        return frame


def _among(column, run_ids: list[int]):
    """A filter on run ids: named one by one when few (a query's parameters are limited), else their range
    (the caller keeps the ones asked for)."""
    if len(run_ids) <= _IN_LIST:
        return column.in_(run_ids)
    return column.between(min(run_ids), max(run_ids))


def _typed_runs(frame: pd.DataFrame) -> pd.DataFrame:
    # A damaged row (no id, label or time) is left out rather than shown as something it is not.
    frame = frame[frame["id"].notna() & frame["label"].notna() & frame["time"].notna()].reset_index(drop=True)
    frame["label"] = frame["label"].astype(str)
    frame["time"] = frame["time"].astype(str)
    for column in ("trace_path", "target"):
        frame[column] = [None if v is None or v != v else str(v) for v in frame[column]]
    frame["steps"] = pd.to_numeric(frame["steps"], errors="coerce").fillna(0).clip(lower=0).astype(int)
    frame["meta"] = [_json_object(m) for m in frame["meta"]]
    return frame


def _json_value(textual: object) -> Any:
    """A stored JSON value, or None when it is not one (damaged, too long, nested too deeply)."""
    if not isinstance(textual, str) or len(textual) > MAX_STORED_JSON:
        return None
    try:
        return json.loads(textual)
    except (ValueError, RecursionError):
        return None


def _json_object(textual: str | None) -> dict[str, str]:
    value = _json_value(textual)
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _json_list(textual: str | None) -> list[float | None] | None:
    value = _json_value(textual)
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


def open_store(db: str | Path, create: bool = False) -> HistoryStore:
    """Open a history store: to read it, or (with `create`) to add runs, making the SQLite file when missing.

    UserError, with the store untouched, for a missing store (without `create`), a file that is not a
    database or is damaged, another application's database, a schema from a newer traceview (or, to read,
    an older one), or a server that cannot be reached in time.
    """
    location = locate(db)
    existed = False
    if location.file is not None:
        existed = check_sqlite_file(location, create)
        engine = sqlite_engine(location, read_only=not create)
    else:
        engine = postgres_engine(location)
    store = HistoryStore(location, engine, writable=create, created=location.file is not None and not existed)
    try:
        if store.sqlite and not existed:
            store.version = None            # nothing to read yet: the first add creates the schema
        else:
            store.check(whole_file=existed and location.file is not None and location.file.stat().st_size > 0)
    except BaseException:
        store.close()
        raise
    return store
