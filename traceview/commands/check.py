"""`traceview check NEW --baseline BASE` (or `--history DB`): fail a CI job when NEW regressed beyond its budgets.

Timing checks are noise-aware: with several steps per trace, a slowdown
fails only when it exceeds its budget and its confidence interval lies above
zero. HLO dumps give static checks (FLOPs, bytes, collective bytes per
module) that need no accelerator and have no noise. With `--history DB`
(a history store: `traceview history`), NEW is checked, with the same
budgets, against the runs recorded since the last change point of the step
time, and `--record LABEL` then records NEW there. Exit status: 0 within
budget, 1 a regression, 2 unusable input.
"""

from __future__ import annotations

import argparse
import sys

from traceview.commands._arguments import input_path
from traceview.commands.diff import add_comparison_options, budgets_from_args, compare, write_reports
from traceview.commands.history import add_run_identity
from traceview.errors import UserError


def register(subparsers) -> None:
    parser = subparsers.add_parser("check", help="exit 1 when NEW regressed against a baseline (for CI)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("new", metavar="NEW", type=input_path("NEW"),
                        help="the candidate: trace, HLO dump or JSON baseline")
    parser.add_argument("--baseline", metavar="BASE", type=input_path("--baseline"),
                        help="the reference: trace, HLO dump or JSON written by `traceview analyze --format json`")
    history = parser.add_argument_group("against the history (instead of --baseline)")
    history.add_argument("--history", metavar="DB", type=input_path("--history"),
                         help="compare with the runs recorded in DB (SQLite file or postgresql:// URL) since the "
                              "last change point of the step time")
    history.add_argument("--record", metavar="LABEL", help="then record NEW in DB under this label")
    add_run_identity(history, required=False)
    add_comparison_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.history is None:
        if args.baseline is None:
            raise UserError("give the reference: --baseline BASE, or --history DB")
        if args.record is not None or args.time is not None or args.meta is not None:   # "" too
            raise UserError("--record, --time and --meta need --history DB")
        return compare(args, args.baseline, args.new)
    if args.baseline is not None:
        raise UserError("give --baseline BASE or --history DB, not both")
    return check_against_history(args)


def check_against_history(args: argparse.Namespace) -> int:
    """NEW against the stable window of the history, then (--record) NEW recorded; the trends appended."""
    from pathlib import Path

    import traceview
    from traceview.commands.history import _reading, need_history_extra

    need_history_extra()
    from traceview.history.record import check_label, parse_meta, parse_time, run_from_analysis
    from traceview.history.store import locate, open_store
    from traceview.history.trends import build_report
    from traceview.history.window import stable_window, window_snapshot
    from traceview.render.history import history_markdown, history_text
    from traceview.trace.read import is_trace_path

    budgets = budgets_from_args(args)   # every flag checked before the slow part
    when, meta = parse_time(args.time), parse_meta(args.meta)
    if args.record is not None:
        check_label(args.record, "--record")
    location = locate(args.history)
    new_path = Path(args.new)
    if not new_path.exists():
        raise UserError(f"{args.new}: no such file or directory")
    if not is_trace_path(new_path):
        raise UserError(f"{args.new}: --history compares traces: give a log dir, a run dir or an .xplane.pb file")
    with open_store(args.history, create=args.record is not None) as store:
        runs, since = stable_window(store, budgets.confidence)
        if runs.empty and args.record is None:
            raise UserError(f"{location.shown}: no runs recorded yet (add --record LABEL to record this one)")
        with _reading(args):
            analysis = traceview.load(args.new, run=args.run, target=args.target, hardware_file=args.hardware_file)
        verdict = None
        if not runs.empty:
            start = f"since the change at {since}" if since else "all recorded"
            label = f"history {runs['label'].iloc[0]}..{runs['label'].iloc[-1]} ({len(runs)} runs, {start})"
            verdict = traceview.check(analysis, window_snapshot(store, runs, label), budgets)
        if args.record is not None:
            store.add(run_from_analysis(analysis.pipeline, args.record, time=when, meta=meta,
                                        trace_path=str(new_path.resolve())))
            print(f"recorded run {args.record!r} in {location.shown}", file=sys.stderr)
        report = build_report(store, confidence=budgets.confidence)
    if verdict is None:
        print(f"{location.shown}: the first run recorded; nothing to compare with yet", file=sys.stderr)
        return 0

    def appendix(fmt: str) -> str:
        return "\n" + (history_markdown(report, title="####") if fmt == "markdown" else history_text(report))

    assert verdict.diff is not None
    return write_reports(args, verdict.diff, verdict, appendix)
