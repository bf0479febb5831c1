"""`traceview hardware`: the chips traceview knows, with every figure and its source."""

from __future__ import annotations

import argparse

from traceview.commands._arguments import input_path, output_path
from traceview.commands._options import write_output
from traceview.render import jsontext


def register(subparsers) -> None:
    parser = subparsers.add_parser("hardware", help="list the chips in the hardware database",
                                   description=__doc__)
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--hardware-file", metavar="FILE", type=input_path("--hardware-file"),
                        help="JSON file adding or overriding chips")
    parser.add_argument("-o", "--output", metavar="FILE", type=output_path("-o"),
                        help="write to FILE instead of stdout")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from traceview.hardware.database import load_hardware
    from traceview.render.hardware import format_hardware_table, hardware_json

    db = load_hardware(args.hardware_file)
    if args.format == "json":
        text = jsontext.dumps(hardware_json(db)) + "\n"
    else:
        text = format_hardware_table(db) + "\n"
    write_output(text, args.output)
    return 0
