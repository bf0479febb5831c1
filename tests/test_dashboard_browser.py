"""The real dashboard server in a real browser: `traceview dashboard` + headless Chromium.

Streamlit renders client-side over a websocket, so a one-shot
`chromium --screenshot` races the app (virtual time runs ahead of the
server). The test drives Chromium through the DevTools protocol instead:
open the page, wait (real time) until the app's text and charts are in the
DOM, click through the tabs and save a screenshot of each. Screenshots go
to tmp_path and, when $TRACEVIEW_SCREENSHOT_DIR is set, are copied there.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from traceview.analysis import build_analysis
from traceview.load import load_profile
from traceview.report import summary_record
from traceview.dashboards.overview import fmt_share

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[1]
TABS = ("Overview", "Roofline", "Ops", "Timeline", "Op detail", "Compare")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
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

    def wait_for(self, expression: str, timeout: float = 60.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.js(expression):
                return
            time.sleep(0.25)
        text = (self.js("document.body ? document.body.innerText : ''") or "")[:1500]
        raise AssertionError(f"page never showed {what or expression} within {timeout:.0f} s; it shows:\n{text}")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=False)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self.stack.close()


@pytest.fixture
def server(sample_traces, tmp_path):
    """`traceview dashboard sample_traces/transformer` on a free port; yields its URL."""
    port = _free_port()
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "traceview", "dashboard", str(sample_traces / "transformer"),
                             "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(url + "/_stcore/health", 60)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    server_log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in server_log, server_log[-3000:]


@pytest.fixture
def browser(tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    pytest.importorskip("websockets", reason="the DevTools client needs websockets (a streamlit dependency)")
    profile = tmp_path / "chromium-profile"
    proc = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                             "--no-first-run", "--disable-background-networking", "--disable-component-update",
                             "--disable-sync", f"--user-data-dir={profile}", "--window-size=1400,2000",
                             "--hide-scrollbars", "--remote-debugging-port=0", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("chromium did not start its DevTools endpoint")
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            pages = [t for t in json.load(resp) if t.get("type") == "page"]
        tools = DevTools(pages[0]["webSocketDebuggerUrl"])
        tools.call("Emulation.setDeviceMetricsOverride", width=1400, height=2000, deviceScaleFactor=1, mobile=False)
        yield tools
        tools.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _not_blank(path: Path) -> int:
    from PIL import Image

    image = Image.open(path).convert("RGB")
    colours = image.getcolors(maxcolors=1_000_000)
    return len(colours) if colours else 1_000_000


def _keep(paths: list[Path]) -> None:
    target = os.environ.get("TRACEVIEW_SCREENSHOT_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        for p in paths:
            shutil.copy(p, Path(target) / p.name)


_RUNNING = "!!document.querySelector('[data-testid=\"stStatusWidget\"]')"
_VEGA = "document.querySelectorAll('[data-testid=\"stVegaLiteChart\"] canvas, " \
        "[data-testid=\"stVegaLiteChart\"] svg.marks').length"


def _settle(tools: DevTools, charts: int, what: str) -> None:
    """Wait until the script finished its run and `charts` Vega charts are drawn in the visible tab."""
    tools.wait_for(f"!{_RUNNING}", 90, "the app finishing its run")
    if charts:
        tools.wait_for(f"{_VEGA} >= {charts}", 60, f"{charts} charts in {what}")
    time.sleep(1.0)   # let the charts' transitions end


def _click_tab(tools: DevTools, name: str) -> None:
    ok = tools.js(f"""(() => {{
        const tab = [...document.querySelectorAll('[role="tab"]')].find(b => b.innerText.trim() === {name!r});
        if (!tab) return false; tab.click(); return true; }})()""")
    assert ok, f"no tab named {name}"


def test_dashboard_in_chromium(server, browser, sample_traces, tmp_path):
    # The numbers the page must show, from the CLI's own path (report.summary_record).
    expected = summary_record(build_analysis(load_profile(sample_traces / "transformer")))
    browser.call("Page.enable")
    browser.call("Page.navigate", url=server)
    browser.wait_for("document.body && document.body.innerText.includes('Where the time goes')", 120,
                     "the overview")
    _settle(browser, 2, "Overview")
    shots = [browser.screenshot(tmp_path / "dashboard_overview.png")]
    text = browser.js("document.body.innerText")
    assert "transformer" in text and "MFU" in text
    assert fmt_share(expected["mfu"]) in text, f"MFU {fmt_share(expected['mfu'])} not on the page"
    assert "Traceback" not in text and "Error" not in text

    for name, charts in (("Roofline", 1), ("Ops", 0), ("Timeline", 1), ("Op detail", 0)):
        _click_tab(browser, name)
        _settle(browser, charts, name)
        shots.append(browser.screenshot(tmp_path / f"dashboard_{name.lower().replace(' ', '_')}.png"))
    dom = browser.js("document.documentElement.outerHTML")
    assert re.search(r"Roofline on cpu", dom) or "roofline" in dom.lower()
    assert "HLO instruction" in browser.js("document.body.innerText")
    _keep(shots)
    for shot in shots:
        assert _not_blank(shot) > 200, f"{shot.name} looks blank"
