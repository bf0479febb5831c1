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
    parser.add_argument("--mesh", action="append", metavar="ROLE=N,...", type=_mesh,
                        help="a mesh to project (repeatable), roles data, fsdp, tensor, context, pipeline, expert")
    parser.add_argument("--chips", type=_chips, metavar="N",
                        help="project every factorisation of N chips over the roles the program uses")
    parser.add_argument("--batch", action="append", metavar="N|xK", type=_batch,
                        help="global batch in tokens, or a factor of today's (x2); repeatable")
    parser.add_argument("--microbatches", type=_microbatches, metavar="M",
                        help="a projected pipeline's microbatches")
    parser.set_defaults(handler=run)


# The checks Analysis.whatif makes of the same values (traceview.whatif.config), made as the command line is read.

def _mesh(text: str) -> dict[str, int]:
    from traceview.whatif.config import parse_mesh

    return parse_mesh(text)


def _chips(text: str) -> int | None:
    from traceview.whatif.config import parse_chips

    return parse_chips(text, "--chips")


def _batch(text: str) -> str:
    """The batch as given: a factor (x2) is a number of tokens only once today's batch is read from the trace,
    so its form and sign are checked here on a batch of one token."""
    from traceview.whatif.config import parse_batch

    parse_batch(text, 1.0)
    return text


def _microbatches(text: str) -> int | None:
    from traceview.whatif.config import parse_microbatches

    return parse_microbatches(text, "--microbatches")


def run(args: argparse.Namespace) -> int:
    from traceview.render.whatif import whatif_json, whatif_markdown, whatif_text

    chip = target_from_args(args)
    args.target = None                   # the step is measured on the chip it ran on; --target is projected onto
    analysis = load_from_args(args)
    report = analysis.whatif(meshes=args.mesh or [], batches=args.batch or [], chips=args.chips, target=chip,
                             microbatches=args.microbatches)
    if args.format == "json":
        text = jsontext.dumps(whatif_json(report)) + "\n"
    elif args.format == "markdown":
        text = whatif_markdown(report)
    else:
        text = whatif_text(report)
    write_output(text, args.output)
    return 0
