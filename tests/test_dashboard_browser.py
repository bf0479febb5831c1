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
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import traceview
from traceview.dashboards.overview import fmt_share

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[1]
TABS = ("Overview", "Roofline", "Ops", "Timeline", "Op detail", "Memory", "Parallelism", "Compare")


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


@contextlib.contextmanager
def dashboard_server(trace: Path, log_path: Path):
    """`traceview dashboard TRACE --port <free port>` as a user starts it; yields its URL."""
    port = _free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "traceview", "dashboard", str(trace), "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_http(url + "/_stcore/health", 60)
            yield url
        finally:
            proc.send_signal(signal.SIGTERM)   # the command stops its Streamlit server with it
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    server_log = log_path.read_text()
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


def _upload(tools: DevTools, path: Path) -> None:
    root = tools.call("DOM.getDocument", depth=-1)["root"]["nodeId"]
    node = tools.call("DOM.querySelector", nodeId=root, selector='input[type="file"]')["nodeId"]
    assert node, "no file input on the page"
    tools.call("DOM.setFileInputFiles", files=[str(path)], nodeId=node)


def _tour(browser: DevTools, url: str, trace: Path, out: Path, prefix: str, overview_charts: int) -> list[Path]:
    """Open the page, check the overview against the CLI's numbers, visit every tab; screenshots."""
    # The numbers the page must show, from the CLI's own path (report.summary_record).
    expected = traceview.load(trace).to_json()["summary"]
    browser.call("Page.enable")
    browser.call("Page.navigate", url=url)
    browser.wait_for("document.body && document.body.innerText.includes('Where the time goes')", 120,
                     "the overview")
    _settle(browser, overview_charts, "Overview")
    shots = [browser.screenshot(out / f"{prefix}_overview.png")]
    text = browser.js("document.body.innerText")
    assert "MFU" in text and fmt_share(expected["mfu"]) in text, f"MFU {fmt_share(expected['mfu'])} not shown"
    assert "Traceback" not in text and "traceview failed" not in text
    assert browser.js("document.querySelectorAll('[data-testid=\"stException\"]').length") == 0

    # Each tab: its charts drawn and its own text shown (the visible panel's innerText).
    for name, charts, wanted in (("Roofline", 1, "ridge point"), ("Ops", 0, "Download CSV"),
                                 ("Timeline", 1, "idle gaps"), ("Op detail", 0, "Roofline arithmetic")):
        _click_tab(browser, name)
        _settle(browser, charts, name)
        panel = browser.js("[...document.querySelectorAll('[role=\"tabpanel\"]')]"
                           ".filter(p => p.offsetParent !== null).map(p => p.innerText).join('\\n')")
        assert wanted in panel, f"{name} tab does not show {wanted!r}"
        shots.append(browser.screenshot(out / f"{prefix}_{name.lower().replace(' ', '_')}.png"))
    assert "HLO instruction" in panel and "%" in panel
    return shots


def test_dashboard_in_chromium(browser, sample_traces, tmp_path):
    trace = sample_traces / "transformer"
    with dashboard_server(trace, tmp_path / "server.log") as url:
        shots = _tour(browser, url, trace, tmp_path, "dashboard", overview_charts=2)
        assert "transformer" in browser.js("document.body.innerText")
        shots.append(_bad_upload(browser, tmp_path))
    _keep(shots)
    for shot in shots:
        assert _not_blank(shot) > 200, f"{shot.name} looks blank"


def test_real_tpu_trace_in_chromium(browser, shared_traces, tmp_path):
    trace = shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb"
    with dashboard_server(trace, tmp_path / "server.log") as url:
        shots = _tour(browser, url, trace, tmp_path, "dashboard_tpu_v6e", overview_charts=2)
        assert "tpu-v6e" in browser.js("document.body.innerText")
    _keep(shots)
    for shot in shots:
        assert _not_blank(shot) > 200, f"{shot.name} looks blank"


def _bad_upload(browser: DevTools, tmp_path: Path) -> Path:
    """Upload through the page's own file input: a corrupt file is one line in the page."""
    bad = tmp_path / "corrupt.xplane.pb"
    bad.write_bytes(b"\x0a\xff\xff\xff\x0fnot an xspace")
    _upload(browser, bad)
    browser.wait_for("document.body.innerText.includes('corrupt.xplane.pb')", 60, "the upload's error")
    _settle(browser, 0, "the error")
    error = browser.js("[...document.querySelectorAll('[data-testid=\"stAlert\"]')].map(e => e.innerText).join('|')")
    assert "corrupt.xplane.pb" in error and "Traceback" not in browser.js("document.body.innerText")
    return browser.screenshot(tmp_path / "dashboard_bad_upload.png")


_GRAPHVIZ = "document.querySelectorAll('[data-testid=\"stGraphVizChart\"] svg').length"


def _visible_panel(browser: DevTools) -> str:
    return browser.js("[...document.querySelectorAll('[role=\"tabpanel\"]')]"
                      ".filter(p => p.offsetParent !== null).map(p => p.innerText).join('\\n')")


@pytest.mark.parametrize("rel, memory, chip", [
    ("AMD-AGI-TraceLens/jax08_gemm/tw003.xplane.pb", "GPU_0_bfc", "mi300x"),
    ("openxla-xprof/tpu_inference_2.xplane.pb", "0", "tpu-v6e"),
])
def test_memory_tab_and_op_graph_in_chromium(browser, shared_traces, tmp_path, rel, memory, chip):
    """The Memory tab shows XProf's peak and what holds it; Op detail draws the op graph."""
    from traceview.memory.render import fmt_bytes
    from traceview.memory.runtime import runtime_peaks
    from traceview.parsers.allocator_events import read_allocator_events

    trace = shared_traces / rel
    peak = next(p for p in runtime_peaks(read_allocator_events(trace)) if p.name == memory)
    shots = []
    with dashboard_server(trace, tmp_path / "server.log") as url:
        browser.call("Page.enable")
        browser.call("Page.navigate", url=url)
        browser.wait_for("document.body && document.body.innerText.includes('Where the time goes')", 120,
                         "the overview")
        _settle(browser, 1, "Overview")
        _click_tab(browser, "Memory")
        _settle(browser, 3, "Memory")
        panel = _visible_panel(browser)
        assert "Held at the peak" in panel and "Buffers live at the peak" in panel
        assert fmt_bytes(peak.peak_bytes) in panel and f"headroom on {chip}" in panel
        shots.append(browser.screenshot(tmp_path / f"dashboard_memory_{chip}.png"))
        _click_tab(browser, "Op detail")
        _settle(browser, 0, "Op detail")
        browser.wait_for(f"{_GRAPHVIZ} >= 1", 60, "the op graph")
        browser.js("document.querySelector('[data-testid=\"stGraphVizChart\"]').scrollIntoView()")
        time.sleep(1.0)
        assert "-bound" in browser.js("document.querySelector('[data-testid=\"stGraphVizChart\"]').innerHTML")
        shots.append(browser.screenshot(tmp_path / f"dashboard_op_graph_{chip}.png"))
    _keep(shots)
    for shot in shots:
        assert _not_blank(shot) > 200, f"{shot.name} looks blank"


def test_parallelism_tab_in_chromium(browser, sample_traces, tmp_path):
    """The Parallelism tab on the sharded sample: the mesh, each axis's role and verdict, the time chart."""
    from traceview.parallelism.diagnose import from_analysis
    from traceview.parallelism.report import parallelism_json

    trace = sample_traces / "sharded"
    expected = parallelism_json(from_analysis(traceview.load(trace).pipeline))
    with dashboard_server(trace, tmp_path / "server.log") as url:
        browser.call("Page.enable")
        browser.call("Page.navigate", url=url)
        browser.wait_for("document.body && document.body.innerText.includes('Where the time goes')", 120,
                         "the overview")
        _settle(browser, 0, "Overview")
        _click_tab(browser, "Parallelism")
        _settle(browser, 1, "Parallelism")
        panel = browser.js("[...document.querySelectorAll('[role=\"tabpanel\"]')]"
                           ".filter(p => p.offsetParent !== null).map(p => p.innerText).join('\\n')")
        shot = browser.screenshot(tmp_path / "dashboard_parallelism.png")
    assert "over 8 devices" in panel
    for axis in expected["axes"]:
        assert f"{axis['name']} ({axis['size']}): {axis['role_name']}" in panel
        assert axis["verdict"] in panel
    assert "Traceback" not in panel
    _keep([shot])
    assert _not_blank(shot) > 200


def test_compare_tab_in_chromium(browser, sample_traces, tmp_path):
    """The Compare tab diffs this run against another of the log dir, through `traceview.diff`."""
    with dashboard_server(sample_traces, tmp_path / "server.log") as url:
        browser.call("Page.enable")
        browser.call("Page.navigate", url=url)
        browser.wait_for("document.body && document.body.innerText.includes('Where the time goes')", 120,
                         "the overview")
        _click_tab(browser, "Compare")
        _settle(browser, 0, "Compare")
        browser.wait_for("document.body.innerText.includes('ops changed')", 120, "the comparison")
        panel = browser.js("[...document.querySelectorAll('[role=\"tabpanel\"]')]"
                           ".filter(p => p.offsetParent !== null).map(p => p.innerText).join('\\n')")
        assert "ops new / vanished" in panel and "base" in panel
        assert browser.js("document.querySelectorAll('[data-testid=\"stException\"]').length") == 0
        shot = browser.screenshot(tmp_path / "dashboard_compare.png")
    _keep([shot])
    assert _not_blank(shot) > 200
