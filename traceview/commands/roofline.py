"""`traceview roofline PATH --plot out.png`: the roofline chart of a trace (or its points as a table)."""

from __future__ import annotations

import argparse
import json
import sys

from traceview.commands._options import add_hlo, add_source, add_target, load_from_args, write_output
from traceview.errors import UserError


def register(subparsers) -> None:
    parser = subparsers.add_parser("roofline", help="roofline chart (png, svg, pdf, html) of a trace's ops",
                                   description=__doc__)
    add_source(parser)
    add_target(parser)
    add_hlo(parser)
    parser.add_argument("--plot", metavar="FILE", help="write the chart to FILE (.png, .svg, .pdf or .html)")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="for the points")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the points to FILE instead of stdout")
    parser.set_defaults(handler=run)


PLOT_SUFFIXES = (".png", ".svg", ".pdf", ".html")


def run(args: argparse.Namespace) -> int:
    if args.plot and not args.plot.lower().endswith(PLOT_SUFFIXES):
        raise UserError(f"{args.plot}: the plot must be .png, .svg, .pdf or .html")
    from traceview.render.charts import roofline_points, save_plot
    from traceview.render.report import op_records
    from traceview.render.tables import fmt_si, fmt_time_us, text_table
    from traceview.roofline import ridge_point

    analysis = load_from_args(args)
    if analysis.target is None:
        raise UserError(f"{args.path}: no chip detected for the roofline; give --target "
                        "(`traceview hardware` lists them)")
    points = roofline_points(analysis.pipeline.ops)
    if args.plot:
        save_plot(points, analysis.target, args.plot)
        print(f"wrote {args.plot}: {len(points)} ops on the {analysis.target.name} roofline", file=sys.stderr)
    if args.format == "json":
        text = json.dumps({"target": analysis.target.name, "ridge_point": ridge_point(analysis.target),
                           "points": op_records(points)}, indent=1) + "\n"
    else:
        ridge = ridge_point(analysis.target)
        rows = [[r["module"], r["op"], r["bound"], f"{r['intensity']:.3g}", fmt_si(r["achieved_flops"], "FLOP/s"),
                 fmt_time_us(r["time_us"])] for r in points.sort_values("time_us", ascending=False).head(30)
                .to_dict("records")]
        text = (f"{analysis.target.name}: ridge point {ridge:.0f} FLOPs/byte (bf16)\n" if ridge else "") + \
            text_table(["module", "op", "bound", "FLOPs/byte", "achieved", "time"], rows, "lllrrr") + "\n"
    write_output(text, args.output)
    return 0
