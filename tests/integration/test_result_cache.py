"""The result cache (traceview/cache/results.py, traceview/commands/runner.py): a second run of a command on
unchanged inputs writes the first run's bytes, exit code and stderr without redoing (or importing) anything;
any change to an input or option is a miss; the cache never turns into an error."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from traceview.cache import results as result_cache
from traceview.cli import main
from traceview.commands import analyze as analyze_command
from traceview.commands import runner
from traceview.commands._options import write_output


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A private cache folder with the result cache on (tests/conftest.py turns it off elsewhere)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(folder))
    monkeypatch.delenv(runner.NO_RESULT_CACHE_ENV, raising=False)
    monkeypatch.delenv("TRACEVIEW_NO_CACHE", raising=False)
    return folder


class FakeAnalyze:
    """Stands in for `analyze`'s run(): counts its calls, writes a warning to stderr and its output."""

    def __init__(self, exit_code: int = 0) -> None:
        self.calls = 0
        self.exit_code = exit_code

    def __call__(self, args) -> int:
        self.calls += 1
        print(f"warning: call {self.calls}", file=sys.stderr)
        write_output(f"output of call {self.calls} (top {args.top}, format {args.format})\n", args.output)
        return self.exit_code


@pytest.fixture
def fake(monkeypatch) -> FakeAnalyze:
    handler = FakeAnalyze(exit_code=1)
    monkeypatch.setattr(analyze_command, "run", handler)
    return handler


@pytest.fixture
def logdir(tmp_path) -> Path:
    """<log>/plugins/profile/run1/host0.xplane.pb with an HLO dump in <log>/hlo (found beside the trace)."""
    run = tmp_path / "log" / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    (run / "host0.xplane.pb").write_bytes(b"trace bytes")
    dump = tmp_path / "log" / "hlo" / "nested"
    dump.mkdir(parents=True)
    (dump / "module_1.after_optimizations.txt").write_text("HloModule m\n")
    return tmp_path / "log"


def _trace(logdir: Path) -> Path:
    return logdir / "plugins" / "profile" / "run1" / "host0.xplane.pb"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["analyze", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_hit_replays_output_stderr_and_exit_code(cache, fake, logdir, capsys):
    first = _run(capsys, str(_trace(logdir)))
    assert first == (1, "output of call 1 (top 20, format table)\n", "warning: call 1\n")
    assert _run(capsys, str(_trace(logdir))) == first
    assert fake.calls == 1


def test_hit_to_a_file_writes_the_same_bytes(cache, fake, logdir, tmp_path, capsys):
    out1, out2 = tmp_path / "a.json", tmp_path / "b.json"
    first = _run(capsys, str(_trace(logdir)), "--format", "json", "-o", str(out1))
    second = _run(capsys, str(_trace(logdir)), "--format", "json", "-o", str(out2))
    assert fake.calls == 1
    assert first == second == (1, "", "warning: call 1\n")
    assert out1.read_bytes() == out2.read_bytes() == b"output of call 1 (top 20, format json)\n"


@pytest.mark.parametrize("change", ["touch trace", "new host", "option", "dump file", "new dump file",
                                    "--hlo file", "hardware file"])
def test_a_changed_input_or_option_is_a_miss(cache, fake, logdir, tmp_path, capsys, change):
    trace = _trace(logdir)
    hlo_dir = tmp_path / "other_dump"
    hlo_dir.mkdir()
    (hlo_dir / "m.txt").write_text("HloModule a\n")
    hardware = tmp_path / "chips.json"
    hardware.write_text('{"name": "x"}')
    argv = [str(logdir), "--hlo", str(hlo_dir), "--hardware-file", str(hardware)]
    _run(capsys, *argv)
    _run(capsys, *argv)
    assert fake.calls == 1
    if change == "touch trace":
        st = trace.stat()
        os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1000))
    elif change == "new host":
        (trace.parent / "host1.xplane.pb").write_bytes(b"another host")
    elif change == "option":
        argv += ["--top", "5"]
    elif change == "dump file":
        (logdir / "hlo" / "nested" / "module_1.after_optimizations.txt").write_text("HloModule changed\n")
    elif change == "new dump file":
        (logdir / "hlo" / "module_2.after_optimizations.txt").write_text("HloModule n\n")
    elif change == "--hlo file":
        (hlo_dir / "m.txt").write_text("HloModule b, longer\n")
    else:
        hardware.write_text('{"name": "y", "kind": "gpu"}')
    code, out, err = _run(capsys, *argv)
    assert fake.calls == 2
    assert out.startswith("output of call 2") and err == "warning: call 2\n"


def test_dump_beside_a_trace_file_is_part_of_the_key(cache, fake, logdir, capsys):
    """PATH the trace file itself: the dump is found above plugins/ (traceview.analysis.modules.find_dump_dir)."""
    _run(capsys, str(_trace(logdir)))
    (logdir / "hlo" / "nested" / "module_1.after_optimizations.txt").write_text("HloModule changed\n")
    _run(capsys, str(_trace(logdir)))
    (_trace(logdir).parent / "m(1).hlo_proto.pb").write_bytes(b"proto")
    _run(capsys, str(_trace(logdir)))
    assert fake.calls == 3


@pytest.mark.parametrize("how", ["flag", "env", "result env"])
def test_no_cache_bypasses(cache, fake, logdir, monkeypatch, capsys, how):
    argv = [str(logdir)] + (["--no-cache"] if how == "flag" else [])
    if how == "env":
        monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")
    elif how == "result env":
        monkeypatch.setenv(runner.NO_RESULT_CACHE_ENV, "1")
    _run(capsys, *argv)
    _run(capsys, *argv)
    assert fake.calls == 2
    assert not (cache / "results").exists() or not list((cache / "results").iterdir())


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "flipped byte", "other key", "a folder",
                                    "a fifo"])
def test_corrupt_entry_is_a_miss_and_replaced(cache, fake, logdir, capsys, damage):
    first = _run(capsys, str(logdir))
    (entry,) = (cache / "results").iterdir()
    blob = entry.read_bytes()
    if damage == "garbage":
        entry.write_bytes(b"\x00not an entry" * 100)
    elif damage == "truncated":
        entry.write_bytes(blob[: len(blob) - 7])
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "flipped byte":
        entry.write_bytes(blob[:-3] + bytes([blob[-3] ^ 1]) + blob[-2:])
    elif damage == "other key":  # a valid entry of another key, at this key's file name
        result_cache.put("f" * 64, result_cache.Entry(texts=["foreign\n"], stderr="", exit_code=0))
        entry.write_bytes(result_cache.entry_path("f" * 64).read_bytes())
    elif damage == "a folder":
        entry.unlink()
        entry.mkdir()
    else:  # a FIFO: opening it for reading must not wait for a writer
        entry.unlink()
        os.mkfifo(entry)
    code, out, err = _run(capsys, str(logdir))
    assert fake.calls == 2 and out.startswith("output of call 2")
    if damage != "a folder":  # replaced by the new run's entry, which the next run reads
        assert _run(capsys, str(logdir)) == (code, out, err)
        assert fake.calls == 2
    assert first[0] == code


def test_unwritable_cache_dir_works(fake, logdir, tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("no folder can be made under a file")
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(blocker / "traceview"))
    monkeypatch.delenv(runner.NO_RESULT_CACHE_ENV, raising=False)
    assert _run(capsys, str(logdir)) == (1, "output of call 1 (top 20, format table)\n", "warning: call 1\n")
    assert _run(capsys, str(logdir))[1] == "output of call 2 (top 20, format table)\n"


def test_read_only_cache_dir_works(cache, fake, logdir, monkeypatch, capsys):
    """An entry that exists is served from a folder nothing can be written to; a new one is not stored."""
    _run(capsys, str(logdir))
    monkeypatch.setattr(tempfile, "mkstemp", _raise_read_only)
    monkeypatch.setattr(os, "utime", _raise_read_only)
    assert _run(capsys, str(logdir))[1] == "output of call 1 (top 20, format table)\n"
    assert _run(capsys, str(logdir), "--top", "3")[1] == "output of call 2 (top 3, format table)\n"
    assert _run(capsys, str(logdir), "--top", "3")[1] == "output of call 3 (top 3, format table)\n"


def _raise_read_only(*args, **kwargs):
    raise OSError(30, "Read-only file system")


def test_progress_bar_is_not_stored(cache, logdir, monkeypatch, capsys):
    from traceview.trace.progress import progress_bar

    class FakeTerminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    def with_bar(args) -> int:
        with progress_bar("reading trace", delay_s=0, interval_s=0.001) as bar:
            assert bar is not None
            bar(1, 1)
            import time
            time.sleep(0.05)
        write_output("result\n", args.output)
        return 0

    monkeypatch.setattr(analyze_command, "run", with_bar)
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["analyze", str(logdir)]) == 0
    assert "reading trace" in terminal.getvalue()  # the bar was drawn
    (entry,) = (cache / "results").iterdir()
    assert b"reading trace" not in entry.read_bytes()
    assert capsys.readouterr().out == "result\n"


def test_commands_with_effects_are_not_cached(cache):
    from argparse import Namespace

    assert runner.enabled(Namespace(command="roofline", plot=None, no_cache=False))
    assert not runner.enabled(Namespace(command="roofline", plot="chart.png", no_cache=False))
    assert not runner.enabled(Namespace(command="graph", format="svg", no_cache=False))
    for command in ("dashboard", "runs", "hardware"):
        assert not runner.enabled(Namespace(command=command, no_cache=False))
    for command in ("diff", "check"):
        assert runner.enabled(Namespace(command=command, no_cache=False, markdown_out=None, junit_out=None))
        assert not runner.enabled(Namespace(command=command, no_cache=False, markdown_out="s.md", junit_out=None))
        assert not runner.enabled(Namespace(command=command, no_cache=False, markdown_out=None, junit_out="j.xml"))


def test_a_pipe_as_input_is_not_cached(cache, fake, logdir, tmp_path, capsys):
    fifo = tmp_path / "chips.fifo"
    os.mkfifo(fifo)
    _run(capsys, str(logdir), "--hardware-file", str(fifo))  # the fake never opens it
    _run(capsys, str(logdir), "--hardware-file", str(fifo))
    assert fake.calls == 2


def test_home_relative_paths_are_expanded(cache, fake, logdir, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(logdir))
    _run(capsys, "~/plugins")
    _run(capsys, "~/plugins")
    assert fake.calls == 1
    (_trace(logdir).parent / "host1.xplane.pb").write_bytes(b"another host")
    _run(capsys, "~/plugins")
    assert fake.calls == 2


def test_too_many_files_is_not_cached(cache, fake, logdir, monkeypatch, capsys):
    monkeypatch.setattr(runner, "MAX_WALK_ENTRIES", 3)
    _run(capsys, str(logdir))
    _run(capsys, str(logdir))
    assert fake.calls == 2


# ------------------------------------------------------------------------------ the store itself


def _key(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def test_store_round_trip_keeps_every_character(cache):
    entry = result_cache.Entry(texts=["naïve\x1b[31m\n", "", "\udc80 lone surrogate"], stderr="warn ✓\n", exit_code=1)
    assert result_cache.put(_key(1), entry)
    assert result_cache.get(_key(1)) == entry
    assert result_cache.get(_key(2)) is None


@pytest.mark.parametrize("header", [b"[" * 60_000, b'{"format": 1}', b"not json", b'{"format": 1, "key": "K", '
                                    b'"exit_code": 999, "lengths": [0], "sha256": ""}',
                                    b'{"format": 1, "key": "K", "exit_code": 0, "lengths": [-1, 1], "sha256": ""}'])
def test_hostile_entries_are_a_miss(cache, header):
    key = _key(3)
    header = header.replace(b'"K"', f'"{key}"'.encode())
    path = result_cache.entry_path(key)
    path.parent.mkdir(parents=True)
    path.write_bytes(result_cache.MAGIC + len(header).to_bytes(8, "little") + header)
    assert result_cache.get(key) is None
    assert not path.exists()
    path.write_bytes(result_cache.MAGIC + (2**63).to_bytes(8, "little") + header)
    assert result_cache.get(key) is None


def test_oversized_entries_are_neither_read_nor_stored(cache, monkeypatch):
    assert result_cache.put(_key(4), result_cache.Entry(texts=["x" * 5000], stderr="", exit_code=0))
    monkeypatch.setattr(result_cache, "MAX_ENTRY_BYTES", 1000)
    monkeypatch.setattr(result_cache, "MAX_HEADER_BYTES", 1000)
    assert result_cache.get(_key(4)) is None
    assert not result_cache.put(_key(5), result_cache.Entry(texts=["x" * 5000], stderr="", exit_code=0))


def test_size_limit_evicts_the_least_recently_used(cache, monkeypatch):
    monkeypatch.setenv("TRACEVIEW_CACHE_MAX_MB", str(2.5 * 1000 / 2**20))  # room for two 1 kB entries
    for n in range(3):
        assert result_cache.put(_key(n), result_cache.Entry(texts=["x" * 900], stderr="", exit_code=0))
        path = result_cache.entry_path(_key(n))
        os.utime(path, (1000 + n, 1000 + n))
    assert result_cache.get(_key(0)) is None
    assert result_cache.get(_key(1)) is not None and result_cache.get(_key(2)) is not None


# ------------------------------------------------------------------ real runs, in fresh processes

_PROBE = """
import sys
from traceview.cli import main
code = main(sys.argv[1:])
print("pandas" in sys.modules, "numpy" in sys.modules, file=sys.stderr)
sys.exit(code)
"""


def _fresh(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, env=env, timeout=300)


def test_real_analyze_warm_is_identical_and_imports_no_pandas(sample_traces, tmp_path):
    """Cold then warm `traceview analyze` of a sample trace in fresh processes: the same bytes (-o file,
    stdout; JSON and the terminal table), exit code and stderr; the warm run imports neither pandas nor
    numpy; a touched trace is analyzed again."""
    run = tmp_path / "mlp"
    shutil.copytree(sample_traces / "mlp", run)
    env = {k: v for k, v in os.environ.items() if k != runner.NO_RESULT_CACHE_ENV}
    env["TRACEVIEW_CACHE_DIR"] = str(tmp_path / "cache")
    as_json = ["analyze", str(run), "--format", "json"]
    cold = _fresh([*as_json, "-o", str(tmp_path / "cold.json")], env)
    warm = _fresh([*as_json, "-o", str(tmp_path / "warm.json")], env)
    warm_stdout = _fresh(as_json, env)
    assert (cold.returncode, cold.stdout, cold.stderr) == (0, b"", b"True True\n")  # the cold run did the work
    assert (warm.returncode, warm.stdout, warm.stderr) == (0, b"", b"False False\n")
    assert (warm_stdout.returncode, warm_stdout.stderr) == (0, b"False False\n")
    written = (tmp_path / "cold.json").read_bytes()
    assert b'"ops"' in written and (tmp_path / "warm.json").read_bytes() == written == warm_stdout.stdout
    table_cold, table_warm = _fresh(["analyze", str(run)], env), _fresh(["analyze", str(run)], env)
    assert table_cold.stdout.startswith(b"traceview ") and table_cold.stdout == table_warm.stdout
    assert (table_cold.stderr, table_warm.stderr) == (b"True True\n", b"False False\n")
    trace = next(run.glob("plugins/profile/*/*.xplane.pb"))
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 1))
    again = _fresh(["analyze", str(run)], env)
    assert again.stdout == table_cold.stdout and again.stderr == b"True True\n"


@pytest.mark.parametrize(("argv", "code"), [
    (["hlo", "{run}", "--format", "json"], 0), (["memory", "{run}/hlo"], 0),
    (["parallelism", "{run}", "--format", "markdown"], 0), (["roofline", "{run}", "--format", "json"], 0),
    (["check", "{slow}", "--baseline", "{run}", "--format", "json"], 1)])
def test_other_commands_replay_their_own_output(sample_traces, cache, tmp_path, monkeypatch, capsys, argv, code):
    import importlib

    run, slow = tmp_path / "mlp", tmp_path / "mlp_slow"
    shutil.copytree(sample_traces / "mlp", run)
    if "{slow}" in argv:
        shutil.copytree(sample_traces / "mlp_slow", slow)
    argv = [a.format(run=run, slow=slow) for a in argv]
    module = importlib.import_module(f"traceview.commands.{argv[0]}")
    calls = []
    real = module.run
    monkeypatch.setattr(module, "run", lambda args: calls.append(1) or real(args))
    monkeypatch.setenv(runner.NO_RESULT_CACHE_ENV, "1")
    reference = (main(argv), *capsys.readouterr())
    monkeypatch.delenv(runner.NO_RESULT_CACHE_ENV)
    cold = (main(argv), *capsys.readouterr())
    warm = (main(argv), *capsys.readouterr())
    assert reference == cold == warm and reference[0] == code and len(reference[1]) > 100
    assert len(calls) == 2  # the warm run did not call the command


def test_colour_on_a_terminal_is_part_of_the_key(cache, fake, logdir, monkeypatch, capsys):
    """The terminal table is coloured on a terminal without NO_COLOR (render.tables.use_colour)."""

    class FakeTerminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    main(["analyze", str(logdir)])               # not a terminal: no colour
    monkeypatch.setattr(sys, "stdout", FakeTerminal())
    main(["analyze", str(logdir)])               # colour: a miss
    main(["analyze", str(logdir)])               # a hit
    assert fake.calls == 2
    monkeypatch.setenv("NO_COLOR", "1")
    main(["analyze", str(logdir)])               # a terminal, but no colour: the first run's output
    assert fake.calls == 2
    assert sys.stdout.getvalue() == "".join(f"output of call {n} (top 20, format table)\n" for n in (2, 2, 1))


def test_full_disk_stores_nothing_and_leaves_no_temporary_file(cache, fake, logdir, monkeypatch, capsys):
    class FullDisk(io.BytesIO):
        def write(self, data) -> int:
            raise OSError(28, "No space left on device")

    real_fdopen = os.fdopen

    def fdopen(fd, *args, **kwargs):
        os.close(fd)
        return FullDisk()

    monkeypatch.setattr(result_cache.os, "fdopen", fdopen)
    assert _run(capsys, str(logdir))[1] == "output of call 1 (top 20, format table)\n"
    assert list((cache / "results").iterdir()) == []
    monkeypatch.setattr(result_cache.os, "fdopen", real_fdopen)
    _run(capsys, str(logdir))
    _run(capsys, str(logdir))
    assert fake.calls == 2
