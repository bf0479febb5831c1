"""The command line's value types (argparse ``type=``): each flag's value is checked as the command line is
parsed, before any trace is read, by the check the Python API makes of the same value.

A type here raises :class:`UserError` naming the flag; ``traceview.cli`` prints it as it prints any (one line,
exit 2). The checks that live in heavier modules are imported when a value is checked, so ``--help`` imports
none of them.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from traceview.config.values import non_empty, path_like, whole_number
from traceview.errors import UserError

MAX_PORT = 65535


def named(flag: str) -> Callable[[str], str]:
    """A chip, run, op, module, host or glob: an empty one (``--target "$CHIP"`` with CHIP unset) would be taken
    for "not given" and quietly ignored."""
    def check(text: str) -> str:
        return non_empty(text, flag)
    return check


def count(flag: str, low: int = 1, high: int | None = None) -> Callable[[str], int]:
    """A whole number in ``low..high`` (``--top``, ``--depth``, ``--port``): ``-5``, ``nan`` and ``1e400`` are
    refused rather than read as a slice from the end, or as "no limit"."""
    def check(text: str) -> int:
        return whole_number(text, flag, low, high)
    return check


def input_path(flag: str, must_exist: bool = False) -> Callable[[str], str]:
    """A file or folder to read, or a remote or database URL: not empty (``Path("")`` is the current folder) and
    one the system can look up; a name too long, a loop of links or a NUL byte is refused here, not met as an
    OSError inside a reader. A missing one is left to the reader, which says what it expected there, unless
    ``must_exist``."""
    def check(text: str) -> str:
        path_like(text, flag)
        if "://" not in text and not _looked_up(text, flag) and must_exist:
            raise UserError(f"{flag} {text}: no such file or folder")
        return text
    return check


def output_path(flag: str) -> Callable[[str], str]:
    """A file to write: not empty (which would mean stdout), not a folder, and in a folder that exists, all
    known before the analysis runs rather than when its report is written. Special files (``/dev/stdout``,
    a FIFO) are written to as they are."""
    def check(text: str) -> str:
        path_like(text, flag)
        if _looked_up(text, flag) and Path(text).is_dir():
            raise UserError(f"{flag} {text}: is a folder: give a file name")
        parent = Path(text).parent
        if not _looked_up(str(parent), flag) or not parent.is_dir():
            raise UserError(f"{flag} {text}: no such folder: {parent}")
        return text
    return check


def _looked_up(text: str, flag: str) -> bool:
    """Whether ``text`` exists; False when it does not; UserError when the system cannot tell (the name is
    too long, a loop of symbolic links, a NUL byte, no permission to look)."""
    try:
        os.stat(text)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return False
        raise UserError(f"{flag} {text}: {exc.strerror or exc}") from None
    except ValueError as exc:       # "embedded null byte"
        raise UserError(f"{flag} {text!r}: not a path ({exc})") from None
    return True


def jobs(text: str) -> int:
    """``--jobs``: :func:`traceview.trace.hosts.parse_jobs`, the check the reading options make."""
    from traceview.trace.hosts import parse_jobs

    return parse_jobs(text)


def fraction(flag: str) -> Callable[[str], float]:
    """``5%`` or ``0.05`` (:func:`traceview.regress.budgets.parse_fraction`, as ``check --confidence`` reads it)."""
    def check(text: str) -> float:
        from traceview.regress.budgets import parse_fraction

        return parse_fraction(text, flag)
    return check
