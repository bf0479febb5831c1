"""The real dashboard server in a real browser: `traceview dashboard` + headless Chromium.

Streamlit renders client-side over a websocket, so a one-shot
`chromium --screenshot` races the app (virtual time runs ahead of the
server). The test drives Chromium through the DevTools protocol instead:
open the page, wait (real time) until the app's text and charts are in the
DOM, click through the tabs and save a screenshot of each. Screenshots go
to tmp_path and, when $TRACEVIEW_SCREENSHOT_DIR is set, are copied there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

import pytest

import traceview
from tests.support.headless_chromium import CHROMIUM, DevTools, chromium
from tests.support.headless_chromium import dashboard_server as _server
from traceview.units import fmt_share

pytestmark = pytest.mark.slow

TABS = ("Overview", "Roofline", "Ops", "Timeline", "Op detail", "Model", "Memory", "Parallelism", "Inference",
        "What if", "Compare", "History")


@contextlib.contextmanager
def dashboard_server(trace: Path, log_path: Path, *extra: str):
    """`traceview dashboard TRACE [EXTRA...]` as a user starts it; yields its URL. Its log must hold no traceback."""
    with _server(trace, log_path, *extra, timeout=120) as url:
        yield url
    server_log = log_path.read_text()
    assert "Traceback" not in server_log, server_log[-3000:]
    assert "first page ready" in server_log, server_log[-3000:]   # the server read the trace before the page


@pytest.fixture
def browser(tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    pytest.importorskip("websockets", reason="the DevTools client needs websockets (a streamlit dependency)")
    try:
        with chromium(tmp_path / "chromium-profile") as tools:
            yield tools
    except RuntimeError as exc:
        pytest.fail(str(exc))


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
# Charts drawn: Vega's, and the Overview's bars drawn as HTML (dashboards/bars.py, role="img").
_CHARTS = "document.querySelectorAll('[data-testid=\"stVegaLiteChart\"] canvas, " \
          "[data-testid=\"stVegaLiteChart\"] svg.marks, [data-testid=\"stHtml\"] [role=\"img\"]').length"


def _settle(tools: DevTools, charts: int, what: str) -> None:
    """Wait until the script finished its run and `charts` charts are drawn in the visible tab."""
    tools.wait_for(f"!{_RUNNING}", 90, "the app finishing its run")
    if charts:
        tools.wait_for(f"{_CHARTS} >= {charts}", 60, f"{charts} charts in {what}")
    time.sleep(1.0)   # let the charts' transitions end


_PANEL = ("[...document.querySelectorAll('[role=\"tabpanel\"]')]"
          ".filter(p => p.offsetParent !== null).map(p => p.innerText).join('\\n')")


def _click_tab(tools: DevTools, name: str, shows: str) -> None:
    """Click a tab and wait until its panel shows `shows` (the tab's content runs when it is opened)."""
    ok = tools.js(f"""(() => {{
        const tab = [...document.querySelectorAll('[role="tab"]')].find(b => b.innerText.trim() === {name!r});
        if (!tab) return false; tab.click(); return true; }})()""")
    assert ok, f"no tab named {name}"
    tools.wait_for(f"({_PANEL}).includes({shows!r})", 120, f"{shows!r} in the {name} tab")


def _upload(tools: DevTools, path: Path) -> None:
    root = tools.call("DOM.getDocument", depth=-1)["root"]["nodeId"]
    node = tools.call("DOM.querySelector", nodeId=root, selector='input[type="file"]')["nodeId"]
    assert node, "no file input on the page"
    tools.call("DOM.setFileInputFiles", files=[str(path)], nodeId=node)


def _open_overview(browser: DevTools, url: str) -> None:
    """Open the page and wait until the Overview's first content is there."""
    browser.call("Page.enable")
    browser.call("Page.navigate", url=url)
    browser.wait_for("document.body && document.body.innerText.includes('Where the time goes')", 120,
                     "the overview")


def _tour(browser: DevTools, url: str, trace: Path, out: Path, prefix: str, overview_charts: int) -> list[Path]:
    """Open the page, check the overview against the CLI's numbers, visit every tab; screenshots."""
    # The numbers the page must show, from the CLI's own path (report.summary_record).
    expected = traceview.load(trace).to_json()["summary"]
    _open_overview(browser, url)
    _settle(browser, overview_charts, "Overview")
    shots = [browser.screenshot(out / f"{prefix}_overview.png")]
    text = browser.js("document.body.innerText")
    assert "MFU" in text and fmt_share(expected["mfu"]) in text, f"MFU {fmt_share(expected['mfu'])} not shown"
    assert "Traceback" not in text and "traceview failed" not in text
    assert browser.js("document.querySelectorAll('[data-testid=\"stException\"]').length") == 0

    # Each tab: its charts drawn and its own text shown (the visible panel's innerText).
    for name, charts, wanted in (("Roofline", 1, "ridge point"), ("Ops", 0, "Download CSV"),
                                 ("Timeline", 1, "idle gaps"), ("Op detail", 0, "Roofline arithmetic")):
        _click_tab(browser, name, wanted)
        _settle(browser, charts, name)
        if name == "Roofline":   # the ops the chart cannot place are listed in a data grid below it
            browser.wait_for(f"!({_PANEL}).includes('are not on the chart') || "
                             "document.querySelectorAll('[data-testid=\"stDataFrame\"] canvas').length > 0", 60,
                             "the table of ops not on the chart")
            time.sleep(0.5)
        panel = browser.js(_PANEL)
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


def test_nvidia_command_buffer_trace_in_chromium(browser, shared_traces, tmp_path):
    """An H200 training step run with XLA command buffers: every tab shows the ops placed inside the graphs."""
    trace = shared_traces / "h200" / "train"
    if not trace.is_dir():
        pytest.skip(f"H200 captures not available in {trace}")
    with dashboard_server(trace, tmp_path / "server.log") as url:
        shots = _tour(browser, url, trace, tmp_path, "dashboard_h200_train", overview_charts=2)
        text = browser.js("document.body.innerText")
        assert "h200" in text and "command_buffer_1" not in text
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
    return browser.js(_PANEL)


@pytest.mark.parametrize("rel, memory, chip", [
    ("AMD-AGI-TraceLens/jax08_gemm/tw003.xplane.pb", "GPU_0_bfc", "mi300x"),
    ("openxla-xprof/tpu_inference_2.xplane.pb", "0", "tpu-v6e"),
])
def test_memory_tab_and_op_graph_in_chromium(browser, shared_traces, tmp_path, rel, memory, chip):
    """The Memory tab shows XProf's peak and what holds it; Op detail draws the op graph."""
    from traceview.hostreduce.memory_peaks import runtime_peaks
    from traceview.parsers.xspace.allocator_events import read_allocator_events
    from traceview.render.memory import fmt_bytes

    trace = shared_traces / rel
    peak = next(p for p in runtime_peaks(read_allocator_events(trace)) if p.name == memory)
    shots = []
    with dashboard_server(trace, tmp_path / "server.log") as url:
        _open_overview(browser, url)
        _settle(browser, 1, "Overview")
        _click_tab(browser, "Memory", "Held at the peak")
        _settle(browser, 3, "Memory")
        panel = _visible_panel(browser)
        assert "Held at the peak" in panel and "Buffers live at the peak" in panel
        assert fmt_bytes(peak.peak_bytes) in panel and f"headroom on {chip}" in panel
        shots.append(browser.screenshot(tmp_path / f"dashboard_memory_{chip}.png"))
        _click_tab(browser, "Op detail", "Roofline arithmetic")
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
    from traceview.render.parallelism import parallelism_json

    trace = sample_traces / "sharded"
    expected = parallelism_json(from_analysis(traceview.load(trace).pipeline))
    with dashboard_server(trace, tmp_path / "server.log") as url:
        _open_overview(browser, url)
        _settle(browser, 0, "Overview")
        _click_tab(browser, "Parallelism", "Mesh")
        _settle(browser, 1, "Parallelism")
        panel = browser.js(_PANEL)
        shot = browser.screenshot(tmp_path / "dashboard_parallelism.png")
    assert "over 8 devices" in panel
    for axis in expected["axes"]:
        assert f"{axis['name']} ({axis['size']}): {axis['role_name']}" in panel
        assert axis["verdict"] in panel
    assert "Traceback" not in panel
    _keep([shot])
    assert _not_blank(shot) > 200


def test_inference_tab_in_chromium(browser, sample_traces, tmp_path):
    """The Inference tab on the serving sample: the phases, step times against the floor, the batch
    against the critical batch (two charts drawn), the numbers of `traceview inference`."""
    from traceview.render.inference import inference_json

    trace = sample_traces / "serving"
    expected = inference_json(traceview.load(trace).inference())
    panel, _ = _inference_panel(browser, trace, tmp_path, "dashboard_inference.png")
    assert "Step time over the run against the floor" in panel
    assert f"{expected['critical_batch']:,.0f}" in panel
    for phase in expected["phases"]:
        assert phase["module"] in panel


def test_inference_tab_paged_in_chromium(browser, sample_traces, tmp_path):
    """The Inference tab on the paged sample: a ragged step mixing prefill and decode tokens beside a decode
    step, both drawn, and the paged cache's bytes per token."""
    panel, shot = _inference_panel(browser, sample_traces / "paged_serving", tmp_path, "dashboard_inference_paged.png")
    for text in ("jit_mixed_step", "jit_decode_step", "mixed", "256 B"):
        assert text in panel, text
    _keep([shot])
    assert _not_blank(shot) > 200


def _inference_panel(browser, trace: Path, tmp_path: Path, shot_name: str) -> tuple[str, Path]:
    """The Inference tab of ``trace`` once its two charts are drawn: its text and a screenshot."""
    with dashboard_server(trace, tmp_path / "server.log") as url:
        _open_overview(browser, url)
        _settle(browser, 0, "Overview")
        _click_tab(browser, "Inference", "Batch against the critical batch")
        _settle(browser, 2, "Inference")
        return browser.js(_PANEL), browser.screenshot(tmp_path / shot_name)


@pytest.mark.parametrize("sample, charts, shows", [
    ("pipeline", 2, ["Pipeline: 4 stages, 6 microbatches, bubble 33.3%", "stage (4): pipeline", "bubble-bound",
                     "Measured from the schedule loop's ticks", "against the GPipe formula 33.3%"]),
    ("ring_attention", 2, ["Context (ring): 96 tokens of sequence per chip", "context parallel"]),
    ("moe", 1, ["Experts: E=8, top-2, capacity 16", "expert parallel + data parallel"]),
    # a program per stage: the measured schedule of one step (one chart) and each stage's idle time
    ("pipeline_mpmd", 1, ["pipeline of 4 stages, each running its own program", "Pipeline: 4 stages, 4 microbatches",
                          "against the formula (p-1)/(m+p-1) 42.9%", "jit_stage3"]),
])
def test_parallelism_tab_structures_in_chromium(browser, sample_traces, tmp_path, sample, charts, shows):
    """The Parallelism tab's roles (several per axis), the pipeline's schedule and bubble, the ring."""
    trace = sample_traces / sample
    with dashboard_server(trace, tmp_path / "server.log") as url:
        _open_overview(browser, url)
        _settle(browser, 0, "Overview")
        _click_tab(browser, "Parallelism", "Pipeline" if sample == "pipeline_mpmd" else "Mesh")
        _settle(browser, charts, "Parallelism")
        panel = browser.js(_PANEL)
        shot = browser.screenshot(tmp_path / f"dashboard_parallelism_{sample}.png")
    for text in shows:
        assert text in panel, text
    assert "Traceback" not in panel
    _keep([shot])
    assert _not_blank(shot) > 200


def test_model_tab_in_chromium(browser, sample_traces, tmp_path):
    """The Model tab on the transformer sample: the icicle of named scopes (Plotly draws it), the ops of
    the scope with most gain, and the hottest source lines with their text."""
    trace = sample_traces / "transformer"
    tree = traceview.load(trace).scope_tree()
    best = "/".join(tree.top_by_gain(1)["path"].iloc[0])
    with dashboard_server(trace, tmp_path / "server.log") as url:
        _open_overview(browser, url)
        _settle(browser, 0, "Overview")
        _click_tab(browser, "Model", "attributed")
        browser.wait_for("document.querySelectorAll('[data-testid=\"stPlotlyChart\"] g.slice').length > 10", 120,
                         "the icicle's slices")
        browser.wait_for(f"({_PANEL}).includes('Hottest source lines')", 60, "the source lines")
        time.sleep(1.0)
        panel = browser.js(_PANEL)
        slices = browser.js("[...document.querySelectorAll('[data-testid=\"stPlotlyChart\"] g.slice')]"
                            ".map(g => g.textContent).join('|')")
        shot = browser.screenshot(tmp_path / "dashboard_model.png")
        # A click on a node lists its ops: the first "mlp" slice drawn is layer_1's (the larger layer)
        x, y = browser.js("""(() => { const g = [...document.querySelectorAll('[data-testid="stPlotlyChart"] g.slice')]
            .find(s => s.textContent.trim() === 'mlp'); const b = g.querySelector('path').getBoundingClientRect();
            return [b.x + b.width / 2, b.y + b.height / 2]; })()""")
        for kind in ("mousePressed", "mouseReleased"):
            browser.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
        browser.wait_for(f"({_PANEL}).includes('ops under train_step/Transformer/layer_1/mlp')", 60,
                         "the clicked scope's ops")
        clicked = browser.screenshot(tmp_path / "dashboard_model_clicked.png")
    assert "100.0%" in panel and "attributed" in panel
    assert "Transformer" in slices and "layer_1" in slices and "attn" in slices
    assert best in panel                       # the picked scope, whose ops are listed
    assert "Traceback" not in panel
    _keep([shot, clicked])
    assert _not_blank(shot) > 200 and _not_blank(clicked) > 200


def test_compare_tab_in_chromium(browser, sample_traces, tmp_path):
    """The Compare tab diffs this run against another of the log dir, through `traceview.diff`."""
    with dashboard_server(sample_traces, tmp_path / "server.log") as url:
        _open_overview(browser, url)
        _click_tab(browser, "Compare", "ops changed")
        _settle(browser, 0, "Compare")
        browser.wait_for("document.body.innerText.includes('ops changed')", 120, "the comparison")
        panel = browser.js(_PANEL)
        assert "ops new / vanished" in panel and "base" in panel
        assert browser.js("document.querySelectorAll('[data-testid=\"stException\"]').length") == 0
        shot = browser.screenshot(tmp_path / "dashboard_compare.png")
    _keep([shot])
    assert _not_blank(shot) > 200


def test_history_tab_in_chromium(browser, sample_traces, tmp_path):
    """The History tab: a trend chart per metric, the change point marked at the first slower run, and
    a recorded run opened in the other tabs."""
    pytest.importorskip("sqlalchemy", reason="the History tab needs the `history` extra")
    pytest.importorskip("ruptures", reason="the History tab needs the `history` extra")
    from traceview.cli import main

    db = tmp_path / "history.db"
    names = ["mlp", "mlp_repeat"] * 3 + ["mlp"] + ["mlp_slow"] * 5
    for i, name in enumerate(names):
        assert main(["history", "add", str(db), str(sample_traces / name), "--label", f"commit-{i:02d}",
                     "--time", f"2026-11-{i + 1:02d}T08:00:00Z"]) == 0
    trace = sample_traces / "mlp"
    with dashboard_server(trace, tmp_path / "server.log", "--history", str(db)) as url:
        _open_overview(browser, url)
        _settle(browser, 1, "Overview")
        _click_tab(browser, "History", "change point at")
        _settle(browser, 3, "History")      # step_time, mfu, gain
        panel = _visible_panel(browser)
        assert "12 runs" in panel and "change point at commit-07" in panel and "worse" in panel
        marks = browser.js("document.querySelectorAll('[role=\"tabpanel\"] [data-testid=\"stVegaLiteChart\"]')"
                           ".length")
        assert marks >= 3
        shots = [browser.screenshot(tmp_path / "dashboard_history.png")]
        # Open the newest recorded run (a slower capture) in the other tabs.
        ok = browser.js("""(() => { const b = [...document.querySelectorAll('button')]
            .find(x => x.innerText.trim() === 'Open'); if (!b) return false; b.click(); return true; })()""")
        assert ok, "no Open button"
        browser.wait_for("document.body.innerText.includes('mlp_slow')", 120, "the slower run opened")
        _settle(browser, 0, "the opened run")
        assert "Traceback" not in browser.js("document.body.innerText")
        shots.append(browser.screenshot(tmp_path / "dashboard_history_opened.png"))


def test_overview_lists_what_to_fix_first_and_links_to_tabs(browser, sample_traces, tmp_path):
    """The Overview opens with the ranked advice (as `Analysis.advice()` ranks it); an item's button opens
    its tab: on the host-bound sample the first item is the host, and its button opens the Timeline."""
    trace = sample_traces / "host_bound"
    first = traceview.load(trace).advice().items[0]
    assert first.kind == "idle" and first.tab == "Timeline"
    with dashboard_server(trace, tmp_path / "server.log") as url:
        _open_overview(browser, url)
        _settle(browser, 2, "Overview")
        panel = _visible_panel(browser)
        assert panel.index("What to fix first") < panel.index("Where the time goes"), "the advice is not first"
        assert first.title in panel
        shots = [browser.screenshot(tmp_path / "dashboard_advice_overview.png")]
        ok = browser.js("""(() => { const b = [...document.querySelectorAll('[role="tabpanel"] button')]
            .find(x => x.offsetParent !== null && x.innerText.includes('Timeline →'));
            if (!b) return false; b.click(); return true; })()""")
        assert ok, "no 'Timeline →' button beside the first item"
        browser.wait_for(f"({_PANEL}).includes('idle gaps')", 120, "the Timeline tab opened from the advice")
        selected = browser.js("[...document.querySelectorAll('[role=\"tab\"]')]"
                              ".filter(t => t.getAttribute('aria-selected') === 'true').map(t => t.innerText).join()")
        assert selected.strip() == "Timeline"
        _settle(browser, 1, "Timeline")
        shots.append(browser.screenshot(tmp_path / "dashboard_advice_timeline.png"))
    _keep(shots)
    for shot in shots:
        assert _not_blank(shot) > 200, f"{shot.name} looks blank"


def test_timeline_of_a_pod_in_chromium(browser, shared_traces, tmp_path):
    """A pod's Timeline opens on one aggregated lane per host (no event drawn); a click on a host's lane
    draws that host's devices' ops."""
    run = tmp_path / "pod" / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for k in range(5):   # 5 hosts x 4 TPU devices: more devices than the timeline draws one by one
        shutil.copyfile(shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb", run / f"host{k}.xplane.pb")
    with dashboard_server(tmp_path / "pod", tmp_path / "server.log") as url:
        _open_overview(browser, url)
        _settle(browser, 0, "Overview")
        _click_tab(browser, "Timeline", "one lane per host")
        _settle(browser, 1, "Timeline")
        panel = browser.js(_PANEL)
        shot = browser.screenshot(tmp_path / "dashboard_pod_timeline.png")
        # a click in the third host's lane (lanes of 18 px from the top of the plot)
        x, y = browser.js("""(() => { const c = [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
            .filter(e => e.offsetParent !== null)[0]; const b = c.getBoundingClientRect();
            return [b.x + b.width * 0.6, b.y + 5 + 18 * 2.5]; })()""")
        for kind in ("mousePressed", "mouseReleased"):
            browser.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
        browser.wait_for(f"({_PANEL}).includes('idle gaps per device')", 90, "the clicked host's ops")
        _settle(browser, 1, "Timeline")
        drilled = browser.js(_PANEL)
        clicked = browser.screenshot(tmp_path / "dashboard_pod_timeline_host.png")
    assert "5 hosts, 20 devices" in panel and "idle gaps per device" not in panel
    assert "TPU:3" in drilled and "one lane per host" not in drilled
    assert "Traceback" not in panel + drilled
    _keep([shot, clicked])
    assert _not_blank(shot) > 50 and _not_blank(clicked) > 200


def test_first_page_from_the_stored_record_in_chromium(browser, sample_traces, tmp_path):
    """A run analysed before (`traceview analyze --format json` stored its output): the server says the first
    page is ready once it read that record, the Overview shows the CLI's figures, and a tab that needs the
    full analysis shows its content once it is loaded (docs/scale.md, "The dashboard's first page")."""
    import json
    import subprocess
    import sys

    trace = sample_traces / "host_bound"
    env = {**os.environ, "TRACEVIEW_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TRACEVIEW_NO_RESULT_CACHE", None)
    out = tmp_path / "analyze.json"
    subprocess.run([sys.executable, "-m", "traceview", "analyze", str(trace), "--format", "json", "-o", str(out)],
                   env=env, check=True, timeout=300)
    cli = json.loads(out.read_text())
    log = tmp_path / "server.log"
    with _server(trace, log, env=env, timeout=120) as url:
        deadline = time.monotonic() + 60
        while "first page ready" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "read from the stored analysis" in log.read_text(), log.read_text()[-2000:]
        _open_overview(browser, url)
        _settle(browser, 2, "Overview")
        panel = _visible_panel(browser)
        assert fmt_share(cli["summary"]["mfu"]) in panel and cli["advice"][0]["title"] in panel
        shots = [browser.screenshot(tmp_path / "dashboard_record_overview.png")]
        _click_tab(browser, "Timeline", "idle gaps")
        _settle(browser, 1, "Timeline")
        shots.append(browser.screenshot(tmp_path / "dashboard_record_timeline.png"))
    server_log = log.read_text()
    assert "Traceback" not in server_log, server_log[-3000:]
    _keep(shots)
    for shot in shots:
        assert _not_blank(shot) > 200, f"{shot.name} looks blank"


def test_whatif_tab_in_chromium(browser, sample_traces, tmp_path):
    """The What if tab on the sharded sample: today's step, the configurations ranked by projected step time
    (the numbers of `traceview whatif`), the chart of each projection's terms, and each note once with the
    ranks of the configs it belongs to, as the text view prints them."""
    from traceview.render.whatif import mesh_text, notes_by_rank, whatif_json
    from traceview.units import fmt_time_us

    trace = sample_traces / "sharded"
    expected = whatif_json(traceview.load(trace).whatif())
    with dashboard_server(trace, tmp_path / "server.log") as url:
        _open_overview(browser, url)
        _settle(browser, 0, "Overview")
        _click_tab(browser, "What if", "Configurations ranked by projected step time")
        _settle(browser, 1, "What if")
        panel = browser.js(_PANEL)
        shot = browser.screenshot(tmp_path / "dashboard_whatif.png")
    assert fmt_time_us(expected["baseline"]["step_time_us"]) in panel
    assert mesh_text(expected["baseline"]["mesh"]) in panel
    assert "Where each projected step goes" in panel and "Traceback" not in panel
    notes = notes_by_rank((c["mesh"], c["notes"]) for c in expected["configs"])
    # Streamlit's Markdown sets "->" as an arrow; the escaping breaks file names with an invisible joiner
    shown = " ".join(panel.replace("\u2060", "").replace("\u2192", "->").split())
    assert len(notes) >= 2 and notes[0].startswith("#1, #2")     # the one-host note, every config's
    for line in notes:
        assert " ".join(line.split()) in shown, line
    _keep([shot])
    assert _not_blank(shot) > 200
