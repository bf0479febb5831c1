"""The dashboard's server process: Streamlit's own command line, with the trace warmed beside it.

`traceview dashboard` runs `python -m traceview.dashboards.serve run APP
--server.port ...`: the arguments go to Streamlit's CLI unchanged, and a
thread (traceview.dashboards.warm) reads and analyses the configured trace in
the same process meanwhile, so the first browser session finds it in the
cache. TRACEVIEW_DASHBOARD_WARM=0 turns the warming off. The server's
sockets send without Nagle's delay (dashboards/nodelay.py).
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    from traceview.dashboards import nodelay, warm
    from traceview.dashboards.config import from_env

    config = from_env()
    # Loaded whole before the warming thread starts: Streamlit's import configures Plotly's theme, and
    # Plotly peeks at sys.modules["pandas"] without the import lock, so a pandas the warming thread is
    # half-way through importing would break Streamlit's import (AttributeError: pandas.Series).
    import numpy  # noqa: F401
    import pandas  # noqa: F401

    if config.path and os.environ.get("TRACEVIEW_DASHBOARD_WARM", "1") != "0":
        warm.start(config)
    nodelay.install()
    from streamlit.web import cli

    cli.main(args=list(sys.argv[1:] if argv is None else argv), prog_name="streamlit")


if __name__ == "__main__":
    main()
