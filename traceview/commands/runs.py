"""`traceview runs PATH`: the profiling runs in a log dir, newest last, with their hosts."""

from __future__ import annotations

import argparse

from traceview.commands._arguments import input_path, output_path
from traceview.commands._options import write_output
from traceview.parsers.discover import list_runs
from traceview.render import jsontext
from traceview.render.tables import text_table
from traceview.units import fmt_si


def register(subparsers) -> None:
    parser = subparsers.add_parser("runs", help="list the runs and hosts in a log dir", description=__doc__)
    parser.add_argument("path", metavar="PATH", type=input_path("PATH"),
                        help="a log dir, a run dir or a trace file")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("-o", "--output", metavar="FILE", type=output_path("-o"),
                        help="write to FILE instead of stdout")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    runs = list_runs(args.path)
    if args.format == "json":
        text = jsontext.dumps({"runs": [r.summary() for r in runs]}) + "\n"
    else:
        rows = [[r.name, r.format, str(len(r.files)), ", ".join(r.hosts), fmt_si(r.total_bytes, "B"),
                 r.time.strftime("%Y-%m-%d %H:%M:%S UTC"), r.time_source] for r in runs]
        text = text_table(["run", "format", "hosts", "host names", "size", "taken", "from"], rows,
                          "llrlrll") + "\n"
        if any(r.time_source == "file time" for r in runs):
            text += ("'file time' is a file's modification time (a copy or a clone resets it): the trace "
                     "does not record when it was taken\n")
        if len(runs) > 1:
            text += f"analyze picks the newest ({runs[-1].name}) unless --run NAME is given\n"
    write_output(text, args.output)
    return 0
