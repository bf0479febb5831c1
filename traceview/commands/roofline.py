"""`traceview roofline PATH --plot out.png`: the roofline chart of a trace (or its points as a table)."""

from __future__ import annotations

import argparse
import sys

from traceview.commands._arguments import output_path
from traceview.commands._options import (
    add_hlo,
    add_source,
    add_target,
    cannot_write,
    load_from_args,
    write_output,
)
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
    parser.add_argument("--plot", metavar="FILE", type=output_path("--plot"),
                        help="write the chart to FILE (.png, .svg, .pdf or .html)")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="for the points")
    parser.add_argument("-o", "--output", metavar="FILE", type=output_path("-o"),
                        help="write the points to FILE instead of stdout")
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
    pipeline = load_from_args(args).pipeline
    judged = pipeline.judged
    if judged is None:
        raise UserError(f"{args.path}: no chip detected for the roofline; give --target "
                        "(`traceview hardware` lists them)")
    points = roofline_points(pipeline.ops)
    if args.plot:
        measured_on = judged.measured_on.name if judged.measured_on is not None else None
        try:
            save_plot(points, judged.chip, args.plot, ops=pipeline.ops, measured_on=measured_on)
        except OSError as exc:
            raise cannot_write(args.plot, exc) from None
        print(f"wrote {args.plot}: {len(points)} of {len(pipeline.ops)} ops on the {judged.chip.name} roofline",
              file=sys.stderr)
    note = unplaceable_note(pipeline.ops)
    ridges = drawn_ridge_points(judged.chip, pipeline.ops)   # the peaks the chart draws, the program's first
    if args.format == "json":
        text = jsontext.dumps({"target": judged.chip.name, "projected": judged.projected,
                               "ridge_point": ridges[0][2] if ridges else None,
                               "ridge_point_dtype": ridges[0][0] if ridges else None,
                               "ridge_points": {dtype: ridge for dtype, _, ridge in ridges},
                           "points": op_rows(points),
                           "not_placed": op_rows(unplaceable_ops(pipeline.ops))}) + "\n"
    else:
        ridge = ridge_text(judged.chip, pipeline.ops)
        rows = [[r["module"], r["op"], r["bound"], f"{r['intensity']:.3g}", fmt_si(r["achieved_flops"], "FLOP/s"),
                 fmt_time_us(r["time_us"])] for r in points.sort_values("time_us", ascending=False).head(30)
                .to_dict("records")]
        projected = (f"projected: the points are the rates measured on {judged.measured_on.name}, placed on "
                     f"{judged.chip.name}'s roofline; bound as judged on {judged.chip.name}\n"
                     if judged.measured_on is not None else "")
        text = projected + (f"{judged.chip.name}: {ridge}\n" if ridge else "") + \
            text_table(["module", "op", "bound", "FLOPs/byte", "achieved", "time"], rows, "lllrrr") + "\n" + \
            (note + "\n" if note else "")
    write_output(text, args.output)
    return 0
