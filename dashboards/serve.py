"""The dashboard's server process: Streamlit's own command line, with the trace warmed beside it.

`traceview dashboard` runs `python -m traceview.dashboards.serve run APP
--server.port ...`: the arguments go to Streamlit's CLI unchanged, and a
thread (traceview.dashboards.warm) reads and analyses the configured trace in
the same process meanwhile, so the first browser session finds it in the
cache. TRACEVIEW_DASHBOARD_WARM=0 turns the warming off. The server's
sockets send without Nagle's delay (dashboards/nodelay.py).
"""

from __future__ import annotations

import importlib
import os
import sys

# The modules Streamlit's server imports as it starts (Streamlit 1.5x-1.6x), imported before the warm-up.
SERVER_MODULES = ("streamlit.web.server", "streamlit.web.server.starlette", "streamlit.web.bootstrap")


def main(argv: list[str] | None = None) -> None:
    from traceview.dashboards import nodelay, warm
    from traceview.dashboards.config import from_env

    config = from_env()
    # Loaded whole before the warming thread starts, so the two threads never import one package at once:
    # Streamlit's import configures Plotly's theme, and Plotly peeks at sys.modules["pandas"] without the
    # import lock (a half-imported pandas breaks it: AttributeError: pandas.Series); and the warming
    # thread's pages import streamlit while the server imports its own modules (the import locks then
    # deadlock: _DeadlockError, "DeltaGeneratorSingleton instance already exists").
    import numpy  # noqa: F401
    import pandas  # noqa: F401
    import streamlit  # noqa: F401
    from streamlit.web import cli

    for server_module in SERVER_MODULES:
        try:
            importlib.import_module(server_module)
        except ImportError:   # another Streamlit's layout: it imports what it has when it starts
            pass
    if config.path and os.environ.get("TRACEVIEW_DASHBOARD_WARM", "1") != "0":
        warm.start(config)
    nodelay.install()

    cli.main(args=list(sys.argv[1:] if argv is None else argv), prog_name="streamlit")


if __name__ == "__main__":
    main()
