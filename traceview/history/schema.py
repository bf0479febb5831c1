"""The history database's tables and their version; opening a store migrates an older one.

Version 1: ``traceview_schema`` (key/value: ``version``), ``traceview_runs`` (one row per recorded
run, its label unique), ``traceview_metrics`` (one row per run and metric: value, spread, per-step
samples as a JSON list) and ``traceview_ops`` (per run, the ops with the most time: the columns of
a regress Snapshot, so a window of runs is a baseline for ``check``). A later version adds its
upgrade to MIGRATIONS; a database written by a newer traceview is refused, never rewritten.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    Column,
    Connection,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    inspect,
    select,
)

from traceview.errors import UserError

SCHEMA_VERSION = 1
PREFIX = "traceview_"
MAX_LABEL = 200           # characters of a run label
MAX_METRIC = 1000         # characters of a metric name (op and scope names are cut to fit)

metadata = MetaData()

schema_info = Table(
    f"{PREFIX}schema", metadata,
    Column("key", String(64), primary_key=True),
    Column("value", String(256), nullable=False),
)

runs = Table(
    f"{PREFIX}runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("label", String(MAX_LABEL), nullable=False, unique=True),
    Column("time", String(40), nullable=False),          # ISO 8601, UTC: sorts as text
    Column("recorded_at", String(40), nullable=False),
    Column("trace_path", Text),
    Column("meta", Text, nullable=False),                 # JSON object of strings
    Column("target", String(200)),
    Column("steps", Integer, nullable=False),
    Column("traceview_version", String(50), nullable=False),
)

metrics = Table(
    f"{PREFIX}metrics", metadata,
    Column("run_id", Integer, ForeignKey(f"{PREFIX}runs.id", ondelete="CASCADE"), primary_key=True),
    Column("metric", String(MAX_METRIC), primary_key=True),
    Column("value", Float),
    Column("low", Float),
    Column("high", Float),
    Column("unit", String(16), nullable=False),
    Column("samples", Text),                              # JSON list: the per-step values, when known
)

OP_TEXT = ("module", "op", "opcode", "category", "shape", "dtype", "bound", "source_file", "fingerprint", "op_name")
OP_NUMBERS = ("occurrences", "time_ps", "judged_time_ps", "roofline_time_ps", "flops", "bytes", "collective_bytes",
              "source_line")

ops = Table(
    f"{PREFIX}ops", metadata,
    Column("run_id", Integer, ForeignKey(f"{PREFIX}runs.id", ondelete="CASCADE"), nullable=False),
    *(Column(name, Text) for name in OP_TEXT),
    *(Column(name, Float) for name in OP_NUMBERS),
    Column("step_times_ps", Text),                        # JSON list: the op's self time in each step
    Index(f"{PREFIX}ops_run", "run_id"),
)

# version -> the upgrade from that version to the next, run in the opening transaction.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {}


def stored_version(conn: Connection, where: str) -> int | None:
    """The schema version of the database behind `conn`; None for an empty database.

    UserError when it holds tables but not traceview's, or a version this traceview does not know.
    """
    names = set(inspect(conn).get_table_names())
    if schema_info.name not in names:
        if names & {runs.name, metrics.name, ops.name}:
            raise UserError(f"{where}: a traceview history without its schema version table: damaged")
        if names:
            raise UserError(f"{where}: not a traceview history database (it holds other tables: "
                            f"{', '.join(sorted(names)[:3])})")
        return None
    value = conn.execute(select(schema_info.c.value).where(schema_info.c.key == "version")).scalar()
    if value is None:
        raise UserError(f"{where}: a traceview history without its schema version: damaged")
    try:
        return int(value)
    except ValueError:
        raise UserError(f"{where}: schema version {str(value)[:40]!r} is not a number: damaged") from None


def refuse_newer(version: int, where: str) -> None:
    """UserError: a store written by a newer traceview is never read or rewritten by this one."""
    raise UserError(f"{where}: written by a newer traceview (history schema {version}; this one reads up to "
                    f"{SCHEMA_VERSION}): upgrade traceview")


def migrate(conn: Connection, where: str) -> int:
    """Create the tables in an empty database or upgrade an older schema, in the caller's transaction."""
    version = stored_version(conn, where)
    if version is None:
        metadata.create_all(conn)
        conn.execute(schema_info.insert().values(key="version", value=str(SCHEMA_VERSION)))
        return SCHEMA_VERSION
    if version > SCHEMA_VERSION:
        refuse_newer(version, where)
    if version < 1:
        raise UserError(f"{where}: history schema {version} is not a version traceview wrote: damaged")
    for step in range(version, SCHEMA_VERSION):
        MIGRATIONS[step](conn)
    if version != SCHEMA_VERSION:
        conn.execute(schema_info.update().where(schema_info.c.key == "version").values(value=str(SCHEMA_VERSION)))
    return SCHEMA_VERSION
