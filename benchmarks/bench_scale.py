"""traceview against XProf and xprof-rs, cold and warm, one host and pods of many (not part of the tests).

Builds, in a temporary folder:

* the 2 M-event GPU trace (MI355X Transformer Engine timeline, repeated) and
  the 2 M-event TPU trace (v6e timeline, repeated), as bench_load.py does;
* pods of --pod-sizes hosts (default 32 and 128): one trace of about
  --host-events events (--pod-kind's timeline, TPU v6e by default), hard-linked
  under each host's name.

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
* each pod with ``--jobs 1``, with all cores, and with ``--dask`` on a local
  Dask cluster (a scheduler and one single-threaded worker process per core,
  started in a process of its own before the timing): time, time per host
  (linear growth), peak memory against the smallest pod's, speed-ups (the Dask workers warmed by one
  untimed run first, as a cluster that read a profile before is). The
  cluster's processes are stopped (SIGSTOP) while the other ways are timed:
  idle, it took 1.2-1.4 s of CPU per 15 s (heartbeats, each worker's
  profiler and memory monitor), which on 2 cores slowed the all-cores run
  alone (128 hosts: 11.75 against 11.30 s) and no user's pool shares;
* the serial share of each pod run: the parent's CPU after the last host's result arrived, less the items of
  the forked passes it ran itself (``TRACEVIEW_CPU_LEDGER``, traceview.runtime.cpu_ledger), against the
  one-process run's CPU; with it the parent's CPU before (imports, the hosts' arrivals), what 16 and 64
  workers would give by Amdahl's law, and the Dask client's share of the Dask run's CPU; the Dask client's
  peak memory (``/usr/bin/time``) against the smallest pod's, and each worker's (psutil, sampled every 0.2 s);
* this machine's own ceiling for each pod: two copies of the ``--jobs 1`` run
  started at once, twice the one-process time over theirs (shared caches,
  memory bandwidth and the hypervisor cost two processes that share nothing
  at all this much), and the share of it ``--jobs N`` and Dask reach, with
  the CPU of the Dask run's client, workers and scheduler.

Each timed command runs --repeat times (default 3; the cold ones with the cache
emptied before each) and the median is shown with the range: on a shared
2-core machine one run can be off by a second. The pod runs alternate
(--jobs 1, all cores, Dask) so a busy moment hits them alike.

traceview's own modules are byte-compiled first (``compileall``), as an
installed package is: an environment with PYTHONDONTWRITEBYTECODE=1 (this
sandbox's) would otherwise compile them from source in every run, about
0.5-1 s that no user pays, while XProf's modules were compiled by pip.

The JSON outputs of cold, warm, pure-path, one-process and all-cores runs are
compared byte for byte and the result printed.

    pip install -e '.[bench]'     # XProf, xprof-rs and numba
    python benchmarks/bench_scale.py [--events 2000000] [--host-events 150000] [--pod-sizes 32,128,256]
                                     [--repeat 3] [--skip-xprof] [--kinds gpu,tpu] [--no-dask]
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


def run_together(cmds: list[list[str]]) -> dict:
    """Wall time until every command, all started at once, has ended; exit status of the worst. Two copies of
    the one-process run measure the machine's own ceiling for two processes (shared caches and memory
    bandwidth, the hypervisor): the speed-up no split of one run over two processes can beat here."""
    t = time.perf_counter()
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for cmd in cmds]
    codes = [p.wait() for p in procs]
    return {"seconds": time.perf_counter() - t, "rc": max(codes, key=abs), "peak_mb": float("nan"),
            "cpu": float("nan"), "sys": float("nan"), "error": []}


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


def build_pod(root: Path, kind: str, host_events: int, hosts: int) -> tuple[Path, int]:
    """A run of ``hosts`` host files: one trace of about ``host_events`` device events (the ``kind`` timeline
    repeated), hard-linked under each host's name (the reader names a host, and its devices, by its file)."""
    run_dir = logdir(root, f"pod{hosts}")
    first = run_dir / "host000.xplane.pb"
    n = build_trace(SOURCES[kind], host_events, first)
    for k in range(1, hosts):
        os.link(first, run_dir / f"host{k:03d}.xplane.pb")
    return run_dir, n


class DaskCluster:
    """A local Dask cluster in a process of its own: a real scheduler and ``workers`` worker processes of
    one thread each (as docs/scale.md advises), started before any timing, as an existing cluster is."""

    def __init__(self, workers: int) -> None:
        code = ("import sys, time\nfrom distributed import LocalCluster\n"
                f"c = LocalCluster(n_workers={workers}, threads_per_worker=1, processes=True, "
                "dashboard_address=None)\nprint(c.scheduler_address, flush=True)\nsys.stdin.read()\nc.close()\n")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.address = (self.proc.stdout.readline() if self.proc.stdout else "").strip()
        if not self.address:
            raise SystemExit("the local Dask cluster did not start (pip install 'traceview[dask]')")

    def processes(self) -> list:
        """The cluster's processes: its scheduler's and its workers' (psutil comes with distributed)."""
        import psutil

        try:
            top = psutil.Process(self.proc.pid)
            return [top, *top.children(recursive=True)]
        except psutil.Error:
            return []

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of the scheduler's process (the cluster's own) and of its workers, summed."""
        out = {"scheduler": 0.0, "workers": 0.0}
        for k, p in enumerate(self.processes()):
            try:
                times = p.cpu_times()
            except Exception:  # noqa: BLE001 - a process that ended meanwhile
                continue
            out["scheduler" if k == 0 else "workers"] += times.user + times.system
        return out

    def workers_rss_while(self, measure):
        """``measure()``, and the largest RSS (MB) each worker process reached meanwhile (sampled every 0.2 s:
        a worker holds its hosts' parts until the run ends, so its peak is not a moment between samples)."""
        import threading

        import psutil

        peaks: dict[int, int] = {}
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                for p in self.processes()[1:]:
                    try:
                        if "resource_tracker" in " ".join(p.cmdline()):     # multiprocessing's, not a worker
                            continue
                        peaks[p.pid] = max(peaks.get(p.pid, 0), p.memory_info().rss)
                    except psutil.Error:
                        pass
                done.wait(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            result = measure()
        finally:
            done.set()
            sampler.join()
        return result, sorted(round(v / 2**20) for v in peaks.values())

    def pause(self) -> None:
        """Stop the idle cluster while other ways are timed (SIGSTOP): on two cores its heartbeats, workers'
        profilers and memory monitors took the share of a core that a run of all cores needs."""
        for p in self.processes():
            p.suspend()

    def resume(self) -> None:
        for p in self.processes():
            p.resume()
        time.sleep(1.0)     # heartbeats and timers due while it was stopped run now, not in the timed run

    def close(self) -> None:
        self.resume()
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def bench_pods(root: Path, kind: str, host_events: int, sizes: list[int], repeat: int, dask: bool) -> list[dict]:
    """Each pod size with one process, all cores, and (``dask``) a local Dask cluster of as many workers;
    the three alternate, ``repeat`` rounds, medians."""
    tv = tool("traceview")
    cores = len(os.sched_getaffinity(0))
    cluster = DaskCluster(cores) if dask else None
    out = []
    try:
        for hosts in sizes:
            run_dir, n = build_pod(root, kind, host_events, hosts)
            print(f"[pod] {hosts} hosts x {n} device events ({kind})", file=sys.stderr, flush=True)
            outs = root / f"pod{hosts}-out"
            outs.mkdir()
            base = [tv, "analyze", str(run_dir), "--format", "json", "--no-cache", "-o"]
            ways: dict[str, list] = {"jobs1": [*base, str(outs / "jobs1.json"), "--jobs", "1"],
                    "jobsN": [*base, str(outs / "jobsN.json"), "--jobs", str(cores)]}
            if cluster is not None:
                ways["dask"] = [*base, str(outs / "dask.json"), "--dask", cluster.address]
            # two copies of the one-process run at once (not compared: they write their own files)
            ways["two_copies"] = [[*base, str(outs / f"copy{k}.json"), "--jobs", "1"] for k in range(2)]
            if cluster is not None and hosts == sizes[0]:
                # untimed: the workers import traceview, pandas and the compiled reader once, as the workers
                # of a cluster that has read a profile before already have
                run([*base, str(outs / "warm.json"), "--dask", cluster.address])
            rounds = [{way: timed_way(way, cmd, cluster) for way, cmd in ways.items()} for _ in range(max(1, repeat))]
            res: dict = {"hosts": hosts, "events_per_host": n, "cores": cores}
            for way in ways:
                res[way] = median_run([r[way] for r in rounds])
            res["pair_ratios"] = _round_ratios(rounds, "jobsN")
            res["ceilings"] = [2 * x for x in _round_ratios(rounds, "two_copies")]
            if cluster is not None:
                res["dask_ratios"] = _round_ratios(rounds, "dask")
            res["identical"] = _identical([outs / f"{way}.json" for way in ways if way != "two_copies"])
            out.append(res)
            shutil.rmtree(run_dir.parents[2])     # the hard links share one file: little disk, but free it
    finally:
        if cluster is not None:
            cluster.close()
    return out


def _round_ratios(rounds: list[dict], way: str) -> list[float]:
    """Per round, the one-process time over ``way``'s (rounds where either failed left out)."""
    return [r["jobs1"]["seconds"] / r[way]["seconds"] for r in rounds if not r["jobs1"]["rc"] and not r[way]["rc"]]


def timed_way(way: str, cmd: list, cluster: DaskCluster | None) -> dict:
    """One pod run; a Dask cluster runs only while its own way is timed (DaskCluster.pause), and then the CPU
    its scheduler and workers spent is counted too. Each run but the two copies writes its CPU ledger
    (traceview.runtime.cpu_ledger: the parent's CPU after the last host's result, and how much of it was
    serial), kept as ``ledger``."""
    if cluster is not None and way == "dask":
        cluster.resume()
        before = cluster.cpu()
        result, result["workers_peak_mb"] = cluster.workers_rss_while(lambda: ledgered(cmd))
        result["cluster_cpu"] = {k: cluster.cpu().get(k, 0.0) - v for k, v in before.items()}
        return result
    if cluster is not None:
        cluster.pause()
    return run_together(cmd) if way == "two_copies" else ledgered(cmd)


def ledgered(cmd: list) -> dict:
    """:func:`run` with the command's CPU ledger read back (None where it wrote none)."""
    import json

    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = Path(f.name)
    try:
        result = run(cmd, env={"TRACEVIEW_CPU_LEDGER": str(path)})
        try:
            result["ledger"] = json.loads(path.read_text()) if path.stat().st_size else None
        except (OSError, ValueError):
            result["ledger"] = None
    finally:
        path.unlink(missing_ok=True)
    return result


def amdahl(serial: float, workers: int) -> float:
    """The speed-up ``workers`` processes give a run whose ``serial`` share no second process can take."""
    return 1.0 / (serial + (1.0 - serial) / workers)


def serial_lines(p: dict) -> list[str]:
    """The serial share of each way's median run against the one-process CPU, the Dask client's share of
    that run's CPU, and what 16 and 64 workers would give by Amdahl's law."""
    one = p["jobs1"]
    if one["rc"] or not one["cpu"]:
        return []
    out = []
    for way in ("jobs1", "jobsN", "dask"):
        r = p.get(way)
        ledger = (r or {}).get("ledger")
        if not r or r["rc"] or not ledger:
            continue
        after = ledger["serial_cpu"] / one["cpu"]
        whole = (ledger["read_cpu"] + ledger["serial_cpu"]) / one["cpu"]
        line = (f"  serial, {way}: the parent's CPU after the last host {ledger['after_cpu']:.2f} s, of which "
                f"forked items {ledger['items_cpu']:.2f} s, serial {ledger['serial_cpu']:.2f} s = "
                f"{100 * after:.2f}% of the one-process CPU ({one['cpu']:.1f} s); Amdahl 16 / 64 workers: "
                f"{amdahl(after, 16):.1f}x / {amdahl(after, 64):.1f}x")
        if way != "jobs1":        # one process reads the hosts itself: its CPU before is the reading
            line += (f"; with the parent's CPU before the last host ({ledger['read_cpu']:.2f} s: imports, the "
                     f"hosts' arrivals) {100 * whole:.2f}%, {amdahl(whole, 16):.1f}x / {amdahl(whole, 64):.1f}x")
        if way == "dask" and r.get("cluster_cpu"):
            total = r["cpu"] + sum(r["cluster_cpu"].values())
            line += f"; the client's share of the run's CPU: {100 * r['cpu'] / total:.1f}% of {total:.1f} s"
        out.append(line)
    return out


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


def print_pods(pods: list[dict]) -> None:
    if not pods:
        return
    cores = pods[0]["cores"]
    dask = "dask" in pods[0]
    print(f"| hosts x events | --jobs 1 | --jobs {cores} | speed-up |" + (f" Dask ({cores} workers) | speed-up |" if dask else "")
          + " s per host (--jobs 1) | peak / peak of the smallest pod (--jobs 1) | outputs identical |")
    print("|---|---|---|---|" + ("---|---|" if dask else "") + "---|---|---|")
    small = pods[0]["jobs1"]
    for p in pods:
        row = (f"| {p['hosts']} x {p['events_per_host'] / 1e3:.0f} k | {fmt(p['jobs1'])} | {fmt(p['jobsN'])} | "
               f"{ratio(p['jobs1'], p['jobsN'], 'seconds')} |")
        if dask:
            row += f" {fmt(p['dask'])} | {ratio(p['jobs1'], p['dask'], 'seconds')} |"
        per_host = p["jobs1"]["seconds"] / p["hosts"] if not p["jobs1"]["rc"] else float("nan")
        row += (f" {per_host:.3f} s | {ratio(p['jobs1'], small, 'peak_mb')} | "
                f"{'yes' if p['identical'] else 'NO'} |")
        print(row)
    for p in pods:
        print(f"{p['hosts']} hosts: speed-up of each round (--jobs 1 / --jobs {cores}): "
              f"{', '.join(f'{r:.2f}x' for r in p['pair_ratios'])}; CPU of the median runs (workers included): "
              f"--jobs 1 {p['jobs1']['cpu']:.1f} s, --jobs {cores} {p['jobsN']['cpu']:.1f} s")
        ceiling = statistics.median(p["ceilings"]) if p["ceilings"] else float("nan")
        share = statistics.median(p["pair_ratios"]) / ceiling if p["pair_ratios"] else float("nan")
        copies = p["two_copies"]["all_seconds"]
        print(f"  this machine's ceiling (two copies of --jobs 1 at once: {p['two_copies']['seconds']:.2f} s "
              f"({min(copies):.2f}-{max(copies):.2f})): {ceiling:.2f}x "
              f"(rounds {', '.join(f'{c:.2f}x' for c in p['ceilings'])}); --jobs {cores} reaches {100 * share:.0f}% of it")
        for line in serial_lines(p):
            print(line)
        if "dask" in p and p["dask_ratios"]:
            cl = p["dask"].get("cluster_cpu") or {}
            print(f"  Dask: rounds {', '.join(f'{r:.2f}x' for r in p['dask_ratios'])} "
                  f"({100 * statistics.median(p['dask_ratios']) / ceiling:.0f}% of the ceiling); CPU of its median "
                  f"run: client {p['dask']['cpu']:.1f} s, workers {cl.get('workers', float('nan')):.1f} s, "
                  f"scheduler {cl.get('scheduler', float('nan')):.1f} s; peak RSS of the client "
                  f"{p['dask']['peak_mb']:.0f} MB ({ratio(p['dask'], pods[0]['dask'], 'peak_mb')} the smallest "
                  f"pod's), of each worker {', '.join(str(m) for m in p['dask'].get('workers_peak_mb', []))} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--host-events", type=int, default=150_000)
    ap.add_argument("--pod-sizes", default="32,128", help="host counts of the generated pods (e.g. 32,128,256)")
    ap.add_argument("--pod-kind", default="tpu", choices=sorted(SOURCES), help="the timeline each pod host repeats")
    ap.add_argument("--no-dask", action="store_true", help="skip the local Dask cluster")
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
        pods = bench_pods(root, args.pod_kind, args.host_events, [int(x) for x in args.pod_sizes.split(",") if x],
                          args.repeat, not args.no_dask)
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
    print_pods(pods)
    print(f"\n(times: median of {args.repeat} runs, range in brackets; peak memory: peak RSS of the command's own process, by /usr/bin/time; --jobs N workers not included)")


if __name__ == "__main__":
    main()
