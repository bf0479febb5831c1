"""`traceview hlo PATH`: FLOPs, bytes and collective volume of every HLO module and instruction.

PATH is an XLA dump folder (--xla_dump_to), one HLO text or proto file, or a
trace (whose own HLO, or an hlo/ folder beside it, is read).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from traceview.commands._options import write_output
from traceview.parsers.discover import is_trace_file


def register(subparsers) -> None:
    parser = subparsers.add_parser("hlo", help="cost model of HLO modules (dump folder, file or trace)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", metavar="PATH")
    parser.add_argument("--stage", choices=("after", "before"), default="after",
                        help="which dumped stage of a module (default: after optimizations)")
    parser.add_argument("--run", metavar="NAME", help="which run, when PATH is a log dir")
    parser.add_argument("--format", choices=("table", "json", "csv", "markdown"), default="table")
    parser.add_argument("--top", type=int, default=10, metavar="N", help="instructions per module (default 10)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.set_defaults(handler=run)


def _is_trace(path: Path) -> bool:
    if path.is_file():
        return is_trace_file(path)
    return path.is_dir() and any(is_trace_file(p) for p in path.rglob("*.xplane.pb*"))


def run(args: argparse.Namespace) -> int:
    from traceview.hlo_report import hlo_report
    from traceview.load import load_profile
    from traceview.modules import profile_modules
    from traceview.parsers.hlo_dump import load_hlo_modules
    from traceview.render.hlo import hlo_csv, hlo_json, hlo_text

    path = Path(args.path)
    if _is_trace(path):
        modules, warnings = profile_modules(load_profile(path, run=args.run), stage=args.stage)
        if not modules:
            warnings.append(f"{path}: the trace carries no HLO and no dump folder was found beside it")
    else:
        modules, warnings = load_hlo_modules(path, stage=args.stage)
    report, cost_warnings = hlo_report(modules)
    warnings = list(dict.fromkeys(warnings + cost_warnings))
    if args.format == "json":
        text = json.dumps(hlo_json(report, warnings), indent=1) + "\n"
    elif args.format == "csv":
        text = hlo_csv(report)
    else:
        text = hlo_text(report, warnings, top=args.top, markdown=args.format == "markdown")
    write_output(text, args.output)
    return 0
