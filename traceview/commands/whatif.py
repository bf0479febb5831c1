"""`traceview whatif PATH`: the step time, MFU and memory per chip of other meshes, batches, chip counts and
chips, projected from the measured step with the book's models (docs/whatif.md).

By default: every factorisation of the trace's chips over the roles its program uses, at today's batch,
twice and half of it, on the chip the trace ran on.
"""

from __future__ import annotations

import argparse

from traceview.commands._options import (
    add_format,
    add_hlo,
    add_source,
    add_target,
    load_from_args,
    target_from_args,
    write_output,
)
from traceview.render import jsontext


def register(subparsers) -> None:
    parser = subparsers.add_parser("whatif", help="project the step onto other meshes, batches, chip counts, chips",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source(parser)
    add_format(parser, formats=("table", "json", "markdown"))
    add_target(parser)
    add_hlo(parser)
    parser.add_argument("--mesh", action="append", metavar="ROLE=N,...",
                        help="a mesh to project (repeatable), roles data, fsdp, tensor, context, pipeline, expert")
    parser.add_argument("--chips", type=int, metavar="N",
                        help="project every factorisation of N chips over the roles the program uses")
    parser.add_argument("--batch", action="append", metavar="N|xK",
                        help="global batch in tokens, or a factor of today's (x2); repeatable")
    parser.add_argument("--microbatches", type=int, metavar="M", help="a projected pipeline's microbatches")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from traceview.render.whatif import whatif_json, whatif_markdown, whatif_text
    from traceview.whatif.config import parse_mesh

    chip = target_from_args(args)
    args.target = None                   # the step is measured on the chip it ran on; --target is projected onto
    analysis = load_from_args(args)
    meshes = [parse_mesh(m) for m in args.mesh or []]
    report = analysis.whatif(meshes=meshes, batches=args.batch or [], chips=args.chips, target=chip,
                             microbatches=args.microbatches)
    if args.format == "json":
        text = jsontext.dumps(whatif_json(report)) + "\n"
    elif args.format == "markdown":
        text = whatif_markdown(report)
    else:
        text = whatif_text(report)
    write_output(text, args.output)
    return 0
