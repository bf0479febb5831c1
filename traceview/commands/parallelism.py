"""`traceview parallelism PATH`: the device mesh, communication per mesh axis, and the book's verdict per axis.

PATH is a trace (log dir, run dir or .xplane.pb; its HLO, or an hlo/ dump beside it, gives the mesh) or an
XLA dump folder / HLO file alone (then there are no times; give --target for the verdicts).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

from traceview.commands._options import (
    add_format,
    add_hlo,
    add_source,
    add_target,
    dump_target_from_args,
    dump_target_note,
    load_from_args,
    target_from_args,
    write_output,
)
from traceview.render import jsontext


def register(subparsers) -> None:
    parser = subparsers.add_parser("parallelism", help="mesh axes, communication per axis, the book's verdicts",
                                   description=__doc__)
    add_source(parser)
    add_format(parser, formats=("table", "json", "markdown"))
    add_target(parser)
    add_hlo(parser)
    parser.set_defaults(handler=run)


def report_from_args(args: argparse.Namespace):
    from traceview.parallelism.diagnose import from_hlo
    from traceview.trace.read import is_trace_path

    if is_trace_path(Path(args.path)) or not Path(args.path).exists():
        return load_from_args(args).parallelism()
    chip = target_from_args(args)
    found = dump_target_from_args(args) if chip is None else None  # the chip the dump was compiled for
    if found is None:
        report = from_hlo(args.path, chip)
    else:
        report = from_hlo(args.path, found.chip, target_source=found.source)
    report.warnings = dump_target_note(found) + report.warnings
    return report


def run(args: argparse.Namespace) -> int:
    from traceview.render.parallelism import parallelism_json, parallelism_markdown, parallelism_text

    report = report_from_args(args)
    if args.format == "json":
        text: str | Iterator[str] = jsontext.chunks(parallelism_json(report), end="\n")
    elif args.format == "markdown":
        text = parallelism_markdown(report)
    else:
        text = parallelism_text(report)
    write_output(text, args.output)
    return 0
