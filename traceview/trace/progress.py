"""A progress bar on stderr while a trace is read: only on a terminal, and only once it takes a moment.

Reading one large file is a single protobuf parse, so the bar is redrawn by a
background thread with the elapsed time, and advances as host files finish.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def progress_bar(label: str, delay_s: float = 0.5, stream=None,
                 interval_s: float = 0.1) -> Iterator[Callable[[int, int], None] | None]:
    """Yields a `(done, total)` callback, or None when `stream` (stderr) is not a terminal."""
    # Under the result cache's recording (traceview.commands.runner), the bar goes around it.
    stream = stream or getattr(sys.stderr, "unrecorded", sys.stderr)
    if not (hasattr(stream, "isatty") and stream.isatty()):
        yield None
        return
    state = {"done": 0, "total": 1}
    compiling_now = [False]
    started = time.monotonic()
    finished = threading.Event()
    widest = [0]  # the longest line drawn: a shorter one is padded to wipe its end, the last wipe clears it

    def draw() -> None:
        width = 30
        frac = min(1.0, state["done"] / max(state["total"], 1))
        elapsed = time.monotonic() - started
        spinner = "|/-\\"[int(elapsed / interval_s) % 4] if frac < 1 else " "
        if compiling_now[0]:
            text = f"{_COMPILING} {elapsed:5.1f}s {spinner}"
        else:
            text = (f"{label} [{'#' * int(frac * width):<{width}}] "
                    f"{state['done']}/{state['total']} files {elapsed:5.1f}s {spinner}")
        stream.write(f"\r{text:<{widest[0]}}")
        stream.flush()
        widest[0] = max(widest[0], len(text))

    def loop() -> None:
        if finished.wait(delay_s):
            return
        while not finished.wait(interval_s):
            draw()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()

    def update(done: int, total: int) -> None:
        state["done"], state["total"] = done, total

    def compiling(now: bool) -> None:
        compiling_now[0] = now

    from traceview.parsers.native import loader as native_loader  # the kernels load when a large file needs them

    before, native_loader.on_compile = native_loader.on_compile, compiling
    try:
        yield update
    finally:
        native_loader.on_compile = before
        finished.set()
        thread.join()
        if widest[0]:
            stream.write("\r" + " " * widest[0] + "\r")
            stream.flush()


# numba compiles traceview's reader on its first use on a machine (then loads it from its disk cache);
# shown instead of the bar meanwhile, and as short as the bar: one line on an 80-column terminal
_COMPILING = "compiling the fast reader: first use here, ~30 s"
