"""Options shared by several sub-commands, so they read the same everywhere."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import traceview
from traceview.commands._arguments import input_path, jobs, named, output_path
from traceview.errors import UserError


def add_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", type=input_path("PATH"),
                        help="a log dir (plugins/profile/<run>/), a run dir, or one .xplane.pb file")
    parser.add_argument("--run", metavar="NAME", type=named("--run"),
                        help="which run of a log dir (default: the newest)")
    add_read_options(parser)


def add_read_options(parser) -> None:
    """--no-cache, --jobs, --dask: how the host files are read (docs/scale.md)."""
    parser.add_argument("--no-cache", action="store_true",
                        help="neither use nor fill the caches of parsed tables and finished outputs under "
                             "$XDG_CACHE_HOME/traceview: read the trace files again (also TRACEVIEW_NO_CACHE=1)")
    parser.add_argument("--jobs", "-j", metavar="N", type=jobs,
                        help="processes reading host files in parallel (default: the machine's cores)")
    parser.add_argument("--dask", metavar="ADDRESS", type=named("--dask"),
                        help="read the host files on this Dask scheduler, e.g. tcp://10.0.0.5:8786 "
                             "(also TRACEVIEW_DASK); the files must be readable at the same path there")


def read_options_from_args(args: argparse.Namespace):
    """The ReadOptions the --no-cache / --jobs / --dask flags ask for (unset flags: the environment decides)."""
    from traceview.trace.hosts import parse_jobs
    from traceview.trace.read import ReadOptions

    jobs = getattr(args, "jobs", None)
    return ReadOptions(cache=False if getattr(args, "no_cache", False) else None,
                       jobs=None if jobs is None else parse_jobs(jobs),
                       dask=getattr(args, "dask", None) or None)


@contextmanager
def reading(args: argparse.Namespace) -> Iterator[None]:
    """Within the block, traces are read as --no-cache / --jobs / --dask say (for commands that read
    them through an API taking no read options)."""
    from traceview.trace.read import read_options

    with read_options(read_options_from_args(args)):
        yield


def read_options_env(args: argparse.Namespace) -> dict[str, str]:
    """The same choices as environment variables, for a server process (the dashboard)."""
    env = {}
    if getattr(args, "no_cache", False):
        env["TRACEVIEW_NO_CACHE"] = "1"
    if getattr(args, "jobs", None) is not None:
        env["TRACEVIEW_JOBS"] = str(args.jobs)
    if getattr(args, "dask", None):
        env["TRACEVIEW_DASK"] = args.dask
    return env


def add_format(parser: argparse.ArgumentParser, formats=("table", "json", "csv", "markdown")) -> None:
    parser.add_argument("--format", choices=formats, default=formats[0],
                        help=f"output format (default: {formats[0]})")
    parser.add_argument("-o", "--output", metavar="FILE", type=output_path("-o"),
                        help="write to FILE instead of stdout")


def add_target(parser, target_help: str = "chip to judge the ops against (default: the chip the trace was "
                                          "captured on); `traceview hardware` lists them") -> None:
    """--target and --hardware-file (a parser or an argument group), ``target_help`` saying what the chip is
    for in this command."""
    parser.add_argument("--target", metavar="CHIP", type=named("--target"), help=target_help)
    parser.add_argument("--hardware-file", metavar="FILE", type=input_path("--hardware-file"),
                        help="JSON file adding or overriding chips in the hardware database")


def add_hlo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hlo", metavar="DIR", type=input_path("--hlo", must_exist=True),
                        help="XLA dump folder (--xla_dump_to) or HLO file with the modules the trace ran "
                             "(default: the trace's own HLO, or an hlo/ folder beside it)")
    parser.add_argument("--stage", choices=("after", "before"), default="after",
                        help="which dumped stage of a module to use (default: after optimizations)")


# The views a command's analysis imports: imported while other processes read a pod's hosts
VIEW_MODULES = ("traceview.analysis.build", "traceview.advice.view", "traceview.memory.view",
                "traceview.parallelism.diagnose", "traceview.scopes.tree", "traceview.inference.programs",
                "traceview.render.advice", "traceview.render.parallelism", "traceview.render.scopes")


def load_from_args(args: argparse.Namespace, keep_ops: bool = True,
                   allocator_events: bool = False) -> traceview.Analysis:
    """`traceview.load` of the trace PATH names (with a progress bar), as the source/target/HLO/reading options say.
    ``keep_ops=False``: the op executions themselves are not kept (read again if a view asks for them), for a
    command that prints only what the analysis derives from them. ``allocator_events``: each host's
    allocator events read where it is read (a command whose output includes the memory view)."""
    import dataclasses

    options = dataclasses.replace(read_options_from_args(args), keep_ops=keep_ops, allocator_events=allocator_events,
                                  while_reading=VIEW_MODULES)
    name_the_run(args.path, args.run)
    return traceview.load(args.path, run=args.run, target=args.target, hlo=args.hlo, stage=args.stage,
                          hardware_file=args.hardware_file, progress=True,
                          per_device=getattr(args, "per_device", False), read_options=options)


def name_the_run(path: str, run: str | None) -> None:
    """One line on stderr naming the run a command reads when PATH holds several and none was named
    (the newest is read): a terminal user sees which, whatever the command prints. The JSON outputs carry
    the same as a warning (traceview.trace.read.load_profile)."""
    if run is not None:
        return
    from traceview.parsers.discover import list_runs

    try:
        runs = list_runs(path)
    except (UserError, OSError):
        return      # the load says what is wrong with PATH
    if len(runs) > 1:
        print(f"traceview: {path} holds {len(runs)} runs: reading the newest, {runs[-1].name} "
              "(--run NAME reads another; `traceview runs PATH` lists them)", file=sys.stderr)


def target_from_args(args: argparse.Namespace):
    """The chip --target names (with --hardware-file), or None: for inputs with no trace to detect it from."""
    if not args.target:
        return None
    from traceview.hardware.database import get_chip, load_hardware

    return get_chip(args.target, load_hardware(args.hardware_file))


def dump_target_from_args(args: argparse.Namespace):
    """Without --target, for a dump folder or HLO file PATH (or --hlo): the chip its XLA target config names
    (traceview.hardware.dump_target.DumpTarget, its chip None with warnings when it matches none); None when
    --target is given or the dump has no target config."""
    if getattr(args, "target", None):
        return None
    from traceview.hardware.database import load_hardware
    from traceview.hardware.dump_target import dump_target

    path = getattr(args, "hlo", None) or args.path
    return dump_target(path, load_hardware(getattr(args, "hardware_file", None)))


def dump_target_note(found) -> list[str]:
    """What a command says about a chip chosen from the dump (or why none was)."""
    if found is None:
        return []
    if found.chip is None:
        return found.warnings
    config = found.source.removeprefix("dump: ")
    return found.warnings + [f"target {found.chip.name}: chosen from the XLA dump's target config {config} "
                             "(give --target to choose another)"]


# Called with every text write_output writes (the result cache records a command's output through it).
OUTPUT_HOOKS: list[Callable[[str], None]] = []


def write_output(text: str | Iterable[str], output: str | None) -> None:
    """Write a command's output to ``output`` (a file) or stdout. ``text`` may come in pieces
    (``render.jsontext.chunks``): each is written as it comes, so the whole text is never held, except where a
    hook records it (the result cache stores it whole)."""
    if OUTPUT_HOOKS:
        whole = text if isinstance(text, str) else "".join(text)
        for hook in OUTPUT_HOOKS:
            hook(whole)
        text = whole
    pieces = [text] if isinstance(text, str) else text
    if output:
        try:
            with open(output, "w", encoding="utf-8") as handle:
                handle.writelines(pieces)
        except BaseException as exc:
            if os.path.isfile(output):   # no half-written report left behind (a special file is left alone)
                os.remove(output)
            if isinstance(exc, OSError):
                raise cannot_write(output, exc) from None
            raise
    else:
        try:
            sys.stdout.writelines(pieces)
            sys.stdout.flush()
        except BrokenPipeError:          # `| head`: the CLI's to handle
            raise
        except OSError as exc:
            raise cannot_write("stdout", exc) from None


def cannot_write(path: str, exc: OSError) -> UserError:
    """A report that cannot be written (a full disk, a folder gone, no permission) is the user's to fix: one line
    naming the file, exit 2, never an internal error after the analysis succeeded."""
    return UserError(f"{path}: cannot write ({exc.strerror or exc})")
