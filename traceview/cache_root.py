"""The folder under which traceview keeps what it caches on disk.

``TRACEVIEW_CACHE_DIR`` wins, else ``$XDG_CACHE_HOME/traceview``, else ``~/.cache/traceview``. It sits in
the lowest layer so that every cache can use it: the parsed tables and finished outputs
(``traceview.cache``) and the readers' compiled kernels (``traceview.parsers.native.linker``), which the
layers keep from importing ``traceview.cache``. No heavy import: the CLI reads it at start. Each function
reads the environment when called (a test or a benchmark may set it).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The cache folder: the one ``TRACEVIEW_CACHE_DIR`` names, else the user's."""
    return configured_cache_root() or default_cache_root()


def configured_cache_root() -> Path | None:
    """The folder ``TRACEVIEW_CACHE_DIR`` names; None when it is not set."""
    explicit = os.environ.get("TRACEVIEW_CACHE_DIR")
    return Path(explicit) if explicit else None


def default_cache_root() -> Path:
    """The user's cache folder: ``$XDG_CACHE_HOME/traceview``, else ``~/.cache/traceview``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "traceview"
