"""Snapshot every output of the `traceview` CLI on every sample and shared trace, to prove a refactor changed
no byte: run it on a baseline tree and on the changed tree, then ``--compare`` the two snapshots.

Each command runs as ``PYTHON -m traceview ...`` in a subprocess (``--python`` picks the interpreter, so a
baseline checkout's own venv can write the baseline), with its working folder in a temporary directory (so
``-m`` never imports a ``traceview/`` folder from the current directory). For every call the snapshot keeps
``DIR/<mode>/<input>/<call>.<ext>`` (stdout), ``<call>.stderr``, ``<call>.rc`` (exit code) and ``<call>.args``
(the command line without the mode's read flags, so the modes' files are comparable).

Inputs: every folder of ``sample_traces/`` (the log dir, any ``*.json.gz`` trace beside its xplane, and its
``hlo/`` dump alone), every trace under the shared traces folder (log dirs with ``plugins/profile``, folders
holding ``*.xplane.pb``, Chrome/Perfetto ``*.json.gz`` traces, HLO dump folders, loose HLO files), and
multi-host pods the script builds from copies of those (``pod-*``, several host files in one run). The
``_global`` input holds the commands that take two inputs or a store: ``diff`` (trace pairs, HLO dumps, a JSON
baseline), ``check`` (against a baseline the tool writes itself with ``analyze --format json``, and against a
history store), ``history add`` into a fresh SQLite file then ``history report``, and ``hardware``.

Modes (``--modes``): ``one`` (``--jobs 1 --no-cache``), ``pool`` (``--jobs 2 --no-cache``), ``dask``
(``--no-cache --dask ADDRESS`` of a LocalCluster(n_workers=2, threads_per_worker=1, processes=True) the script
starts with the same interpreter), ``cache`` (three runs sharing one fresh ``TRACEVIEW_CACHE_DIR``:
``cache_cold`` fills the caches, ``cache_tables`` reads the parsed tables back with the result cache off
(``TRACEVIEW_NO_RESULT_CACHE=1``), ``cache_results`` is served by the result cache). After the run, every
mode's files are compared with ``one``'s: they must be equal.

Coverage: ``--coverage full`` runs every call on every input in mode ``one`` (about 1000 CLI calls, over an
hour on two busy cores); the default ``standard`` runs the main calls of each input's kind on every input
(STANDARD_CALLS) and every call on a few (RICH_INPUTS and ``_global``), about 450 calls. The other modes run
LIMITED_CALLS on LIMITED_INPUTS (the pods and two single-host traces) unless ``--full-modes``.

Normalizations, the only bytes rewritten before a file is written (everything else must be identical):

1. the run's temporary directory (the built pods, the history store, the check baseline, the working
   folder) becomes ``<TMP>``;
2. the samples folder becomes ``<SAMPLES>`` and the shared traces folder ``<SHARED>`` (where the inputs are);
3. the checkout the interpreter imports traceview from becomes ``<TREE>`` (paths in warnings and errors);
4. a local version suffix with a git hash (``0.1.0+g1a2b3c4``, ``.dev12+g...``) becomes ``+<HASH>``.

No wall-clock figure appears in any output (``history add``/``check --history`` get a fixed ``--time``), so
none is rewritten; two runs of one tree give identical snapshots.

    python scripts/snapshot_outputs.py --out /tmp/snap_base --python /tmp/basevenv/bin/python
    python scripts/snapshot_outputs.py --out /tmp/snap_new --compare /tmp/snap_base --only mlp,_global
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("one", "pool", "dask", "cache_cold", "cache_tables", "cache_results")
MODE_GROUPS = {"cache": ("cache_cold", "cache_tables", "cache_results")}
# the inputs and calls the modes other than `one` run, unless --full-modes
LIMITED_INPUTS = ("pod-", "sample-sharded", "shared-openxla-xprof", "_global")
LIMITED_CALLS = ("analyze.json", "memory.json", "scopes.json", "parallelism.json", "diff.mlp-mlp_slow.json",
                 "check.mlp_slow.json")
# --coverage standard: every input gets the calls of its kind below; the RICH inputs (and _global) get every
# call; --coverage full gives every input every call (about 1000 calls: over an hour on 2 busy cores)
STANDARD_CALLS = {
    "trace": ("analyze.txt", "analyze.json", "hlo.json", "memory.json", "parallelism.json", "scopes.json",
              "inference.json"),
    "hlo": ("hlo.txt", "hlo.json", "memory.json", "parallelism.json", "graph.json"),
    "sample-hlo": ("hlo.json", "memory.json"),
    "tracejson": ("analyze.json",),
}
RICH_INPUTS = ("sample-mlp", "sample-serving", "sample-pipeline_mpmd", "shared-h200-train", "shared-openxla-xprof",
               "pod-cpu")
EXT = {"table": "txt", "json": "json", "csv": "csv", "markdown": "md", "junit": "xml", "html": "html",
       "dot": "dot"}
META = "_meta"      # timings and logs: not compared
GLOBAL = "_global"


@dataclass(frozen=True)
class Input:
    """One thing the CLI reads: a trace (log dir, run dir, file), a JSON trace, an HLO dump or file, a pod."""
    name: str
    path: Path
    kind: str   # trace | tracejson | hlo


@dataclass
class Call:
    """One CLI call: ``key`` is the name of its stdout file (``<command>[.<variant>].<ext>``), ``read`` whether
    it takes the mode's read flags; ``setup`` calls run whenever their job runs (later calls need what they
    write)."""
    key: str
    argv: list[str]
    read: bool = True
    setup: bool = False
    after: object = None        # called with the output folder after the call (writes a derived file)


@dataclass
class Job:
    """The calls on one input in one mode, run in order (a call may need an earlier one's output)."""
    mode: str
    name: str
    kind: str
    calls: list = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- inputs

def discover_inputs(samples: Path, shared: Path, tmp: Path) -> list[Input]:
    """Every sample, every shared trace, and the pods built from them under ``tmp``, sorted by name."""
    found: dict[str, Input] = {}

    def add(name: str, path: Path, kind: str) -> None:
        found[name] = Input(name, path, kind)

    for d in sorted(p for p in samples.iterdir() if (p / "plugins").is_dir()):
        add(f"sample-{d.name}", d, "trace")
        for j in sorted(d.glob("plugins/profile/*/*.json.gz")):
            add(f"sample-{d.name}-json", j, "tracejson")
        if (d / "hlo").is_dir():
            add(f"sample-{d.name}-hlo", d / "hlo", "hlo")
    if shared.is_dir():
        for name, path, kind in shared_inputs(shared):
            add(name, path, kind)
    for name, path in build_pods(samples, shared, tmp / "inputs").items():
        add(name, path, "trace")
    return [found[k] for k in sorted(found)]


def _slug(rel: Path) -> str:
    return "shared-" + "-".join(rel.parts).replace(".xplane.pb", "").replace(".txt", "")


def shared_inputs(shared: Path) -> list[tuple[str, Path, str]]:
    """The shared folder's traces: log dirs (plugins/profile) with their JSON traces and hlo/ dumps, folders
    of xplane files, HLO dump folders (module_* files) and loose HLO files."""
    out: list[tuple[str, Path, str]] = []
    logdirs = sorted({p.parents[3] for p in shared.rglob("plugins/profile/*/*") if p.is_file()})
    for d in logdirs:
        rel = d.relative_to(shared)
        out.append((_slug(rel), d, "trace"))
        for j in sorted(d.glob("plugins/profile/*/*.json.gz")):
            out.append((_slug(rel) + "-json", j, "tracejson"))
        if (d / "hlo").is_dir():
            out.append((_slug(rel) + "-hlo", d / "hlo", "hlo"))
    taken = list(logdirs)

    def inside(p: Path) -> bool:
        return any(p == t or t in p.parents for t in taken)

    for d in sorted({p.parent for p in shared.rglob("*.xplane.pb")}):
        if not inside(d):
            out.append((_slug(d.relative_to(shared)), d, "trace"))
            taken.append(d)
    for f in sorted(shared.rglob("*")):
        if not f.is_file() or inside(f.parent):
            continue
        if f.name.startswith("module_") and ("optimizations" in f.name):
            d = f.parent
            if not any(n == _slug(d.relative_to(shared)) for n, _, _ in out):
                out.append((_slug(d.relative_to(shared)), d, "hlo"))
        elif f.suffix == ".txt" and "hlo" in f.name:
            out.append((_slug(f.relative_to(shared)), f, "hlo"))
    return out


def build_pods(samples: Path, shared: Path, where: Path) -> dict[str, Path]:
    """Multi-host runs made of copies of single-host traces under other host names (each with the hlo/ dump
    of its source beside it, where there is one)."""
    recipes = {
        "pod-cpu": ([samples / "sharded"] * 3, samples / "sharded" / "hlo"),
        "pod-mixed": ([shared / "AMD-AGI-TraceLens/jax08_gemm/tw003.xplane.pb"] * 2
                      + [shared / "openxla-xprof/tpu_inference_2.xplane.pb"], None),
        "pod-h200": ([shared / "h200/train"] * 2, shared / "h200/train/hlo"),
    }
    pods = {}
    for name, (sources, hlo) in recipes.items():
        files = [min(s.glob("plugins/profile/*/*.xplane.pb"), default=None) if s.is_dir() else s for s in sources]
        present = [f for f in files if f is not None and f.is_file()]
        if len(present) < len(files):
            continue
        root = where / name
        run = root / "plugins" / "profile" / "2026_01_01_00_00_00"
        run.mkdir(parents=True, exist_ok=True)
        for k, f in enumerate(present):
            shutil.copyfile(f, run / f"host{k}.xplane.pb")
        if hlo is not None and hlo.is_dir():
            shutil.copytree(hlo, root / "hlo", dirs_exist_ok=True)
        pods[name] = root
    return pods


# ----------------------------------------------------------------------------------------------- calls

def _fmt(cmd: str, path: str, fmt: str, read: bool = True) -> Call:
    """``cmd PATH --format fmt`` (table: no --format, the default), its output in ``cmd.<ext>``."""
    return Call(f"{cmd}.{EXT[fmt]}", [cmd, path] + ([] if fmt == "table" else ["--format", fmt]), read)


def _top_op(folder: Path, source: str) -> list[str] | None:
    """``--op NAME --module M`` for graph: the first op of analyze.json, or (an HLO input) the instruction with
    the most FLOPs, then bytes, of hlo.json (the first such on ties)."""
    try:
        data = json.loads((folder / source).read_text())
    except (OSError, ValueError):
        return None
    if source.startswith("analyze"):
        ops = data.get("ops") or []
        return ["--op", ops[0]["name"], "--module", ops[0]["module"]] if ops else None
    best = None
    for m in data.get("modules", []):
        for ins in m.get("instructions", []):
            score = (ins.get("flops") or 0.0, (ins.get("bytes_read") or 0.0) + (ins.get("bytes_written") or 0.0))
            if best is None or score > best[0]:
                best = (score, ins)
    return ["--op", best[1]["name"], "--module", best[1]["module"]] if best else None


class GraphCall(Call):
    """A graph call whose --op comes from an earlier call's output in the same folder."""

    def __init__(self, path: str, fmt: str, source: str):
        super().__init__(f"graph.{EXT[fmt]}", ["graph", path, "--format", fmt])
        self.source = source


def input_calls(inp: Input) -> list[Call]:
    p = str(inp.path)
    if inp.kind == "hlo":
        calls = [_fmt(cmd, p, fmt) for cmd in ("hlo", "memory", "parallelism") for fmt in ("table", "json")]
        return calls + [GraphCall(p, "json", "hlo.json"), GraphCall(p, "dot", "hlo.json")]
    calls = [_fmt("analyze", p, fmt) for fmt in ("table", "json", "csv", "markdown")]
    if inp.kind == "tracejson":
        return calls + [_fmt("memory", p, "json"), _fmt("scopes", p, "json")]
    calls.append(Call("analyze.per_device.json", ["analyze", p, "--format", "json", "--per-device"]))
    calls += [_fmt("runs", p, "table", read=False), _fmt("runs", p, "json", read=False)]
    for cmd in ("hlo", "memory", "parallelism", "scopes", "inference", "roofline", "whatif"):
        calls += [_fmt(cmd, p, "table"), _fmt(cmd, p, "json")]
    calls.append(Call("scopes.source.txt", ["scopes", p, "--by", "source"]))
    return calls + [GraphCall(p, "json", "analyze.json"), GraphCall(p, "dot", "analyze.json")]


def global_calls(samples: Path, shared: Path, work: Path) -> list[Call]:
    """diff, check, history and hardware: pairs of samples, a baseline the tool writes, a fresh store."""
    s = {n: str(samples / n) for n in ("mlp", "mlp_slow", "mlp_repeat", "sharded", "fsdp")}
    base_json = str(work / "baseline-mlp.json")
    db = str(work / "history.sqlite")

    def formats(key: str, argv: list[str], fmts: tuple[str, ...], read: bool = True) -> list[Call]:
        return [Call(f"{key}.{EXT[f]}", argv + ([] if f == "table" else ["--format", f]), read) for f in fmts]

    def keep_baseline(folder: Path) -> None:
        shutil.copyfile(base_json, folder / "baseline-mlp.json")

    hlo_pair = [s["sharded"] + "/hlo", s["fsdp"] + "/hlo"]
    calls = formats("hardware", ["hardware"], ("table", "json"), read=False)
    calls += formats("diff.mlp-mlp_slow", ["diff", s["mlp"], s["mlp_slow"]], ("table", "json", "markdown", "junit"))
    calls += formats("diff.mlp-mlp_repeat", ["diff", s["mlp"], s["mlp_repeat"]], ("table",))
    calls += formats("diff.hlo-sharded-fsdp", ["diff", *hlo_pair], ("table", "json"))
    calls += formats("check.hlo-sharded-fsdp", ["check", hlo_pair[1], "--baseline", hlo_pair[0]], ("table",))
    h200 = [str(shared / "h200" / "train"), str(shared / "h200" / "train_nocb")]
    if all(Path(p).is_dir() for p in h200):
        calls += formats("diff.h200-train-nocb", ["diff", *h200], ("table", "json"))
        calls += formats("check.h200-train-nocb", ["check", h200[1], "--baseline", h200[0]], ("table",))
    calls.append(Call("analyze.baseline-mlp.txt", ["analyze", s["mlp"], "--format", "json", "-o", base_json],
                      setup=True, after=keep_baseline))
    calls += formats("diff.json-mlp_slow", ["diff", base_json, s["mlp_slow"]], ("table",))
    calls += formats("check.mlp_slow", ["check", s["mlp_slow"], "--baseline", base_json],
                     ("table", "json", "markdown"))
    calls += formats("check.mlp", ["check", s["mlp"], "--baseline", base_json], ("table",))
    runs = [("r1", "mlp"), ("r2", "mlp_repeat"), ("r3", "mlp"), ("r4", "mlp_slow"), ("r5", "mlp_slow")]
    for k, (label, sample) in enumerate(runs, 1):
        calls.append(Call(f"history.add.{label}.txt", ["history", "add", db, s[sample], "--label", label, "--time",
                                                       f"2026-01-0{k}T08:00Z", "--meta", f"sample={sample}"],
                          setup=True))
    calls += formats("history.report", ["history", "report", db], ("table", "json", "markdown", "html", "junit"),
                     read=False)
    calls += formats("history.report.ops", ["history", "report", db, "--metric", "op:*"], ("json",), read=False)
    calls += formats("check.history", ["check", s["mlp_slow"], "--history", db], ("table", "json"))
    return calls


def wanted(key: str, commands: list[str] | None) -> bool:
    return commands is None or any(key == c or key.startswith(c + ".") for c in commands)


def covered(job: str, kind: str, key: str, coverage: str) -> bool:
    """Whether ``--coverage`` runs call ``key`` on input ``job`` of ``kind``."""
    if coverage == "full" or job == GLOBAL or job in RICH_INPUTS:
        return True
    group = "sample-hlo" if kind == "hlo" and job.startswith("sample-") else kind
    return key in STANDARD_CALLS[group]


def limited(mode: str, full: bool) -> bool:
    return mode != "one" and not full


# -------------------------------------------------------------------------------------------- running

class Runner:
    """Runs the jobs of one snapshot: the interpreter, the environment, the normalization."""

    def __init__(self, python: str, out: Path, tmp: Path, samples: Path, shared: Path):
        self.python, self.out, self.tmp = python, out, tmp
        tree = subprocess.run([python, "-c", "import os, traceview; print(os.path.dirname(os.path.dirname("
                               "os.path.abspath(traceview.__file__))))"], capture_output=True, text=True,
                              cwd=tmp, env=self.base_env())
        if tree.returncode != 0:
            sys.exit(f"{python} cannot import traceview: {tree.stderr.strip()}")
        self.tree = tree.stdout.strip()
        pairs = [(str(tmp), "<TMP>"), (os.path.realpath(tmp), "<TMP>"), (str(samples), "<SAMPLES>"),
                 (str(shared), "<SHARED>"), (os.path.realpath(shared), "<SHARED>"), (self.tree, "<TREE>")]
        self.replacements = sorted({(a.encode(), b.encode()) for a, b in pairs}, key=lambda r: -len(r[0]))
        self.timings: dict[str, float] = {}

    def base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVIEW_") and k != "PYTHONPATH"}
        env.update(NO_COLOR="1", COLUMNS="160", LC_ALL="C.UTF-8", PYTHONIOENCODING="utf-8",
                   XDG_CACHE_HOME=str(self.tmp / "xdg"), MPLCONFIGDIR=str(self.tmp / "mpl"))
        return env

    def mode_env(self, mode: str) -> dict[str, str]:
        env = self.base_env()
        if mode.startswith("cache"):
            env["TRACEVIEW_CACHE_DIR"] = str(self.tmp / "cache")
            if mode == "cache_tables":
                env["TRACEVIEW_NO_RESULT_CACHE"] = "1"
        else:
            env["TRACEVIEW_NO_CACHE"] = "1"
        return env

    def normalize(self, data: bytes) -> bytes:
        for a, b in self.replacements:
            data = data.replace(a, b)
        return re.sub(rb"(\d+\.\d+\.\d+(?:\.dev\d+)?)\+g[0-9a-f]{6,40}(?:\.d\d{8})?", rb"\1+<HASH>", data)

    def run_job(self, job: Job, flags: list[str], selected) -> None:
        """Each call of ``job`` that ``selected(job, call)`` (and every setup call), in order."""
        folder = self.out / job.mode / job.name
        folder.mkdir(parents=True, exist_ok=True)
        work = self.tmp / "work"
        work.mkdir(parents=True, exist_ok=True)
        env = self.mode_env(job.mode)
        for call in job.calls:
            if not call.setup and not selected(job, call):
                continue
            argv = list(call.argv)
            if isinstance(call, GraphCall):
                op = _top_op(folder, call.source)
                if op is None:
                    (folder / f"{call.key}.skipped").write_text(f"no op: {call.source} missing or empty\n")
                    continue
                argv += op
            (folder / f"{call.key}.args").write_bytes(self.normalize(json.dumps(argv).encode()) + b"\n")
            full_argv = [self.python, "-m", "traceview"] + argv + (flags if call.read else [])
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(full_argv, capture_output=True, cwd=work, env=env, timeout=900)
                rc, stdout, stderr = str(proc.returncode), proc.stdout, proc.stderr
            except subprocess.TimeoutExpired as e:
                rc, stdout, stderr = "timeout", e.stdout or b"", e.stderr or b""
            self.timings[f"{job.mode}/{job.name}/{call.key}"] = round(time.perf_counter() - t0, 3)
            (folder / call.key).write_bytes(self.normalize(stdout))
            (folder / f"{call.key}.stderr").write_bytes(self.normalize(stderr))
            (folder / f"{call.key}.rc").write_text(rc + "\n")
            if call.after is not None and rc == "0":
                call.after(folder)


def start_dask(python: str, tmp: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str] | None:
    """A LocalCluster in a process of the snapshot's interpreter (so its workers import that traceview)."""
    code = ("import sys\nfrom distributed import LocalCluster\n"
            "c = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)\n"
            "print(c.scheduler_address, flush=True)\nsys.stdin.read()\nc.close()\n")
    with open(tmp / "dask.log", "wb") as log:     # the child keeps its own handle
        proc = subprocess.Popen([python, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                cwd=tmp, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    if not line.startswith("tcp://"):
        proc.kill()
        return None
    return proc, line


def mode_flags(mode: str, dask: str | None) -> list[str]:
    if mode == "one":
        return ["--jobs", "1", "--no-cache"]
    if mode == "pool":
        return ["--jobs", "2", "--no-cache"]
    if mode == "dask":
        return ["--no-cache", "--dask", dask or ""]
    return ["--jobs", "1"]


# ------------------------------------------------------------------------------------------ comparing

def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
            and p.relative_to(root).parts[0] != META and p.name != "DONE"}


def _report(rel: str, a: Path, b: Path, lines: int) -> None:
    print(f"DIFF {rel}")
    try:
        diff = list(difflib.unified_diff(a.read_text().splitlines(), b.read_text().splitlines(),
                                         str(a), str(b), n=1, lineterm=""))
    except UnicodeDecodeError:
        diff = [f"binary: {a.stat().st_size} vs {b.stat().st_size} bytes"]
    for line in diff[:lines]:
        print("    " + line[:200])
    if len(diff) > lines:
        print(f"    ... {len(diff) - lines} more diff lines")


def compare_trees(base: Path, new: Path, lines: int) -> int:
    """Files of ``new`` against ``base`` (for the mode/input folders ``new`` has); the number of problems."""
    new_files = _files(new)
    folders = {str(Path(f).parent) for f in new_files}
    base_files = {f for f in _files(base) if str(Path(f).parent) in folders}
    bad = 0
    for rel in sorted(new_files & base_files):
        if (base / rel).read_bytes() != (new / rel).read_bytes():
            _report(rel, base / rel, new / rel, lines)
            bad += 1
    for rel in sorted(base_files - new_files):
        print(f"MISSING in {new}: {rel}")
    for rel in sorted(new_files - base_files):
        print(f"NEW (not in {base}): {rel}")
    missing = len(base_files - new_files)
    print(f"compared {len(new_files & base_files)} files with {base}: {bad} differ, {missing} missing, "
          f"{len(new_files - base_files)} new")
    return bad + missing


def compare_modes(out: Path, lines: int) -> int:
    """Each mode's files against mode `one`'s (every file both have): the number that differ."""
    ref = out / "one"
    bad = compared = 0
    for mode in MODES[1:]:
        if not (out / mode).is_dir() or not ref.is_dir():
            continue
        for rel in sorted(_files(out / mode)):
            if (ref / rel).is_file():
                compared += 1
                if (ref / rel).read_bytes() != (out / mode / rel).read_bytes():
                    _report(f"{mode}/{rel} (vs one/{rel})", ref / rel, out / mode / rel, lines)
                    bad += 1
    print(f"modes: compared {compared} files with mode one's: {bad} differ")
    return bad


# ---------------------------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="snapshot folder (emptied first)")
    ap.add_argument("--compare", type=Path, metavar="BASE_DIR", help="then compare with this snapshot")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs traceview")
    ap.add_argument("--samples", type=Path, default=ROOT / "sample_traces")
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "traces")
    ap.add_argument("--only", help="comma-separated substrings: inputs whose name has one (_global: diff, "
                                   "check, history, hardware)")
    ap.add_argument("--modes", default="one,pool,dask,cache", help="comma-separated: one, pool, dask, cache "
                                                                   "(= cache_cold,cache_tables,cache_results)")
    ap.add_argument("--commands", help="comma-separated call keys or prefixes: analyze, analyze.json, diff ...")
    ap.add_argument("--full-modes", action="store_true", help="every input and call in every mode")
    ap.add_argument("--coverage", choices=("standard", "full"), default="standard",
                    help="standard (default): the main calls on every input, every call on a few (STANDARD_CALLS, "
                         "RICH_INPUTS); full: every call on every input (over an hour on 2 busy cores)")
    ap.add_argument("--jobs-parallel", type=int, default=1, help="CLI calls at a time (default 1)")
    ap.add_argument("--diff-lines", type=int, default=12, help="unified diff lines shown per differing file")
    ap.add_argument("--list", action="store_true", help="list the inputs and exit")
    ap.add_argument("--no-run", action="store_true", help="run nothing: compare the snapshot already in --out "
                                                          "(its modes with one, and with --compare BASE_DIR)")
    return ap.parse_args(argv)


def parse_modes(text: str) -> list[str]:
    modes: list[str] = []
    for m in text.split(","):
        for x in MODE_GROUPS.get(m.strip(), (m.strip(),)):
            if x not in MODES:
                sys.exit(f"unknown mode {x!r}; modes: one, pool, dask, cache")
            modes.append(x)
    return modes


def run_snapshot(args: argparse.Namespace, tmp: Path) -> None:
    """Write the snapshot into ``args.out`` (emptied first), mode after mode, with the timings in _meta/."""
    samples, shared = args.samples.resolve(), args.shared.resolve()
    commands = args.commands.split(",") if args.commands else None
    only = args.only.split(",") if args.only else None
    inputs = discover_inputs(samples, shared, tmp)
    if only:
        inputs = [i for i in inputs if any(o in i.name for o in only)]
    if args.out.exists():
        shutil.rmtree(args.out)
    (args.out / META).mkdir(parents=True)
    runner = Runner(args.python, args.out.resolve(), tmp, samples, shared)
    modes = parse_modes(args.modes)
    print(f"traceview from {runner.tree}; {len(inputs)} inputs; modes {', '.join(modes)}", flush=True)
    run_global = only is None or any(o in GLOBAL for o in only)

    def selected(job: Job, call: Call) -> bool:
        if not wanted(call.key, commands):
            return False
        if limited(job.mode, args.full_modes):
            return call.key in LIMITED_CALLS
        return covered(job.name, job.kind, call.key, args.coverage)

    mode_seconds = {}
    for mode in modes:
        dask = None
        if mode == "dask":
            dask = start_dask(args.python, tmp, runner.base_env())
            if dask is None:
                print("dask: no LocalCluster could start with that interpreter (see _meta/dask.log): skipped")
                continue
        jobs = []
        if run_global:     # one folder for every mode (paths in the outputs alike), emptied for each
            shutil.rmtree(tmp / "global", ignore_errors=True)
            (tmp / "global").mkdir()
            jobs.append(Job(mode, GLOBAL, "global", global_calls(samples, shared, tmp / "global")))
        for inp in inputs:
            if not limited(mode, args.full_modes) or inp.name.startswith(LIMITED_INPUTS):
                jobs.append(Job(mode, inp.name, inp.kind, input_calls(inp)))
        flags = mode_flags(mode, dask[1] if dask else None)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max(1, args.jobs_parallel)) as pool:
            for f in [pool.submit(runner.run_job, j, flags, selected) for j in jobs]:
                f.result()
        mode_seconds[mode] = round(time.perf_counter() - t0, 1)
        print(f"mode {mode}: {len(jobs)} inputs in {mode_seconds[mode]} s", flush=True)
        if dask is not None:
            dask[0].communicate(timeout=120)    # closes its stdin: the cluster shuts down
    if (tmp / "dask.log").exists():
        shutil.copyfile(tmp / "dask.log", args.out / META / "dask.log")
    (args.out / META / "timings.json").write_text(json.dumps(
        {"python": args.python, "tree": runner.tree, "modes": mode_seconds, "calls": runner.timings},
        indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="snapshot_outputs_")).resolve()
    try:
        if args.list:
            for inp in discover_inputs(args.samples.resolve(), args.shared.resolve(), tmp):
                print(f"{inp.name:55s} {inp.kind:9s} {inp.path}")
            return 0
        if args.no_run:
            if not args.out.is_dir():
                sys.exit(f"--no-run: no snapshot in {args.out}")
        else:
            run_snapshot(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bad = compare_modes(args.out, args.diff_lines)
    if args.compare is not None:
        bad += compare_trees(args.compare, args.out, args.diff_lines)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
