"""`traceview check NEW --baseline BASE`: fail a CI job when NEW regressed beyond its budgets.

Timing checks are noise-aware: with several steps per trace, a slowdown
fails only when it exceeds its budget and its confidence interval lies above
zero. HLO dumps give static checks (FLOPs, bytes, collective bytes per
module) that need no accelerator and have no noise. Exit status: 0 within
budget, 1 a regression, 2 unusable input.
"""

from __future__ import annotations

import argparse

from traceview.commands.diff import add_comparison_options, compare


def register(subparsers) -> None:
    parser = subparsers.add_parser("check", help="exit 1 when NEW regressed against a baseline (for CI)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("new", metavar="NEW", help="the candidate: trace, HLO dump or JSON baseline")
    parser.add_argument("--baseline", metavar="BASE", required=True,
                        help="the reference: trace, HLO dump or JSON written by `traceview analyze --format json`")
    add_comparison_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return compare(args, args.baseline, args.new)
