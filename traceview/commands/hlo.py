"""`traceview hlo PATH`: FLOPs, bytes and collective volume of every HLO module and instruction.

PATH is an XLA dump folder (--xla_dump_to), one HLO text or proto file, or a
trace (whose own HLO, or an hlo/ folder beside it, is read).
"""

from __future__ import annotations

import argparse

import traceview
from traceview.commands._arguments import count, input_path, named, output_path
from traceview.commands._options import add_read_options, reading, write_output
from traceview.render import jsontext


def register(subparsers) -> None:
    parser = subparsers.add_parser("hlo", help="cost model of HLO modules (dump folder, file or trace)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", metavar="PATH", type=input_path("PATH"))
    parser.add_argument("--stage", choices=("after", "before"), default="after",
                        help="which dumped stage of a module (default: after optimizations)")
    parser.add_argument("--run", metavar="NAME", type=named("--run"), help="which run, when PATH is a log dir")
    parser.add_argument("--format", choices=("table", "json", "csv", "markdown"), default="table")
    parser.add_argument("--top", type=count("--top", low=0), default=10, metavar="N",
                        help="instructions per module (default 10)")
    parser.add_argument("-o", "--output", metavar="FILE", type=output_path("-o"),
                        help="write to FILE instead of stdout")
    add_read_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    with reading(args):
        report = traceview.hlo(args.path, run=args.run, stage=args.stage)
    if args.format == "json":
        text = jsontext.dumps(report.to_json()) + "\n"
    elif args.format == "csv":
        text = report.to_csv()
    else:
        text = report.to_text(top=args.top, markdown=args.format == "markdown")
    write_output(text, args.output)
    return 0
