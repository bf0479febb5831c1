"""`traceview scopes PATH`: device time, gain and bound along the model's named scopes (or source lines).

Every executed op is placed at the path of its HLO op_name metadata (JAX named
scopes, Flax/Equinox/Haiku module names) with transformation markers stripped,
under the program (jitted function) that ran it; forward and backward passes
of a scope merge, with the split kept. Ops with no metadata are counted as
unattributed. docs/scopes.md defines every number.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from traceview.commands._arguments import count
from traceview.commands._options import add_format, add_hlo, add_source, add_target, load_from_args, write_output
from traceview.render import jsontext


def register(subparsers) -> None:
    parser = subparsers.add_parser("scopes", help="time, gain and bound by named scope or source line",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source(parser)
    add_format(parser)
    add_target(parser)
    parser.add_argument("--by", choices=("scope", "source"), default="scope",
                        help="tree of named scopes (default) or of source files and lines")
    parser.add_argument("--depth", type=count("--depth"), metavar="N",
                        help="show nodes at most N levels deep (default: all)")
    add_hlo(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from traceview.render.scopes import scopes_csv, scopes_json, scopes_text

    tree = load_from_args(args, keep_ops=False).scope_tree(args.by)
    if args.format == "json":
        text: str | Iterator[str] = jsontext.chunks(scopes_json(tree, args.depth), end="\n")
    elif args.format == "csv":
        text = scopes_csv(tree, args.depth)
    else:
        text = scopes_text(tree, args.depth, markdown=args.format == "markdown")
    write_output(text, args.output)
    return 0
