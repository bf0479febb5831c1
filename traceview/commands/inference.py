"""`traceview inference PATH`: the serving phases (prefill, decode) against the book's inference roofline.

Recognises the programs of a serving loop from their HLO (a KV cache updated in place and returned, the
token input) and their calls in the trace; per phase: steps, batch, tokens per step, step time, weight and
KV-cache bytes, FLOPs, the floor on the target and the efficiency; the critical batch, KV bytes per token
and how many sequences fit in HBM (docs/inference.md).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from traceview.commands._options import add_format, add_hlo, add_source, add_target, load_from_args, write_output
from traceview.render import jsontext


def register(subparsers) -> None:
    parser = subparsers.add_parser("inference", help="prefill and decode phases against the inference roofline",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source(parser)
    add_format(parser, formats=("table", "json", "markdown"))
    add_target(parser)
    add_hlo(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from traceview.render.inference import inference_json, inference_text

    report = load_from_args(args).inference()
    if args.format == "json":
        text: str | Iterator[str] = jsontext.chunks(inference_json(report), end="\n")
    else:
        text = inference_text(report, markdown=args.format == "markdown")
    write_output(text, args.output)
    return 0
