"""`traceview diff BASE NEW`: what changed between two traces, HLO dumps or stored baselines.

BASE and NEW are each a trace (log dir, run dir or .xplane.pb file), an HLO
dump folder or HLO file, or a JSON baseline written by `traceview analyze
--format json` (or `traceview hlo --format json`). Exit status: 0 within
budget, 1 a regression, 2 unusable input.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

import traceview
from traceview.commands._arguments import count, input_path, named, output_path
from traceview.commands._options import (
    add_read_options,
    add_target,
    cannot_write,
    name_the_run,
    read_options_from_args,
    write_output,
)
from traceview.errors import UserError

if TYPE_CHECKING:
    from traceview.regress.budgets import Budgets
    from traceview.regress.check import Verdict
    from traceview.regress.diff import Diff

FORMATS = ("table", "markdown", "json", "junit")


def add_comparison_options(parser: argparse.ArgumentParser) -> None:
    """Options `diff` and `check` share: how to read the inputs, budgets, outputs."""
    read = parser.add_argument_group("reading the inputs")
    read.add_argument("--run", metavar="NAME", type=named("--run"),
                      help="which run of NEW's log dir (default: the newest)")
    read.add_argument("--base-run", metavar="NAME", type=named("--base-run"),
                      help="which run of BASE's log dir (default: the newest)")
    add_target(read, "judge both sides against this chip (default: detected)")
    read.add_argument("--stage", choices=("after", "before"), default="after",
                      help="HLO dump stage to compare (default: after optimizations)")
    add_read_options(read)
    budgets = parser.add_argument_group("budgets (flags override --config, which overrides the defaults)")
    budgets.add_argument("--config", metavar="FILE", type=input_path("--config"),
                         help="TOML file with budgets, per-op rules and absolute limits")
    budgets.add_argument("--max-step-regression", metavar="PCT", help="median step time slowdown (default 5%%)")
    budgets.add_argument("--max-op-regression", metavar="PCT", help="per-op time slowdown (default 10%%)")
    budgets.add_argument("--max-scope-regression", metavar="PCT",
                         help="per named scope time slowdown (default: scopes reported, not judged)")
    budgets.add_argument("--min-op-time", metavar="TIME",
                         help="ops under this time per step are not judged (default 1ms)")
    budgets.add_argument("--max-flops-increase", metavar="PCT", help="HLO module FLOPs (default 1%%)")
    budgets.add_argument("--max-bytes-increase", metavar="PCT", help="HLO module bytes accessed (default 1%%)")
    budgets.add_argument("--max-collective-increase", metavar="PCT",
                         help="HLO module collective bytes (default 1%%)")
    budgets.add_argument("--max-peak-memory-increase", metavar="PCT|SIZE",
                         help="peak memory per device allocator and per HLO module: relative (1%%, the default) "
                              "or absolute (256MiB, 1GB)")
    budgets.add_argument("--max-step-time", metavar="TIME", help="absolute: NEW's median step time at most this")
    budgets.add_argument("--min-mfu", metavar="PCT", help="absolute: NEW's MFU at least this")
    budgets.add_argument("--confidence", metavar="P", help="confidence of the noise intervals (default 0.95)")
    budgets.add_argument("--programs", metavar="GLOBS",
                         help="also gate these programs (comma-separated globs); by default only the programs "
                              "that run every step are gated, the others reported")
    out = parser.add_argument_group("output")
    out.add_argument("--format", choices=FORMATS, default="table", help="report format (default: table)")
    out.add_argument("-o", "--output", metavar="FILE", type=output_path("-o"),
                     help="write the report to FILE instead of stdout")
    out.add_argument("--markdown-out", metavar="FILE", type=output_path("--markdown-out"),
                     help="also append the Markdown report to FILE (e.g. $GITHUB_STEP_SUMMARY)")
    out.add_argument("--junit-out", metavar="FILE", type=output_path("--junit-out"),
                     help="also write the JUnit XML report to FILE")
    out.add_argument("--top", type=count("--top"), default=15, metavar="N", help="changed ops to list (default 15)")


def budgets_from_args(args: argparse.Namespace) -> Budgets:
    from traceview.regress.budgets import BUDGET_KEYS, make_budgets

    overrides = {}
    for flag, (name, parse) in BUDGET_KEYS.items():
        value = getattr(args, flag, None)
        if value is not None:
            overrides[name] = parse(value, "--" + flag.replace("_", "-"))
    budgets = make_budgets(args.config, **overrides)
    if not 0 < budgets.confidence < 1:
        raise UserError(f"--confidence: {budgets.confidence} must be between 0 and 1, e.g. 0.95")
    return budgets


def compare(args: argparse.Namespace, base_path: str, new_path: str) -> int:
    """Load both sides (`traceview.diff` / `traceview.check`), write the reports; 0 pass, 1 regression."""
    from traceview.regress.check import run_checks
    from traceview.trace.read import read_options

    budgets = budgets_from_args(args)  # before the slow part: a bad flag fails fast
    name_the_run(base_path, args.base_run)
    name_the_run(new_path, args.run)
    sides = {"run": args.run, "base_run": args.base_run, "target": args.target,
             "hardware_file": args.hardware_file, "stage": args.stage}
    with read_options(read_options_from_args(args)):
        if args.command == "check":  # refuses unrelated inputs and a verdict with nothing checked
            verdict = traceview.check(new_path, base_path, budgets, **sides)
            diff = verdict.diff
            assert diff is not None
        else:
            diff = traceview.diff(base_path, new_path, budgets=budgets, **sides)
            verdict = run_checks(diff, budgets)
    return write_reports(args, diff, verdict)


def write_reports(args: argparse.Namespace, diff: Diff, verdict: Verdict, appendix: Callable[[str], str] | None = None
                  ) -> int:
    """The report (--format, -o) and the extra files (--markdown-out, --junit-out); 0 pass, 1 regression.

    `appendix(format)` adds a block after the table or Markdown report (check --history: the trends).
    """
    from traceview.render.regress import diff_junit, diff_markdown, render

    command = "check" if args.command == "check" else "diff"
    extra = appendix or (lambda fmt: "")
    text = render(diff, verdict, args.format, top=args.top, command=command)
    if args.format in ("table", "markdown"):
        text += extra(args.format)
    write_output(text, args.output)
    if args.markdown_out:
        _write(args.markdown_out, diff_markdown(diff, verdict, top=args.top, command=command) + extra("markdown"),
               append=True)
    if args.junit_out:
        _write(args.junit_out, diff_junit(diff, verdict))
    return 0 if verdict.passed else 1


def _write(path: str, text: str, append: bool = False) -> None:
    """One of the extra reports; a file that cannot be written is the user's to fix (exit 2), not a verdict."""
    try:
        with open(path, "a" if append else "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise cannot_write(path, exc) from None


def register(subparsers) -> None:
    parser = subparsers.add_parser("diff", help="compare two traces, HLO dumps or baselines",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", metavar="BASE", type=input_path("BASE"),
                        help="the reference: trace, HLO dump or JSON baseline")
    parser.add_argument("new", metavar="NEW", type=input_path("NEW"),
                        help="the candidate: trace, HLO dump or JSON baseline")
    add_comparison_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return compare(args, args.base, args.new)
