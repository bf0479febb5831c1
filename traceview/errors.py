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


# Optional packages by the extra that installs them (pyproject.toml's optional-dependencies): a command that
# meets one missing says which extra to install, never that it is a bug.
EXTRAS = {
    "sqlalchemy": "history", "scipy": "history", "psycopg": "history", "ruptures": "history",
    "streamlit": "dashboard", "altair": "dashboard", "plotly": "dashboard", "vl_convert": "dashboard",
    "matplotlib": "plot", "jax": "stablehlo", "jaxlib": "stablehlo",
    "fsspec": "remote", "gcsfs": "remote", "s3fs": "remote", "dask": "dask", "distributed": "dask",
}


def missing_extra(exc: ImportError, command: str | None = None) -> UserError | None:
    """The one-line UserError for an optional package that is not installed (None: not an optional one)."""
    root = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(root)
    if not isinstance(exc, ModuleNotFoundError) or extra is None:
        return None
    who = f"`traceview {command}`" if command else "this command"
    return UserError(f"{who} needs {root}, which is not installed: pip install 'traceview[{extra}]'")
