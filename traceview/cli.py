"""The `traceview` command line: one sub-command per module in traceview.commands."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from typing import NoReturn

from traceview.errors import UserError, missing_extra
from traceview.version import __version__

# Sub-commands, in the order `traceview --help` lists them. Each module has
# `register(subparsers)`, which sets `handler=run`, and `run(args) -> int`.
COMMANDS = ("analyze", "runs", "hlo", "memory", "graph", "parallelism", "scopes", "inference", "roofline",
            "whatif", "hardware", "dashboard", "diff", "check", "history")


class CommandLineParser(argparse.ArgumentParser):
    """argparse's parser (its sub-commands' too), its complaints one line long like every other user error
    (docs/ci.md): the usage block argparse prints first would bury the line naming the flag, and ``--help``
    shows the usage anyway. The UserError is reported by :func:`main`."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (`{self.prog} --help` lists the options)")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only`, that one sub-command (what a run of it needs: no other
    command module is imported)."""
    parser = CommandLineParser(
        prog="traceview",
        description="Roofline analysis of XLA / JAX profiler traces and HLO dumps.",
    )
    parser.add_argument("--version", action="version", version=f"traceview {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in (only,) if only in COMMANDS else COMMANDS:
        importlib.import_module(f"traceview.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--version"]:  # fast path: no command module imported
        print(f"traceview {__version__}")
        return 0
    # The sub-command named (the first word that is not an option: the top-level options take no value).
    named = next((a for a in argv if not a.startswith("-")), None)
    try:
        parser = build_parser(only=named)
    except Exception as exc:  # noqa: BLE001 - a command module that does not import is a bug, never a missing command
        return _internal_error(exc, "--debug" in argv, f"a command module failed to import "
                                                       f"({type(exc).__name__}: {exc})")
    try:
        args = parser.parse_args(argv)
    except UserError as exc:    # argparse's complaint, or a value a flag's type refused (commands/_arguments.py)
        return _user_error(exc, "--debug" in argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        from traceview.commands.runner import run_command  # after --version's fast path

        return run_command(args)
    except UserError as exc:
        return _user_error(exc, args.debug)
    except BrokenPipeError:  # `traceview analyze ... | head`
        return 0
    except ModuleNotFoundError as exc:  # an optional package (an extra) not installed: the user's to install
        missing = missing_extra(exc, args.command)
        if missing is None:
            return _internal_error(exc, args.debug)
        return _user_error(missing, False)
    except KeyboardInterrupt:
        return 130
    except RecursionError as exc:  # an input nested deeper than any limit caught: still the input's fault
        return _internal_error(exc, args.debug, "input nested too deeply")
    except MemoryError as exc:
        return _internal_error(exc, args.debug, "out of memory")
    except Exception as exc:  # noqa: BLE001 - any other exception is a bug: one line, exit 3
        return _internal_error(exc, args.debug)


INTERNAL_ERROR = 3
MAX_MESSAGE = 1000      # characters of an error line; a longer one keeps its start and its end


def _user_error(exc: UserError, debug: bool) -> int:
    """The user's mistake: one line naming the value (the traceback only with --debug), its exit code."""
    if debug:
        traceback.print_exc()
    print(f"traceview: error: {one_line(str(exc))}", file=sys.stderr)
    return exc.exit_code


def one_line(text: str) -> str:
    """``text`` as one line a terminal shows as it is: a control character (a newline in a file name, a lone
    surrogate from bytes that are not UTF-8) escaped as Python writes it, and the middle of a very long one
    (a 100,000-character --target echoed back) left out, its start naming the flag and its end the remedy."""
    shown = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    if len(shown) <= MAX_MESSAGE:
        return shown
    head, tail = MAX_MESSAGE * 3 // 5, MAX_MESSAGE // 5
    return f"{shown[:head]} ...[{len(shown) - head - tail} characters left out]... {shown[-tail:]}"


def console() -> NoReturn:
    """The ``traceview`` program: run the command, then leave at once with its exit status.

    An interpreter's ordinary exit tears down every object and module one by
    one (after a large trace's analysis: its tables, numba's and LLVM's state;
    docs/scale.md has the cost), all of it after the output is complete. Here
    the output streams and the table cache's writer are flushed first, then the
    process ends (``os._exit``). In-process callers use :func:`main`, which
    returns, and keep their own malloc and collector settings (traceview.runtime.malloc, .collector).
    """
    if sys.argv[1:] != ["--version"]:
        from traceview.runtime.collector import collect_less_often
        from traceview.runtime.malloc import keep_freed_memory

        keep_freed_memory()               # this process is traceview's own, and short-lived
        collect_less_often()              # and its forked workers' (traceview.runtime.collector)
    code = main()
    ledger = sys.modules.get("traceview.runtime.cpu_ledger")
    if ledger is not None:
        ledger.write_if_asked()           # TRACEVIEW_CPU_LEDGER: the run's serial CPU, for the benchmark
    cache = sys.modules.get("traceview.cache.tables")
    if cache is not None:
        cache.flush()                     # a background write of the tables read
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):     # a closed pipe (`| head`), a closed stream: nothing more to say
            pass
    os._exit(code)


def _internal_error(exc: BaseException, debug: bool, what: str | None = None) -> int:
    """One line saying it is a bug (the traceback only with --debug); CI tells it from a regression (1)."""
    if debug:
        traceback.print_exc()
    detail = what or f"{type(exc).__name__}: {exc}"
    detail = " ".join(str(detail).split())[:300]  # one line, whatever the exception says
    print(f"internal error in traceview {__version__}: {detail}; "
          "run with --debug for the traceback and please report it", file=sys.stderr)
    return INTERNAL_ERROR


if __name__ == "__main__":
    console()
