"""`traceview memory PATH`: peak memory, what holds it, and whether it fits the target.

PATH is a trace (runtime peaks from its allocator events, static peaks from
the HLO protos it carries), an XLA dump folder or an HLO proto file (static
peaks from the buffer assignment: no accelerator needed).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import traceview
from traceview.commands._arguments import count, input_path, named, output_path
from traceview.commands._options import (
    add_read_options,
    add_target,
    dump_target_from_args,
    dump_target_note,
    name_the_run,
    read_options_from_args,
    target_from_args,
    write_output,
)
from traceview.render import jsontext


def register(subparsers) -> None:
    parser = subparsers.add_parser("memory", help="peak memory per allocator and per HLO module, headroom",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", metavar="PATH", type=input_path("PATH"),
                        help="a trace (log dir, run dir, .xplane.pb), an XLA dump folder or an HLO proto file")
    parser.add_argument("--run", metavar="NAME", type=named("--run"),
                        help="which run of a log dir (default: the newest)")
    add_target(parser, "chip whose HBM the peaks must fit (default: the chip the trace ran on)")
    parser.add_argument("--format", choices=("table", "json", "markdown"), default="table")
    parser.add_argument("--top", type=count("--top"), default=10, metavar="N", help="rows per list (default 10)")
    parser.add_argument("-o", "--output", metavar="FILE", type=output_path("-o"),
                        help="write to FILE instead of stdout")
    add_read_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from traceview.render.memory import memory_json, memory_text
    from traceview.trace.read import is_trace_path

    if is_trace_path(Path(args.path)) or not Path(args.path).exists():
        # each host's allocator events read where the host is read (the pool's workers), not again here
        options = dataclasses.replace(read_options_from_args(args), allocator_events=True)
        name_the_run(args.path, args.run)
        report = traceview.load(args.path, run=args.run, target=args.target, hardware_file=args.hardware_file,
                                read_options=options).memory()
    else:
        from traceview.memory.view import memory_from_dump

        chip = target_from_args(args)
        found = dump_target_from_args(args) if chip is None else None  # the chip the dump was compiled for
        if found is not None and found.chip is not None:
            report = memory_from_dump(args.path, found.chip, found.source)
        else:
            report = memory_from_dump(args.path, chip)
        report.warnings = dump_target_note(found) + report.warnings
    if args.format == "json":
        text: str | Iterator[str] = jsontext.chunks(memory_json(report), end="\n")
    else:
        text = memory_text(report, top=args.top, markdown=args.format == "markdown")
    write_output(text, args.output)
    return 0
