"""Where traceview's caches live and how large they may grow (no heavy import: the CLI reads it at start).

``TRACEVIEW_CACHE_DIR`` wins, else ``$XDG_CACHE_HOME/traceview``, else
``~/.cache/traceview``. ``TRACEVIEW_CACHE_MAX_MB`` (default 4096) bounds each
kind of entry (parsed tables: tablecache; finished outputs: resultcache).
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_MAX_MB = 4096


def cache_dir() -> Path:
    explicit = os.environ.get("TRACEVIEW_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "traceview"


def max_bytes() -> int:
    try:
        return int(float(os.environ.get("TRACEVIEW_CACHE_MAX_MB", DEFAULT_MAX_MB)) * 2**20)
    except ValueError:
        return DEFAULT_MAX_MB * 2**20
