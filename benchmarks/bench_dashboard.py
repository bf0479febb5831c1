"""How fast the dashboard shows its first page, and how responsive it stays on a big trace (not part of the tests).

first-page TRACE...   the user's view, in real headless Chromium. For each trace and repeat: start
    `traceview dashboard TRACE` as a user does (a fresh server, an empty table cache unless
    --warm-cache), wait until the command says the page is ready (its "first page ready" line, or with
    --ready health only until the server answers), then open the URL in an already running Chromium
    and time, from Page.navigate:
      headline_s  the Overview's headline figures (5 metrics) and its first chart drawn,
      overview_s  the whole Overview: every chart drawn and the devices table shown,
    plus ready_s, the command's start until ready (server start, imports, trace read, analysis).
    The browser's cache: --browser-cache cold (default) serves each repeat on a new port, so the browser
    fetches and compiles Streamlit's scripts every time (a browser that never opened the dashboard);
    warm serves every repeat on one port after one untimed visit (the user's second visit: Streamlit's
    scripts are cached, immutable, the page itself is revalidated). --shots DIR saves a screenshot.

script TRACE          the server side, in a fresh interpreter through Streamlit's AppTest: the
    imports of the app's modules, the trace's load and analysis as `traceview dashboard` warms it,
    then the first script run (what a browser's first session runs) and a second (cached) run.
    (AppTest's first run pays extra for its bare mode; first-page's script_run_s is the real
    server's own time for the first session's run, logged with TRACEVIEW_DASHBOARD_TIMING=1.)

reruns [--kind gpu|tpu] [--events N]   builds a trace of about N device events with
    benchmarks/bench_load.py's builder (a real trace's device timeline, repeated) and times each
    rerun: first load, target changes, an op-table filter, a timeline window change, an op selection.

    python benchmarks/bench_dashboard.py first-page ../shared/traces/openxla-xprof/tpu_inference_2.xplane.pb
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

READY_LINE = "first page ready"     # what `traceview dashboard` prints once the trace is analysed

# Installed in the page before it loads: every 20 ms, cheap DOM counts (no layout: textContent, not
# innerText) record when each milestone first holds, in ms since the navigation started.
_RECORDER = """
(() => {
  const marks = window.__tv_marks = {};
  const count = (sel) => document.querySelectorAll(sel).length;
  // a chart: a drawn Vega chart, or one drawn as HTML (dashboards/bars.py: st.html, role="img")
  const charts = () => count('[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg.marks, '
                             + '[data-testid="stHtml"] [role="img"]');
  const checks = {
    app: () => count('[data-testid="stApp"]') > 0,
    tabs: () => count('[role="tab"]') > 0,
    metrics: () => count('[data-testid="stMetric"]') >= 5,
    split_text: () => (document.body.textContent || '').includes('Where the time goes'),
    chart1: () => charts() >= 1,
    chart2: () => charts() >= 2,
    table: () => count('[data-testid="stDataFrame"], [data-testid="stTable"], [data-testid="stMarkdownContainer"] table') >= 1,
  };
  const timer = setInterval(() => {
    if (!document.body) return;
    for (const [name, check] of Object.entries(checks)) {
      if (!(name in marks) && check()) marks[name] = performance.now();
    }
    if (Object.keys(marks).length === Object.keys(checks).length) clearInterval(timer);
  }, 20);
})();
"""


def _marks(tools, charts: int, timeout: float = 300) -> dict[str, float]:
    """Seconds from navigation start to each milestone; headline (metrics, the split text, the first chart)
    and overview (all of the Overview's charts and its table)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        marks = tools.js("JSON.stringify(window.__tv_marks || {})")
        got = {k: v / 1000 for k, v in json.loads(marks or "{}").items()}
        done = ["metrics", "split_text", "chart1", "table"] + (["chart2"] if charts >= 2 else [])
        if all(k in got for k in done):
            got["headline_s"] = max(got["metrics"], got["split_text"], got["chart1"])
            got["overview_s"] = max(got[k] for k in done)
            return got
        time.sleep(0.25)
    text = (tools.js("document.body ? document.body.innerText : ''") or "")[:1500]
    raise RuntimeError(f"the page never showed the whole Overview; it shows:\n{text}")


def _wait_ready(log: Path, url: str, mode: str, timeout: float) -> None:
    from tests.support.headless_chromium import wait_http

    wait_http(url + "/_stcore/health", timeout)
    if mode == "line":
        deadline = time.monotonic() + timeout
        while READY_LINE not in log.read_text():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server never printed {READY_LINE!r}:\n{log.read_text()[-2000:]}")
            time.sleep(0.05)


def _script_runs(log: Path) -> dict[str, float]:
    """The server's own time for its first script run (TRACEVIEW_DASHBOARD_TIMING=1)."""
    runs = [float(line.split("script run ")[1].split()[0]) for line in log.read_text().splitlines()
            if "script run " in line]
    return {"script_run_s": runs[0]} if runs else {}


def first_page(trace: Path, repeat: int, ready: str, warm_cache: bool, charts: int, shots: Path | None,
               port: int | None = None, browser_cache: str = "cold") -> dict:
    """Open the dashboard of `trace` in headless Chromium `repeat` times, each on a fresh server (on `port`
    every time when given: the browser's cache then holds Streamlit's scripts from the second time on;
    browser_cache "warm": one port, and one untimed visit first)."""
    from tests.support.headless_chromium import chromium, free_port

    runs = []
    if browser_cache == "warm":
        port = port or free_port()
    visits = repeat + (browser_cache == "warm")
    with tempfile.TemporaryDirectory() as tmp, chromium(Path(tmp) / "profile") as tools:
        tools.call("Page.enable")
        tools.call("Page.addScriptToEvaluateOnNewDocument", source=_RECORDER)
        cache = Path(tmp) / "cache"
        for i in range(visits):
            env = {**os.environ, "TRACEVIEW_CACHE_DIR": str(cache if warm_cache else Path(tmp) / f"cache{i}"),
                   "TRACEVIEW_DASHBOARD_TIMING": "1"}
            if warm_cache and i == 0:   # fill the table cache once
                subprocess.run([sys.executable, "-m", "traceview", "analyze", str(trace), "--format", "json",
                                "-o", os.devnull], env=env, check=True)
            tools.call("Page.navigate", url="about:blank")
            log = Path(tmp) / f"server{i}.log"
            url = f"http://127.0.0.1:{port or free_port()}"
            with open(log, "w") as out:
                t = time.perf_counter()
                proc = subprocess.Popen([sys.executable, "-m", "traceview", "dashboard", str(trace), "--port",
                                         url.rsplit(":", 1)[1]], stdout=out, stderr=subprocess.STDOUT, env=env)
                try:
                    _wait_ready(log, url, ready, 300)
                    ready_s = time.perf_counter() - t
                    time.sleep(0.5)   # a user opens the URL a moment after it is printed
                    tools.call("Page.navigate", url=url)
                    marks = _marks(tools, charts)
                    if shots is not None and i == visits - repeat:
                        shots.mkdir(parents=True, exist_ok=True)
                        tools.screenshot(shots / f"first_page_{trace.name.split('.')[0]}.png")
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
            run = {"ready_s": ready_s, **marks, **_script_runs(log)}
            if "Traceback" in log.read_text():   # a failure elsewhere on the page: say so, keep the times
                print(log.read_text()[-3000:], file=sys.stderr)
                run["server_traceback"] = 1.0
            if i >= visits - repeat:   # not the untimed visit that fills the browser's cache
                runs.append(run)
    summary = {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0] if all(k in r for r in runs)}
    cached = "warm" if browser_cache == "warm" else "cold on the first repeat, then warm" if port else "cold"
    return {"trace": str(trace), "browser_cache": cached,
            "repeats": [{k: round(v, 2) for k, v in r.items()} for r in runs], "median": summary}


_SCRIPT = """
import os, sys, time
t = time.perf_counter()
from streamlit.testing.v1 import AppTest
from traceview.dashboards import warm
from traceview.dashboards.config import from_env
times = {"import_streamlit_s": time.perf_counter() - t}
os.environ["TRACEVIEW_DASHBOARD_PATH"] = sys.argv[1]
t = time.perf_counter()
warm.warm_first_page(from_env())
times["warm_s"] = time.perf_counter() - t
at = AppTest.from_file(str(warm.APP), default_timeout=600)
t = time.perf_counter()
at.run()
times["first_run_s"] = time.perf_counter() - t
assert not at.exception, [e.value for e in at.exception]
t = time.perf_counter()
at.run()
times["second_run_s"] = time.perf_counter() - t
print(times)
"""


def script(trace: Path) -> dict:
    res = subprocess.run([sys.executable, "-c", _SCRIPT, str(trace)], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(res.stderr[-3000:])
    measured = ast.literal_eval(res.stdout.strip().splitlines()[-1])
    return {"trace": str(trace), **{k: round(v, 3) for k, v in measured.items()}}


_RERUNS = """
import os, sys, time
from pathlib import Path
from streamlit.testing.v1 import AppTest
import traceview.dashboards

def peak_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")

os.environ["TRACEVIEW_DASHBOARD_PATH"] = sys.argv[1]
app = Path(traceview.dashboards.__file__).parent / "app.py"
times = {}
at = AppTest.from_file(str(app), default_timeout=1800)

def timed(name, action):
    t = time.perf_counter()
    action()
    times[name] = time.perf_counter() - t
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]

def show(tab):
    at.session_state["tv_tab"] = tab
    return at.run()

timed("first_load_s", at.run)
target = sys.argv[2]
timed("target_change_s", lambda: at.sidebar.selectbox(key="target").set_value(target).run())
timed("second_target_change_s", lambda: at.sidebar.selectbox(key="target").set_value("tpu-v5p").run())
timed("same_target_again_s", lambda: at.sidebar.selectbox(key="target").set_value("as loaded").run())
timed("open_ops_tab_s", lambda: show("Ops"))
ops_rows = sum(len(d.value) for d in at.dataframe if "gap_us" in d.value.columns)
bounds = at.multiselect(key="filter_bound").options
timed("filter_s", lambda: at.multiselect(key="filter_bound").set_value(bounds[:1]).run())
timed("open_timeline_tab_s", lambda: show("Timeline"))
steps = at.selectbox(key="timeline_step").options
timed("timeline_whole_trace_s", lambda: at.selectbox(key="timeline_step").set_value(None).run())
timed("open_op_detail_tab_s", lambda: show("Op detail"))
ops = at.selectbox(key="tv_op_pick").options
timed("select_op_s", lambda: at.selectbox(key="tv_op_pick").set_value(ops[min(3, len(ops) - 1)]).run())
print({**times, "peak_rss_mb": peak_mb(), "ops_in_table": ops_rows, "steps": len(steps) - 1})
"""


def _builder():
    spec = importlib.util.spec_from_file_location("bench_load", HERE / "bench_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reruns(kind: str, events: int, target: str) -> dict:
    bench_load = _builder()
    source = bench_load.SOURCES[kind]
    if not source.exists():
        sys.exit(f"{source}: not found (the real traces live in ../shared/traces)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.xplane.pb"
        t = time.perf_counter()
        n = bench_load.build_trace(source, events, path)
        result = {"kind": kind, "device_events": n, "file_mb": round(path.stat().st_size / 2**20, 1),
                  "build_s": round(time.perf_counter() - t, 1)}
        res = subprocess.run([sys.executable, "-c", _RERUNS, str(path), target], capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(res.stderr[-3000:])
        measured = ast.literal_eval(res.stdout.strip().splitlines()[-1])
        result["dashboard"] = {k: round(v, 3) if isinstance(v, float) else v for k, v in measured.items()}
        return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    fp = sub.add_parser("first-page", help="time to the first page in headless Chromium")
    fp.add_argument("traces", nargs="+", type=Path)
    fp.add_argument("--repeat", type=int, default=3)
    fp.add_argument("--ready", choices=("line", "health"), default="line",
                    help="when the server counts as started: its 'first page ready' line (default) or its "
                         "health endpoint answering")
    fp.add_argument("--warm-cache", action="store_true", help="fill the table cache first (a trace seen before)")
    fp.add_argument("--charts", type=int, default=2, help="charts the Overview draws for these traces")
    fp.add_argument("--shots", type=Path, help="save a screenshot of each first page here")
    fp.add_argument("--port", type=int, help="serve every repeat on this port (a browser that opened the "
                                             "dashboard before: its cache holds Streamlit's scripts)")
    fp.add_argument("--browser-cache", choices=("cold", "warm"), default="cold",
                    help="cold: a new port each repeat, nothing cached (default); warm: one port and one "
                         "untimed visit first, as a user's second visit")
    sc = sub.add_parser("script", help="server-side script run times (AppTest, fresh interpreter)")
    sc.add_argument("trace", type=Path)
    rr = sub.add_parser("reruns", help="rerun times on a big built trace (AppTest)")
    rr.add_argument("--kind", choices=("gpu", "tpu"), default="tpu")
    rr.add_argument("--events", type=int, default=2_000_000)
    rr.add_argument("--target", default="h100-sxm", help="chip for the target-change step")
    args = ap.parse_args()
    if args.what == "first-page":
        for trace in args.traces:
            print(json.dumps(first_page(trace.resolve(), args.repeat, args.ready, args.warm_cache, args.charts,
                                        args.shots, args.port, args.browser_cache), indent=2), flush=True)
    elif args.what == "script":
        print(json.dumps(script(args.trace.resolve()), indent=2))
    else:
        print(json.dumps(reruns(args.kind, args.events, args.target), indent=2))


if __name__ == "__main__":
    main()
