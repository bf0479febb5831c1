"""`traceview dashboard PATH`: the interactive dashboard (Streamlit) on a trace, in the browser.

Serves on 127.0.0.1 by default (give --host 0.0.0.0 to reach it from other
machines), headless, without usage statistics. Stop it with Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

from traceview.commands._arguments import MAX_PORT, count, input_path, named
from traceview.commands._options import add_hlo, add_source, add_target, read_options_env
from traceview.errors import UserError

INSTALL_HINT = "pip install 'traceview[dashboard]'"


def register(subparsers) -> None:
    parser = subparsers.add_parser("dashboard", help="interactive dashboard in the browser (Streamlit)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source(parser)
    add_target(parser)
    add_hlo(parser)
    parser.add_argument("--history", metavar="DB", type=input_path("--history"),
                        help="a history store (SQLite file or postgresql:// URL) for the History tab")
    parser.add_argument("--port", type=count("--port", 1, MAX_PORT), default=8501,
                        help="port to serve on (default 8501)")
    parser.add_argument("--host", default="127.0.0.1", type=named("--host"),
                        help="address to bind (default 127.0.0.1: this machine only)")
    parser.set_defaults(handler=run)


def app_path() -> Path:
    """The installed dashboards/app.py (package data of traceview.dashboards)."""
    import traceview.dashboards

    return Path(traceview.dashboards.__file__).resolve().parent / "app.py"


def streamlit_command(args: argparse.Namespace) -> list[str]:
    """Streamlit's `run` command line, through traceview.dashboards.serve: it reads and analyses the trace
    in the server process while the server starts, so the first page is quick to show."""
    return [sys.executable, "-m", "traceview.dashboards.serve", "run", str(app_path()),
            "--server.address", args.host, "--server.port", str(args.port),
            "--server.headless", "true", "--browser.gatherUsageStats", "false",
            "--server.fileWatcherType", "none", "--server.maxUploadSize", "2048",
            "--global.showWarningOnDirectExecution", "false", "--client.toolbarMode", "viewer"]


def record_keys(args: argparse.Namespace) -> list[str]:
    """Where the result cache may hold the analyze JSON record of what the dashboard opens, so its first page
    is drawn before the full analysis is loaded (traceview.dashboards.front): `traceview analyze PATH --format
    json` with the same options (the user ran it before), then the dashboard's own record (stored by an
    earlier `traceview dashboard` of the same inputs). [] when the result cache is off."""
    import hashlib

    from traceview.commands import analyze, runner

    parser = argparse.ArgumentParser(add_help=False)
    analyze.register(parser.add_subparsers(dest="command"))
    argv = ["analyze", args.path, "--format", "json", "--stage", args.stage]
    for flag, value in (("--run", args.run), ("--target", args.target), ("--hardware-file", args.hardware_file),
                        ("--hlo", args.hlo)):
        if value is not None:
            argv += [flag, value]
    if args.no_cache:
        argv.append("--no-cache")
    keys = runner.stored_keys(parser.parse_args(argv))
    if not keys:
        return []
    return [*keys, hashlib.sha256(f"dashboard record\0{keys[0]}".encode()).hexdigest()]


def _absolute(path: str | None) -> str | None:
    """The server may run from another folder: hand it absolute paths."""
    return None if path is None else str(Path(path).expanduser().resolve())


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("streamlit") is None or importlib.util.find_spec("altair") is None:
        raise UserError(f"the dashboard needs streamlit and altair: {INSTALL_HINT}")
    from traceview.dashboards.config import DashboardConfig
    from traceview.parsers.discover import find_run

    # A bad path, hardware file or chip fails here, on the command line, with exit 2.
    find_run(args.path, args.run)
    if args.target or args.hardware_file:
        from traceview.hardware.database import get_chip, load_hardware

        db = load_hardware(args.hardware_file)
        if args.target:
            get_chip(args.target, db)
    history = args.history
    if history:   # a missing, foreign or newer store fails here, with exit 2
        from traceview.commands.history import need_history_extra
        from traceview.history.store import open_store

        need_history_extra()
        open_store(history).close()
        history = history if "://" in history else _absolute(history)
    config = DashboardConfig(path=_absolute(args.path), run=args.run, target=args.target,
                             hardware_file=_absolute(args.hardware_file), hlo=_absolute(args.hlo), stage=args.stage,
                             history=history, record_keys=",".join(record_keys(args)) or None)
    env = {**os.environ, **config.to_env(), **read_options_env(args)}
    print(f"traceview dashboard on {args.path}: http://{args.host}:{args.port}  (Ctrl-C to stop)", flush=True)
    proc = subprocess.Popen(streamlit_command(args), env=env)
    # A `kill` of this process stops the server too (Ctrl-C reaches both through the terminal).
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        return 0
