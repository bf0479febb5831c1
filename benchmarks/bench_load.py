"""Load time and peak memory of traceview's trace reader on a large trace (not part of the tests).

Builds a trace of about N device events by repeating the device timeline of a
real one (GPU: the MI355X Transformer Engine trace, whose kernels carry
hlo_op / hlo_module / program_id stats; TPU: the v6e trace, whose XLA Ops
events carry device-clock stats), then in fresh subprocesses measures:

* traceview: ``traceview.trace.read.load_profile`` wall time and peak RSS, and the
  whole analysis (load, HLO costs, roofline, JSON report);
* optionally XProf: ``hlo_stats`` on the same file (wall time, peak RSS).

    python benchmarks/bench_load.py [--kind gpu|tpu] [--events 2000000] [--xprof]
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
SOURCES = {
    "gpu": SHARED / "AMD-AGI-TraceLens" / "te_fused_attn" / "934987a2fc2f.xplane.pb",
    "tpu": SHARED / "openxla-xprof" / "tpu_inference_2.xplane.pb",
}


def build_trace(source: Path, target_events: int, out: Path) -> int:
    """Repeat every device plane's op lines until the file holds about target_events device events."""
    from traceview.parsers.xspace.schema import XSpace

    space = XSpace()
    space.ParseFromString(source.read_bytes())
    lines = [(p, line) for p in space.planes if p.name.startswith("/device:")
             for line in p.lines if line.name.startswith("Stream #") or line.name in ("XLA Ops", "XLA Modules")]
    base = sum(len(line.events) for _, line in lines)
    repeats = max(1, round(target_events / base))
    for _, line in lines:
        events = list(line.events)
        if not events:
            continue
        span = max(e.offset_ps + e.duration_ps for e in events) - min(e.offset_ps for e in events)
        span += 1_000_000  # 1 us gap between repeats
        for r in range(1, repeats):
            shift = r * span
            for e in events:
                new = line.events.add()
                new.CopyFrom(e)
                new.offset_ps = e.offset_ps + shift
    out.write_bytes(space.SerializeToString())
    return base * repeats


# Peak memory: VmHWM of the measuring process (ru_maxrss would carry over the
# parent's peak across fork/exec on Linux).
_PEAK = """
def peak_mb():
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""

_TRACEVIEW = _PEAK + """
import sys, time
base = peak_mb()
t = time.perf_counter()
from traceview.trace.read import load_profile
p = load_profile(sys.argv[1])
dt = time.perf_counter() - t
print({"seconds": dt, "peak_rss_mb": peak_mb(), "rss_before_mb": base,
       "op_rows": len(p.op_executions()), "host_rows": len(p.all_host_events()), "steps": len(p.steps)})
"""

# The whole `traceview analyze` path: load, HLO costs, join, roofline, summary.
_ANALYZE = _PEAK + """
import sys, time
t = time.perf_counter()
from traceview.trace.read import load_profile
from traceview.analysis.build import build_analysis
from traceview.render.record import analysis_json
p = load_profile(sys.argv[1])
loaded = time.perf_counter() - t
a = build_analysis(p)
doc = analysis_json(a)
dt = time.perf_counter() - t
print({"seconds": dt, "load_seconds": loaded, "peak_rss_mb": peak_mb(), "ops": len(doc["ops"]),
       "target": a.target.name if a.target else None})
"""

_XPROF = _PEAK + """
import sys, time
from xprof.convert import raw_to_tool_data
base = peak_mb()
t = time.perf_counter()
data, _ = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "hlo_stats", {"use_saved_result": False})
dt = time.perf_counter() - t
print({"seconds": dt, "peak_rss_mb": peak_mb(), "rss_before_mb": base, "bytes": len(data or b"")})
"""


def measure(code: str, path: Path) -> dict:
    """Run `code` on `path` in a fresh interpreter; it prints one dict literal last."""
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    return ast.literal_eval(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=sorted(SOURCES), default="gpu")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--xprof", action="store_true", help="also time XProf's hlo_stats on the same file")
    args = ap.parse_args()
    source = SOURCES[args.kind]
    if not source.exists():
        sys.exit(f"{source}: not found (the real traces live in ../shared/traces)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.xplane.pb"
        t = time.perf_counter()
        n = build_trace(source, args.events, path)
        # XProf writes a cache file beside its input; the temp dir holds it.
        result = {"kind": args.kind, "device_events": n, "file_mb": path.stat().st_size / 2**20,
                  "build_seconds": time.perf_counter() - t}
        result["traceview_load"] = measure(_TRACEVIEW, path)
        result["traceview_analyze"] = measure(_ANALYZE, path)
        if args.xprof:
            result["xprof_hlo_stats"] = measure(_XPROF, path)
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
