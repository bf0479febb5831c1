"""A progress bar on stderr, shown only on a terminal and only once reading takes a moment."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def progress_bar(label: str, delay_s: float = 0.5, stream=None) -> Callable[[int, int], None] | None:
    """A callback `(done, total)` that draws a bar after `delay_s`; None when not a terminal."""
    stream = stream or sys.stderr
    if not stream.isatty():
        return None
    started = time.monotonic()
    shown = False

    def update(done: int, total: int) -> None:
        nonlocal shown
        if time.monotonic() - started < delay_s and done < total:
            return
        if not shown and done >= total:
            return  # finished before it was worth showing
        shown = True
        width = 30
        frac = 0.0 if total <= 0 else min(1.0, done / total)
        bar = "#" * int(frac * width)
        stream.write(f"\r{label} [{bar:<{width}}] {100 * frac:5.1f}%")
        if done >= total:
            stream.write("\r" + " " * (len(label) + width + 12) + "\r")
        stream.flush()

    return update
