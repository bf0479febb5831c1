"""Options shared by several sub-commands, so they read the same everywhere."""

from __future__ import annotations

import argparse
import sys

import traceview


def add_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH",
                        help="a log dir (plugins/profile/<run>/), a run dir, or one .xplane.pb file")
    parser.add_argument("--run", metavar="NAME", help="which run of a log dir (default: the newest)")


def add_format(parser: argparse.ArgumentParser, formats=("table", "json", "csv", "markdown")) -> None:
    parser.add_argument("--format", choices=formats, default=formats[0],
                        help=f"output format (default: {formats[0]})")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")


def add_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", metavar="CHIP",
                        help="chip to judge the ops against (default: the chip the trace was captured on); "
                             "`traceview hardware` lists them")
    parser.add_argument("--hardware-file", metavar="FILE",
                        help="JSON file adding or overriding chips in the hardware database")


def add_hlo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hlo", metavar="DIR",
                        help="XLA dump folder (--xla_dump_to) or HLO file with the modules the trace ran "
                             "(default: the trace's own HLO, or an hlo/ folder beside it)")
    parser.add_argument("--stage", choices=("after", "before"), default="after",
                        help="which dumped stage of a module to use (default: after optimizations)")


def load_from_args(args: argparse.Namespace) -> traceview.Analysis:
    """`traceview.load` of the trace PATH names (with a progress bar), as the source/target/HLO options say."""
    return traceview.load(args.path, run=args.run, target=args.target, hlo=args.hlo, stage=args.stage,
                          hardware_file=args.hardware_file, progress=True,
                          per_device=getattr(args, "per_device", False))


def write_output(text: str, output: str | None) -> None:
    if output:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
