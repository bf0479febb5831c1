"""How responsive the dashboard stays on a big trace (not part of the tests).

Builds a trace of about N device events with benchmarks/bench_load.py's
builder (a real trace's device timeline, repeated), then in a fresh
interpreter drives the app with Streamlit's AppTest and times each rerun:

* first load (parse + analysis + every tab drawn),
* a target change (apply_target on the cached analysis),
* an op-table filter, a timeline window change, an op selection (cached reruns).

    python benchmarks/bench_dashboard.py [--kind gpu|tpu] [--events 2000000]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

_DRIVER = """
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

timed("first_load_s", at.run)
ops_rows = sum(len(d.value) for d in at.dataframe if "gap_us" in d.value.columns)
target = sys.argv[2]
timed("target_change_s", lambda: at.sidebar.selectbox(key="target").set_value(target).run())
timed("second_target_change_s", lambda: at.sidebar.selectbox(key="target").set_value("tpu-v5p").run())
timed("same_target_again_s", lambda: at.sidebar.selectbox(key="target").set_value("as loaded").run())
bounds = at.multiselect(key="filter_bound").options
timed("filter_s", lambda: at.multiselect(key="filter_bound").set_value(bounds[:1]).run())
steps = at.selectbox(key="timeline_step").options
timed("timeline_whole_trace_s", lambda: at.selectbox(key="timeline_step").set_value(None).run())
ops = at.selectbox(key="tv_op_pick").options
timed("select_op_s", lambda: at.selectbox(key="tv_op_pick").set_value(ops[min(3, len(ops) - 1)]).run())
print({**times, "peak_rss_mb": peak_mb(), "ops_in_table": ops_rows, "steps": len(steps) - 1})
"""


def _builder():
    spec = importlib.util.spec_from_file_location("bench_load", HERE / "bench_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("gpu", "tpu"), default="tpu")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--target", default="h100-sxm", help="chip for the target-change step")
    args = ap.parse_args()
    bench_load = _builder()
    source = bench_load.SOURCES[args.kind]
    if not source.exists():
        sys.exit(f"{source}: not found (the real traces live in ../shared/traces)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.xplane.pb"
        t = time.perf_counter()
        n = bench_load.build_trace(source, args.events, path)
        result = {"kind": args.kind, "device_events": n, "file_mb": round(path.stat().st_size / 2**20, 1),
                  "build_s": round(time.perf_counter() - t, 1)}
        res = subprocess.run([sys.executable, "-c", _DRIVER, str(path), args.target], capture_output=True,
                             text=True)
        if res.returncode != 0:
            sys.exit(res.stderr[-3000:])
        measured = ast.literal_eval(res.stdout.strip().splitlines()[-1])
        result["dashboard"] = {k: round(v, 3) if isinstance(v, float) else v for k, v in measured.items()}
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
