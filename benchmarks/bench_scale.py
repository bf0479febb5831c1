"""traceview against XProf and xprof-rs, cold and warm, one host and 32 (not part of the tests).

Builds, in a temporary folder:

* the 2 M-event GPU trace (MI355X Transformer Engine timeline, repeated) and
  the 2 M-event TPU trace (v6e timeline, repeated), as bench_load.py does;
* a 32-host run: one GPU trace of about --host-events events, hard-linked
  under 32 host names.

Then runs every tool as a user would, in fresh processes, one after another,
and prints wall time, peak memory (largest process, from wait4) and ratios:

* traceview cold: ``traceview analyze PATH --format json`` with an empty table
  cache (numba's own on-disk cache warmed beforehand, as after a first use);
  also with TRACEVIEW_NO_NUMBA=1 (the pure path);
* traceview warm: the same command again (its stored output, from the result
  cache); with TRACEVIEW_NO_RESULT_CACHE=1 (tables from the table cache, the
  analysis redone); and the tables alone (``load_profile``);
* XProf: ``xprof get_hlo_stats RUN --logdir DIR --bypass_cache=True``;
* xprof-rs: ``xprof-rs get_hlo_stats RUN --logdir DIR`` (where it reads the file);
* ``traceview --version``;
* the 32-host run with ``--jobs 1`` and with all cores.

Each timed command runs --repeat times (default 3; the cold ones with the cache
emptied before each) and the median is shown with the range: on a shared
2-core machine one run can be off by a second. The 32-host pairs alternate
(--jobs 1, then all cores) so a busy moment hits both alike.

traceview's own modules are byte-compiled first (``compileall``), as an
installed package is: an environment with PYTHONDONTWRITEBYTECODE=1 (this
sandbox's) would otherwise compile them from source in every run, about
0.5-1 s that no user pays, while XProf's modules were compiled by pip.

The JSON outputs of cold, warm, pure-path, one-process and all-cores runs are
compared byte for byte and the result printed.

    pip install -e '.[bench]'     # XProf, xprof-rs and numba
    python benchmarks/bench_scale.py [--events 2000000] [--host-events 150000] [--repeat 3] [--skip-xprof]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_load import SOURCES, build_trace  # noqa: E402

BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    for folder in (BIN, Path(sys.prefix) / "bin", Path("/work/main/.venv/bin")):
        if (folder / name).exists():
            return str(folder / name)
    found = shutil.which(name)
    if not found:
        raise SystemExit(f"{name}: not found (the references: pip install -e '.[bench]')")
    return found


def run(cmd: list[str], env: dict | None = None, out: Path | None = None) -> dict:
    """Wall time, peak RSS (MB, largest process) and exit status of one command."""
    t = time.perf_counter()
    stdout = open(out, "wb") if out else subprocess.DEVNULL
    try:
        # /usr/bin/time reports its child's own peak (this process's ru_maxrss would carry over to a
        # child it forks: the traces built here would set a floor under every figure).
        proc = subprocess.Popen(["/usr/bin/time", "-f", "TVPEAK %M", *cmd], stdout=stdout, stderr=subprocess.PIPE,
                                env={**os.environ, **(env or {})})
        err = proc.stderr.read() if proc.stderr else b""
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        if not isinstance(stdout, int):
            stdout.close()
    wall = time.perf_counter() - t
    code = os.waitstatus_to_exitcode(status)
    if code:
        print(f"{' '.join(cmd[:3])}...: exit {code}: {err.decode(errors='replace')[-400:]}", file=sys.stderr)
    peaks = [int(line.split()[1]) for line in err.decode(errors="replace").splitlines() if line.startswith("TVPEAK ")]
    # CPU of the command and every process it waited for (pool workers included): the work done,
    # which on a shared virtual machine varies less than the wall time.
    return {"seconds": wall, "peak_mb": (peaks[-1] if peaks else float("nan")) / 1024, "rc": code,
            "cpu": usage.ru_utime + usage.ru_stime, "sys": usage.ru_stime,
            "error": err.decode(errors="replace").strip().splitlines()[-1:] if code else []}


def repeated(times: int, measure, before=None) -> dict:
    """``measure()`` run ``times`` times (``before()`` ahead of each): the median run, with every time."""
    runs = []
    for _ in range(max(1, times)):
        if before is not None:
            before()
        runs.append(measure())
    return median_run(runs)


def median_run(runs: list[dict]) -> dict:
    """The run of median time among those that succeeded, with every run's time."""
    ok = [r for r in runs if r["rc"] == 0] or runs
    best = sorted(ok, key=lambda r: r["seconds"])[(len(ok) - 1) // 2]
    return {**best, "all_seconds": [r["seconds"] for r in runs]}


def byte_compile() -> None:
    """Write traceview's .pyc files, as installing a package does (see the module docstring)."""
    import compileall
    import importlib.util

    for package in ("traceview", "traceview.parsers", "traceview.dashboards"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            for folder in spec.submodule_search_locations:
                compileall.compile_dir(folder, quiet=1)


def _identical(files: list[Path]) -> bool:
    return all(f.exists() for f in files) and len({f.read_bytes() for f in files}) == 1


def logdir(root: Path, name: str) -> Path:
    run_dir = root / name / "plugins" / "profile" / "run1"
    run_dir.mkdir(parents=True)
    return run_dir


def fmt(r: dict | None) -> str:
    if r is None:
        return "n/a"
    if r["rc"] != 0:
        return "cannot read it" if r.get("cannot") else f"failed (rc {r['rc']}: {' '.join(r['error'])[:60]})"
    spread = r.get("all_seconds") or []
    extra = f" ({min(spread):.2f}-{max(spread):.2f})" if len(spread) > 1 else ""
    return f"{r['seconds']:.2f} s{extra}, {r['peak_mb'] / 1024:.2f} GB"


def ratio(a: dict | None, b: dict | None, key: str) -> str:
    if not a or not b or a["rc"] or b["rc"]:
        return "n/a"
    return f"{a[key] / b[key]:.2f}x"


def bench_trace(kind: str, root: Path, events: int, skip_xprof: bool, cache_root: Path, repeat: int) -> dict:
    run_dir = logdir(root, kind)
    trace = run_dir / "host0.xplane.pb"
    n = build_trace(SOURCES[kind], events, trace)
    print(f"[{kind}] {n} device events, {trace.stat().st_size / 2**20:.0f} MB", file=sys.stderr, flush=True)
    tv = tool("traceview")
    outs = root / f"{kind}-out"
    outs.mkdir()
    cache = cache_root / kind
    env = {"TRACEVIEW_CACHE_DIR": str(cache)}
    analyze = [tv, "analyze", str(run_dir), "--format", "json", "-o"]
    # numba's compiled kernels come from its on-disk cache after the first use on a machine: warm it.
    run([*analyze, str(outs / "warmup.json"), "--no-cache"], env)
    res: dict = {"kind": kind, "events": n, "mb": trace.stat().st_size / 2**20}
    res["cold"] = repeated(repeat, lambda: run([*analyze, str(outs / "cold.json")], env),
                           before=lambda: shutil.rmtree(cache, ignore_errors=True))
    res["warm"] = run([*analyze, str(outs / "warm.json")], env)
    res["warm_redo"] = run([*analyze, str(outs / "warm_redo.json")], {**env, "TRACEVIEW_NO_RESULT_CACHE": "1"})
    res["warm_tables"] = run([sys.executable, "-c", "import sys; from traceview.trace.read import load_profile; "
                              "load_profile(sys.argv[1])", str(run_dir)], env)
    res["pure"] = run([*analyze, str(outs / "pure.json"), "--no-cache"], {**env, "TRACEVIEW_NO_NUMBA": "1"})
    names = ["cold", "warm", "warm_redo", "pure"]
    res["identical"] = _identical([outs / f"{n}.json" for n in names])
    if not skip_xprof:
        res["xprof"] = repeated(repeat, lambda: run([tool("xprof"), "get_hlo_stats", "run1", f"--logdir={root / kind}",
                                                      "--bypass_cache=True"], out=outs / "xprof.json"))
        rs = repeated(repeat, lambda: run([tool("xprof-rs"), "get_hlo_stats", "run1", f"--logdir={root / kind}"],
                                          out=outs / "xprof-rs.json"))
        if rs["rc"] == 0 and (outs / "xprof-rs.json").stat().st_size < 10:
            rs["rc"], rs["cannot"] = 1, True
        elif rs["rc"] != 0:
            rs["cannot"] = True
        res["xprof_rs"] = rs
    return res


def bench_hosts(root: Path, host_events: int, hosts: int, cache_root: Path, repeat: int) -> dict:
    run_dir = logdir(root, "pod")
    first = run_dir / "host00.xplane.pb"
    n = build_trace(SOURCES["gpu"], host_events, first)
    for k in range(1, hosts):
        os.link(first, run_dir / f"host{k:02d}.xplane.pb")
    print(f"[pod] {hosts} hosts x {n} device events", file=sys.stderr, flush=True)
    tv = tool("traceview")
    outs = root / "pod-out"
    outs.mkdir()
    env = {"TRACEVIEW_CACHE_DIR": str(cache_root / "pod")}
    cores = len(os.sched_getaffinity(0))
    base = [tv, "analyze", str(run_dir), "--format", "json", "--no-cache", "-o"]
    res = {"hosts": hosts, "events_per_host": n, "cores": cores}
    pairs = [(run([*base, str(outs / "j1.json"), "--jobs", "1"], env),
              run([*base, str(outs / "jN.json"), "--jobs", str(cores)], env)) for _ in range(max(1, repeat))]
    res["jobs1"], res["jobsN"] = median_run([p[0] for p in pairs]), median_run([p[1] for p in pairs])
    res["pair_ratios"] = [a["seconds"] / b["seconds"] for a, b in pairs if not a["rc"] and not b["rc"]]
    res["identical"] = _identical([outs / "j1.json", outs / "jN.json"])
    # The reading alone as analyze reads (each host reduced where it is read), without the analysis.
    load = ("import sys; from traceview.trace.read import ReadOptions, load_profile; "
            "load_profile(sys.argv[1], options=ReadOptions(cache=False, jobs=int(sys.argv[2]), keep_ops=False))")
    res["load1"] = run([sys.executable, "-c", load, str(run_dir), "1"], env)
    res["loadN"] = run([sys.executable, "-c", load, str(run_dir), str(cores)], env)
    return res


def cpu_jiffies() -> tuple[int, int] | None:
    """(steal, total) jiffies of all CPUs since boot, from /proc/stat (None elsewhere): time the hypervisor
    gave this machine's virtual CPUs to others."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> str:
    if before is None or after is None or after[1] <= before[1]:
        return "n/a"
    return f"{100 * (after[0] - before[0]) / (after[1] - before[1]):.1f}%"


def version_time() -> dict:
    tv = tool("traceview")
    times = [run([tv, "--version"])["seconds"] for _ in range(7)]
    return {"median": statistics.median(times), "min": min(times)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--host-events", type=int, default=150_000)
    ap.add_argument("--hosts", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3, help="runs per timed command (the median is shown)")
    ap.add_argument("--skip-xprof", action="store_true")
    ap.add_argument("--kinds", default="gpu,tpu")
    args = ap.parse_args()
    load = os.getloadavg()
    steal_before = cpu_jiffies()
    byte_compile()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="tv-bench-") as tmp:
        root = Path(tmp)
        cache_root = root / "cache"
        results = [bench_trace(k, root, args.events, args.skip_xprof, cache_root, args.repeat) for k in args.kinds.split(",") if k]
        pod = bench_hosts(root, args.host_events, args.hosts, cache_root, args.repeat)
    version = version_time()
    print(f"\n## traceview benchmark, {started}; load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {len(os.sched_getaffinity(0))} cores; "
          f"CPU time stolen by the hypervisor during the run: {steal_share(steal_before, cpu_jiffies())}\n")
    print("| trace | traceview cold | traceview warm | warm, analysis redone | warm, tables only | pure path (no numba) | XProf | xprof-rs "
          "| cold / XProf (time, memory) | cold / xprof-rs (time) | outputs identical |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['kind'].upper()} {r['events'] / 1e6:.1f} M events ({r['mb']:.0f} MB) | {fmt(r['cold'])} | "
              f"{fmt(r['warm'])} | {fmt(r['warm_redo'])} | {fmt(r['warm_tables'])} | {fmt(r['pure'])} | {fmt(r.get('xprof'))} | "
              f"{fmt(r.get('xprof_rs'))} | {ratio(r['cold'], r.get('xprof'), 'seconds')}, "
              f"{ratio(r['cold'], r.get('xprof'), 'peak_mb')} | {ratio(r['cold'], r.get('xprof_rs'), 'seconds')} | "
              f"{'yes' if r['identical'] else 'NO'} |")
    print(f"\n`traceview --version`: median {version['median']:.3f} s, best {version['min']:.3f} s (7 runs)\n")
    print(f"{pod['hosts']} hosts x {pod['events_per_host']} device events: --jobs 1 {fmt(pod['jobs1'])}; "
          f"--jobs {pod['cores']} {fmt(pod['jobsN'])}; speed-up {ratio(pod['jobs1'], pod['jobsN'], 'seconds')}; "
          f"outputs identical: {'yes' if pod['identical'] else 'NO'}; speed-up of each pair: "
          f"{', '.join(f'{r:.2f}x' for r in pod['pair_ratios'])}")
    print(f"CPU (user + system, workers included) of the median runs: --jobs 1 {pod['jobs1']['cpu']:.2f} s "
          f"(system {pod['jobs1']['sys']:.2f} s); --jobs {pod['cores']} {pod['jobsN']['cpu']:.2f} s "
          f"(system {pod['jobsN']['sys']:.2f} s)")
    print(f"reading only (load_profile): 1 process {fmt(pod['load1'])}; {pod['cores']} processes "
          f"{fmt(pod['loadN'])}; speed-up {ratio(pod['load1'], pod['loadN'], 'seconds')}")
    print(f"\n(times: median of {args.repeat} runs, range in brackets; peak memory: peak RSS of the command's own process, by /usr/bin/time; --jobs N workers not included)")


if __name__ == "__main__":
    main()
