"""Errors a user can act on.

A :class:`UserError` is something wrong with what the user gave us (a path,
a file, a flag value). The CLI prints its message on one line and exits 2,
without a traceback unless ``--debug`` is given.
"""


class UserError(Exception):
    """A problem with the user's input; the message names the file or value."""

    exit_code = 2


class TraceError(UserError):
    """A trace file that cannot be read: empty, truncated, corrupt, not an XSpace."""


class HloError(UserError):
    """HLO text or proto that cannot be read; the message names the file and line."""
