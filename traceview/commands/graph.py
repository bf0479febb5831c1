"""`traceview graph PATH --op NAME`: the HLO neighbourhood of one op, coloured by its bound.

Operands and users to --depth hops; a fusion is opened into its fused
computation. On a trace, each node is coloured by its bound on the target
and labelled with its time and gain; on an HLO dump the nodes are plain.
--format dot (Graphviz), svg (needs Graphviz's `dot`) or json.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from traceview.commands._arguments import input_path, named, output_path
from traceview.commands._options import add_hlo, add_read_options, add_target, target_from_args, write_output
from traceview.render import jsontext


def register(subparsers) -> None:
    parser = subparsers.add_parser("graph", help="draw an op's HLO neighbourhood (operands, users, fusion)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", metavar="PATH", type=input_path("PATH"),
                        help="a trace (log dir, run dir, .xplane.pb), an XLA dump folder or an HLO file")
    parser.add_argument("--op", required=True, metavar="NAME", type=named("--op"),
                        help="HLO instruction name, e.g. fusion.3")
    parser.add_argument("--module", metavar="NAME", type=named("--module"),
                        help="module holding the op, when several have one so named (NAME or NAME(program id))")
    parser.add_argument("--depth", type=_depth, default=1, metavar="N",
                        help="hops to operands and users (default 1)")
    parser.add_argument("--no-expand", action="store_true", help="do not open a fusion into its computation")
    parser.add_argument("--run", metavar="NAME", type=named("--run"),
                        help="which run of a log dir (default: the newest)")
    add_target(parser)
    add_hlo(parser)
    parser.add_argument("--format", choices=("dot", "svg", "json"), default="dot")
    parser.add_argument("-o", "--output", metavar="FILE", type=output_path("-o"),
                        help="write to FILE instead of stdout")
    add_read_options(parser)
    parser.set_defaults(handler=run)


def _depth(text: str) -> int:
    """``--depth``: 0 (the op alone) to the neighbourhood's MAX_DEPTH, known before the trace is read."""
    from traceview.config.values import whole_number
    from traceview.graph.neighbourhood import MAX_DEPTH

    return whole_number(text, "--depth", 0, MAX_DEPTH)


def run(args: argparse.Namespace) -> int:
    from traceview.graph.neighbourhood import annotate, op_graph
    from traceview.parsers.hlo.dump import load_hlo_modules
    from traceview.render.graph import graph_json, to_dot, to_svg
    from traceview.trace.read import is_trace_path

    path = Path(args.path)
    records: list[dict] = []
    if is_trace_path(path):
        from traceview.analysis.public import op_rows
        from traceview.commands._options import load_from_args

        pipeline = load_from_args(args).pipeline
        modules = pipeline.hlo.every
        records = op_rows(pipeline.ops)
    else:
        target_from_args(args)   # a dump's nodes are plain, but a chip or hardware file named is still checked
        modules, _ = load_hlo_modules(path, stage=args.stage)
    graph = op_graph(modules, args.op, depth=args.depth, module=args.module, expand=not args.no_expand)
    annotate(graph, records)
    if args.format == "json":
        text = jsontext.dumps(graph_json(graph)) + "\n"
    else:
        text = to_dot(graph)
        if args.format == "svg":
            text = to_svg(text)
    write_output(text, args.output)
    return 0
