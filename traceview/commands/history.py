"""`traceview history add|report DB ...`: record CI runs in a database and show their trends.

DB is a SQLite file (created by the first `add`) or a PostgreSQL URL
(postgresql://user:password@host/db, e.g. from a CI secret). `add` records
one run: its step time with its spread, MFU, time by bound, gain, peak
memory, per-op (and per-scope) times, and its label, time and metadata.
`report` shows each metric's trend and its change points, each confirmed by
the runs' own step times (docs/history.md). Exit status: 0, or 2 for
unusable input (a missing or foreign database, a newer schema, a duplicate
label), the store left as it was.
"""

from __future__ import annotations

import argparse

from traceview.commands._arguments import count, fraction, input_path, named, output_path
from traceview.commands._options import add_read_options, add_target, read_options_from_args, write_output

MAX_LAST = 2**63 - 1    # SQL's LIMIT is a 64-bit integer: a larger --last asks for every run all the same


def register(subparsers) -> None:
    parser = subparsers.add_parser("history", help="record runs in a database; trends and change points",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="history_action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="record the run of a trace", description="Record the run of PATH in DB.")
    add.add_argument("db", metavar="DB", type=input_path("DB"),
                     help="SQLite file (created when missing) or postgresql:// URL")
    add.add_argument("path", metavar="PATH", type=input_path("PATH"),
                     help="the run's trace: a log dir, a run dir or one .xplane.pb file")
    add_run_identity(add, required=True)
    add.add_argument("--run", metavar="NAME", type=named("--run"), help="which run of a log dir (default: the newest)")
    add_target(add, "judge the ops against this chip (default: detected)")
    add_read_options(add)
    add.set_defaults(handler=run_add)

    report = actions.add_parser("report", help="each metric's trend and change points",
                                description="Each metric's trend over the recorded runs and its change points.")
    report.add_argument("db", metavar="DB", type=input_path("DB"), help="SQLite file or postgresql:// URL")
    report.add_argument("--format", choices=("table", "json", "markdown", "html", "junit"), default="table",
                        help="output format (default: table)")
    report.add_argument("-o", "--output", metavar="FILE", type=output_path("-o"),
                        help="write to FILE instead of stdout")
    report.add_argument("--metric", action="append", metavar="GLOB", type=named("--metric"),
                        help="metrics to show, by name or glob (repeatable; e.g. step_time, 'op:*', "
                             "'peak_memory:static:*'); default: the headline metrics")
    report.add_argument("--last", type=count("--last"), metavar="N", help="only the last N runs")
    report.add_argument("--confidence", type=fraction("--confidence"), default=0.95, metavar="P",
                        help="confidence that a change point is real (default 0.95)")
    report.set_defaults(handler=run_report)


def add_run_identity(parser: argparse.ArgumentParser, required: bool) -> None:
    """--label/--time/--meta (`history add`; `check --record` names the label itself)."""
    if required:
        parser.add_argument("--label", required=True, metavar="LABEL",
                            help="the run's unique name, e.g. the commit hash")
    parser.add_argument("--time", metavar="ISO", help="when the run happened (default: now), e.g. 2026-11-26T08:00Z")
    parser.add_argument("--meta", action="append", metavar="KEY=VALUE",
                        help="metadata to keep with the run (repeatable), e.g. commit=abc123 branch=main")


def need_history_extra() -> None:
    """UserError naming the extra when the history's libraries are not installed."""
    import importlib.util

    from traceview.errors import UserError

    missing = [m for m in ("sqlalchemy", "scipy") if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"the history needs {' and '.join(missing)}: pip install 'traceview[history]'")


def record_run(db: str, path: str, label: str, args: argparse.Namespace, result=None) -> int:
    """Record the run of trace `path` (or of its PipelineResult `result`, already built) in `db`."""
    from pathlib import Path

    from traceview.history.record import check_label, parse_meta, parse_time, run_from_analysis
    from traceview.history.store import locate, open_store

    check_label(label)
    when, meta = parse_time(args.time), parse_meta(args.meta)   # a bad flag fails before the slow part
    locate(db)
    if result is None:
        import traceview

        with _reading(args):
            result = traceview.load(path, run=args.run, target=args.target,
                                    hardware_file=args.hardware_file).pipeline
    record = run_from_analysis(result, label, time=when, meta=meta, trace_path=str(Path(path).resolve()))
    with open_store(db, create=True) as store:
        return store.add(record)


def _reading(args: argparse.Namespace):
    from traceview.trace.read import read_options

    return read_options(read_options_from_args(args))


def run_add(args: argparse.Namespace) -> int:
    import sys

    from traceview.errors import UserError
    from traceview.history.store import locate
    from traceview.trace.read import is_trace_path

    need_history_extra()
    locate(args.db)
    from pathlib import Path

    if not Path(args.path).exists():
        raise UserError(f"{args.path}: no such file or directory")
    if not is_trace_path(Path(args.path)):
        raise UserError(f"{args.path}: not a trace (give a log dir, a run dir or an .xplane.pb file)")
    run_id = record_run(args.db, args.path, args.label, args)
    print(f"recorded run {args.label!r} (#{run_id}) in {locate(args.db).shown}", file=sys.stderr)
    return 0


def run_report(args: argparse.Namespace) -> int:
    from traceview.errors import UserError
    from traceview.history.store import open_store
    from traceview.history.trends import build_report
    from traceview.render.history import render

    need_history_extra()
    if not 0 < args.confidence < 1:
        raise UserError(f"--confidence {args.confidence}: must be between 0 and 1, e.g. 0.95")
    with open_store(args.db) as store:
        last = None if args.last is None else min(args.last, MAX_LAST)
        report = build_report(store, args.metric, last, args.confidence)
    write_output(render(report, args.format), args.output)
    return 0
