"""Running a sub-command through the result cache (traceview.cache.results): unchanged inputs, stored output.

A command whose output is a pure function of its inputs is cached when it
has no other effect (``roofline --plot`` writes a chart, ``graph --format
svg`` runs Graphviz, ``diff``/``check`` with ``--markdown-out`` or
``--junit-out`` write more files: those are not). The key covers everything the output
depends on:

* traceview's version, a fingerprint of its source (every .py and data file
  of the installed package, parsers and dashboards included) and of the
  libraries that compute it (Python, numpy, pandas, pyarrow, protobuf);
* the command and its options (all of them but how inputs are read:
  --no-cache, --jobs, --dask; and where the output goes: -o), whether the
  terminal gets colour, and the working folder when a path is relative;
* the identity (resolved path, type, size, mtime_ns, inode) of every file the
  command may read: PATH itself, or every file below it when it is a folder
  (so the run a log dir resolves to, its hosts and its HLO are covered); the
  *.hlo_proto.pb files beside a trace file; the HLO dump folder found beside
  the trace (traceview.parsers.layout.find_dump_dir) and --hlo's, walked in
  full; --hardware-file; diff's and check's BASE, NEW and --config alike. A walk stops at MAX_WALK_ENTRIES: then nothing is
  cached.

Computing it reads no file's contents but traceview's own source, and
imports neither numpy nor pandas. The key is computed again after the run:
an input that changed meanwhile means nothing is stored.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from traceview.cache import results as resultcache
from traceview.commands import _options
from traceview.version import __version__

KEY_FORMAT = 1
MAX_WALK_ENTRIES = 50_000
NO_RESULT_CACHE_ENV = "TRACEVIEW_NO_RESULT_CACHE"

# Commands cached, with the condition on their options (they have no effect beyond their output).
CACHED: dict[str, Callable[[argparse.Namespace], bool]] = {
    "analyze": lambda args: True,
    "hlo": lambda args: True,
    "memory": lambda args: True,
    "parallelism": lambda args: True,
    "scopes": lambda args: args.by == "scope",     # by source it reads the source files' lines too
    "roofline": lambda args: not args.plot,
    "graph": lambda args: args.format != "svg",
    "diff": lambda args: not args.markdown_out and not args.junit_out,
    "check": lambda args: not args.markdown_out and not args.junit_out and not getattr(args, "history", None),
}
# Options that do not change the output: how the inputs are read, where the output goes, tracebacks.
_NOT_IN_KEY = {"handler", "no_cache", "jobs", "dask", "output", "debug"}
# Options naming a trace, dump or HLO file (walked), and files read whole.
_SOURCES = ("path", "hlo", "base", "new", "baseline")
_FILES = ("hardware_file", "config")
# Libraries whose behaviour shapes the output: their installed files' identity stands for their version.
_LIBRARIES = ("numpy", "pandas", "pyarrow", "google.protobuf")
_DATA_SUFFIXES = (".py", ".json")

_source_fingerprint: str | None = None


class _Uncacheable(Exception):
    """An input this key cannot describe (too many files, an odd option value)."""


def run_command(args: argparse.Namespace) -> int:
    """`args.handler(args)`, or its stored output when the inputs have not changed."""
    key = _key_or_none(args)
    if key is None:
        return int(args.handler(args) or 0)
    entry = resultcache.get(key)
    if entry is not None:
        if entry.stderr:
            sys.stderr.write(entry.stderr)
            sys.stderr.flush()
        for text in entry.texts:
            _options.write_output(text, args.output)
        return entry.exit_code
    with _recording() as record:
        code = int(args.handler(args) or 0)
    if _key_or_none(args) == key:  # no input changed while it ran
        resultcache.put(key, resultcache.Entry(texts=record.texts, stderr="".join(record.stderr),
                                               exit_code=code))
    return code


def enabled(args: argparse.Namespace) -> bool:
    condition = CACHED.get(getattr(args, "command", None) or "")
    if condition is None or getattr(args, "no_cache", False):
        return False
    if os.environ.get("TRACEVIEW_NO_CACHE") or os.environ.get(NO_RESULT_CACHE_ENV):
        return False
    return bool(condition(args))


def _key_or_none(args: argparse.Namespace) -> str | None:
    if not enabled(args):
        return None
    try:
        return cache_key(args)
    except (_Uncacheable, OSError, ValueError, TypeError, RecursionError):
        return None


def stored_keys(args: argparse.Namespace) -> list[str]:
    """The keys `args`'s output may be stored under, whether its stdout was coloured or not (for an output
    colour does not change, like JSON, read by another process than the one that ran it); [] when not
    cached."""
    if not enabled(args):
        return []
    try:
        return [cache_key(args, colour=False), cache_key(args, colour=True)]
    except (_Uncacheable, OSError, ValueError, TypeError, RecursionError):
        return []


def cache_key(args: argparse.Namespace, colour: bool | None = None) -> str:
    """The hex digest naming the output of this command on its inputs as they are now (`colour`: whether
    stdout gets colour; None: as this process's stdout does)."""
    options = {k: v for k, v in sorted(vars(args).items()) if k not in _NOT_IN_KEY}
    for k, v in options.items():
        if v is not None and not isinstance(v, (str, int, float, bool)):
            raise _Uncacheable(f"option {k}: {type(v).__name__}")
    paths = [options.get(name) for name in (*_SOURCES, *_FILES)]
    relative = any(isinstance(p, str) and not os.path.isabs(p) for p in paths)
    inputs: list = []
    budget = [MAX_WALK_ENTRIES]
    for name in (*_SOURCES, *_FILES):
        value = options.get(name)
        if not isinstance(value, str):
            continue
        path = Path(value).expanduser()
        _refuse_streams(path)
        if name in _FILES:
            inputs.append([name, _identity(path)])
        else:
            inputs.append([name, *_source_inputs(path, budget, trace=name != "hlo")])
    ident = [KEY_FORMAT, __version__, source_fingerprint(), options, _colour() if colour is None else colour,
             os.getcwd() if relative else None, inputs]
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode("utf-8", "surrogatepass")).hexdigest()


def _refuse_streams(path: Path) -> None:
    """A pipe or device named as an input (/dev/stdin, a FIFO) reads differently each time: not cached."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing: the command fails, and a failure is never stored
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise _Uncacheable(f"{path}: not a regular file or folder")


def _colour() -> bool:
    """Whether the terminal renderers colour their output (render.tables.use_colour, imported only when
    stdout is a terminal: its regular expressions cost a start-up that is otherwise all of a hit's)."""
    if not sys.stdout.isatty():
        return False
    from traceview.render.tables import use_colour

    return use_colour()


def _source_inputs(path: Path, budget: list[int], trace: bool) -> list:
    """Identities of the files a trace or HLO PATH may lead a command to read."""
    out = _walk(path, budget)
    if trace:
        from traceview.parsers.layout import HLO_PROTO_SUFFIX, find_dump_dir

        if path.is_file():  # a trace file: its run is its folder's *.hlo_proto.pb files
            try:
                beside = sorted(f for f in os.listdir(path.parent) if f.endswith(HLO_PROTO_SUFFIX))
            except OSError:
                beside = []
            _spend(budget, len(beside))
            out += [_identity(path.parent / f) for f in beside]
        dump = find_dump_dir(path)
        if dump is not None:
            out += [["dump"], *_walk(dump, budget)]
    return out


def _walk(path: Path, budget: list[int]) -> list:
    """PATH's identity, and every entry below it when it is a folder (symbolic links followed)."""
    out = [_identity(path)]
    if not path.is_dir():
        return out
    for folder, dirs, files in os.walk(path, followlinks=True):
        dirs.sort()
        _spend(budget, len(dirs) + len(files))
        base = Path(folder)
        out += [_identity(base / name) for name in sorted(files)]
        out += [[str(base / name), "dir"] for name in dirs]
    return out


def _spend(budget: list[int], n: int) -> None:
    budget[0] -= n
    if budget[0] < 0:
        raise _Uncacheable("too many files to describe")


def _identity(path: Path) -> list:
    """[resolved path, kind, size, mtime_ns, inode]; a path that does not exist is only its name."""
    try:
        resolved = os.path.realpath(path)
        st = os.stat(resolved)
    except OSError:
        return [str(path), "missing"]
    return [resolved, stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ino]


def source_fingerprint() -> str:
    """A digest of traceview's installed source and data files and of the libraries it computes with."""
    global _source_fingerprint
    if _source_fingerprint is None:
        import importlib.util

        h = hashlib.sha256(sys.version.encode())
        roots = [Path(__file__).resolve().parents[1]]  # the traceview package
        for sub in ("traceview.parsers", "traceview.dashboards"):
            spec = importlib.util.find_spec(sub)
            if spec is not None:
                roots += [Path(p).resolve() for p in spec.submodule_search_locations or ()]
        for root in dict.fromkeys(roots):
            for folder, dirs, files in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith(_DATA_SUFFIXES):
                        f = os.path.join(folder, name)
                        h.update(f"{os.path.relpath(f, root)}\0".encode())
                        with open(f, "rb") as handle:
                            h.update(hashlib.sha256(handle.read()).digest())
        for lib in _LIBRARIES:
            try:
                spec = importlib.util.find_spec(lib)
            except (ImportError, ValueError):
                spec = None
            origin = spec.origin if spec is not None else None
            h.update(json.dumps([lib, _identity(Path(origin)) if origin else None]).encode())
        _source_fingerprint = h.hexdigest()
    return _source_fingerprint


class _Record:
    def __init__(self) -> None:
        self.texts: list[str] = []
        self.stderr: list[str] = []


class _RecordingStream:
    """sys.stderr while a command runs: writes go through and are kept, except the progress bar's
    (it writes to `.unrecorded`)."""

    def __init__(self, stream, kept: list[str]) -> None:
        self.unrecorded = stream
        self._kept = kept

    def write(self, text: str) -> int:
        self._kept.append(text)
        return self.unrecorded.write(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self.unrecorded, name)


@contextmanager
def _recording() -> Iterator[_Record]:
    record = _Record()
    saved = sys.stderr
    sys.stderr = _RecordingStream(saved, record.stderr)
    hook = record.texts.append
    _options.OUTPUT_HOOKS.append(hook)
    try:
        yield record
    finally:
        _options.OUTPUT_HOOKS.remove(hook)
        sys.stderr = saved
