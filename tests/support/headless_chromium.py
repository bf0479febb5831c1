"""Headless Chromium driven over the DevTools protocol, and `traceview dashboard` served as a user starts it.

Shared by tests/e2e/test_dashboard_browser.py and benchmarks/bench_dashboard.py.
Streamlit renders client-side over a websocket, so a one-shot
`chromium --screenshot` races the app; this client opens a page and polls
the DOM (real time) instead.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer within {timeout:.0f} s")


class DevTools:
    """A minimal Chrome DevTools Protocol client over one page's websocket."""

    def __init__(self, ws_url: str):
        from websockets.sync.client import connect

        self.stack = contextlib.ExitStack()
        self.ws = self.stack.enter_context(connect(ws_url, max_size=64 * 2**20, open_timeout=20))
        self.next_id = 0

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message.get("result", {})

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 60.0, what: str = "", poll: float = 0.25) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.js(expression):
                return
            time.sleep(poll)
        text = (self.js("document.body ? document.body.innerText : ''") or "")[:1500]
        raise AssertionError(f"page never showed {what or expression} within {timeout:.0f} s; it shows:\n{text}")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=False)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self.stack.close()


@contextlib.contextmanager
def chromium(profile: Path, width: int = 1400, height: int = 2000) -> Iterator[DevTools]:
    """Headless Chromium on about:blank (profile: a fresh folder), its first page's DevTools client."""
    proc = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                             "--no-first-run", "--disable-background-networking", "--disable-component-update",
                             "--disable-sync", f"--user-data-dir={profile}", f"--window-size={width},{height}",
                             "--hide-scrollbars", "--remote-debugging-port=0", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            pages = [t for t in json.load(resp) if t.get("type") == "page"]
        tools = DevTools(pages[0]["webSocketDebuggerUrl"])
        tools.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                   mobile=False)
        try:
            yield tools
        finally:
            tools.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def dashboard_server(trace: Path, log_path: Path, *extra: str, env: dict | None = None,
                     timeout: float = 120) -> Iterator[str]:
    """`traceview dashboard TRACE --port <free port>` as a user starts it; yields its URL once it answers."""
    port = free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "traceview", "dashboard", str(trace), "--port", str(port),
                                 *extra], stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_http(url + "/_stcore/health", timeout)
            yield url
        finally:
            proc.send_signal(signal.SIGTERM)   # the command stops its Streamlit server with it
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
