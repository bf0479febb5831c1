"""`traceview analyze PATH`: devices, steps and the ops that matter, for a person or a program."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from traceview.commands._arguments import count
from traceview.commands._options import add_format, add_hlo, add_source, add_target, load_from_args, write_output
from traceview.render import jsontext


def register(subparsers) -> None:
    parser = subparsers.add_parser("analyze", help="per-op times (and roofline labels) of a trace",
                                   description=__doc__)
    add_source(parser)
    add_format(parser)
    add_target(parser)
    parser.add_argument("--top", type=count("--top"), default=20, metavar="N", help="ops to show (default 20)")
    parser.add_argument("--per-device", action="store_true", help="one row per op and device")
    add_hlo(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from traceview.render.analyze import analysis_csv, analysis_markdown, analysis_text
    from traceview.render.analyze_views import mesh_line, report_sections

    # every format prints what the analysis derives, its advice weighs the memory view's peaks
    analysis = load_from_args(args, keep_ops=False, allocator_events=True)
    if args.format == "json":
        text: str | Iterator[str] = jsontext.chunks(analysis.to_json(), end="\n")
    elif args.format == "csv":
        text = analysis_csv(analysis.pipeline)
    else:
        sections = report_sections(analysis.pipeline, analysis.advice(), analysis.scope_tree(), analysis.serving())
        report = analysis_markdown if args.format == "markdown" else analysis_text
        text = report(analysis.pipeline, top=args.top, mesh_line=mesh_line(analysis.mesh()), sections=sections)
    write_output(text, args.output)
    return 0
