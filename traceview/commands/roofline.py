"""`traceview roofline PATH --plot out.png`: the roofline chart of a trace (or its points as a table)."""

from __future__ import annotations

import argparse
import sys

from traceview.commands._options import add_hlo, add_source, add_target, load_from_args, write_output
from traceview.errors import UserError
from traceview.render import jsontext
from traceview.render.tables import text_table
from traceview.units import fmt_si, fmt_time_us


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
    from traceview.analysis.public import op_rows
    from traceview.render.charts import (
        drawn_ridge_points,
        ridge_text,
        roofline_points,
        save_plot,
        unplaceable_note,
        unplaceable_ops,
    )

    if args.plot and not args.plot.lower().endswith(PLOT_SUFFIXES):
        raise UserError(f"{args.plot}: the plot must be .png, .svg, .pdf or .html")
    analysis = load_from_args(args).pipeline
    if analysis.target is None:
        raise UserError(f"{args.path}: no chip detected for the roofline; give --target "
                        "(`traceview hardware` lists them)")
    points = roofline_points(analysis.ops)
    if args.plot:
        measured_on = analysis.capture_chip.name if analysis.projected and analysis.capture_chip is not None else None
        save_plot(points, analysis.target, args.plot, ops=analysis.ops, measured_on=measured_on)
        print(f"wrote {args.plot}: {len(points)} of {len(analysis.ops)} ops on the {analysis.target.name} roofline",
              file=sys.stderr)
    note = unplaceable_note(analysis.ops)
    ridges = drawn_ridge_points(analysis.target, analysis.ops)   # the peaks the chart draws, the program's first
    if args.format == "json":
        text = jsontext.dumps({"target": analysis.target.name, "projected": bool(analysis.projected),
                               "ridge_point": ridges[0][2] if ridges else None,
                               "ridge_point_dtype": ridges[0][0] if ridges else None,
                               "ridge_points": {dtype: ridge for dtype, _, ridge in ridges},
                           "points": op_rows(points),
                           "not_placed": op_rows(unplaceable_ops(analysis.ops))}) + "\n"
    else:
        ridge = ridge_text(analysis.target, analysis.ops)
        rows = [[r["module"], r["op"], r["bound"], f"{r['intensity']:.3g}", fmt_si(r["achieved_flops"], "FLOP/s"),
                 fmt_time_us(r["time_us"])] for r in points.sort_values("time_us", ascending=False).head(30)
                .to_dict("records")]
        measured = analysis.capture_chip.name if analysis.capture_chip is not None else "the capture chip"
        projected = (f"projected: the points are the rates measured on {measured}, placed on "
                     f"{analysis.target.name}'s roofline; bound as judged on {analysis.target.name}\n"
                     if analysis.projected else "")
        text = projected + (f"{analysis.target.name}: {ridge}\n" if ridge else "") + \
            text_table(["module", "op", "bound", "FLOPs/byte", "achieved", "time"], rows, "lllrrr") + "\n" + \
            (note + "\n" if note else "")
    write_output(text, args.output)
    return 0
