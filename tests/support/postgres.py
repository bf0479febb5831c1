"""A real PostgreSQL server for the history store's tests: Debian's `postgresql` binaries, a fresh
cluster in a temporary folder, on a free loopback port, stopped (and removed) at the end.

initdb refuses to run as root: as root the cluster belongs to the `postgres` user (runuser). Where
no server binaries are installed, `find_binaries` says why, for the tests to skip with it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.headless_chromium import free_port


def find_binaries() -> tuple[Path | None, str]:
    """The newest /usr/lib/postgresql/*/bin holding initdb and pg_ctl, or None with the reason."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3])
                   if Path(p).parts[-3].isdigit() else 0)
    for initdb in reversed(found):
        folder = Path(initdb).parent
        if (folder / "pg_ctl").exists():
            return folder, ""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).parent, ""
    return None, "PostgreSQL server binaries not installed (apt-get install -y postgresql; .ci/run does)"


def _as_owner(user: str | None, argv: list[str]) -> list[str]:
    return argv if user is None else ["runuser", "-u", user, "--", *argv]


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start a throw-away cluster; yields its URL (user postgres, trust auth on loopback only)."""
    binaries, reason = find_binaries()
    if binaries is None:
        raise FileNotFoundError(reason)
    user = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise FileNotFoundError("running as root and no `postgres` user to own the cluster") from None
        user = "postgres"
    root = Path(tempfile.mkdtemp(prefix="traceview-pg-"))
    data, log = root / "data", root / "server.log"
    if user is not None:
        shutil.chown(root, user=user)
    port = free_port()
    subprocess.run(_as_owner(user, [str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                                    "--no-sync", "-E", "UTF8"]), check=True, capture_output=True, timeout=120)
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off -c max_connections=50"
    started = subprocess.run(_as_owner(user, [str(binaries / "pg_ctl"), "-D", str(data), "-l", str(log), "-o",
                                              options, "-w", "-t", "60", "start"]), capture_output=True, timeout=90)
    try:
        if started.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {started.stderr.decode()[-500:]} "
                               f"{log.read_text()[-1500:] if log.exists() else ''}")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_owner(user, [str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w",
                                        "stop"]), capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)
