"""Hostile values for every command's flags: each is refused with exit 2 and one line on stderr naming the flag
(or the file it names), never a traceback, never exit 1 (a regression) nor 3 (a bug), never a quiet default.

docs/ci.md's contract, checked where the value comes in. What is covered elsewhere is left there: a trace PATH
that is empty, text, a folder or missing, and an unknown --target (tests/e2e/test_analyze_cli.py); the contents
of traces, HLO files and history stores (tests/fuzz/); --mesh with an unknown role (tests/integration/
test_whatif.py); --depth and --last out of range (test_scopes.py, test_graph.py, test_history_store.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from traceview import cli
from traceview.cli import main

ROOT = Path(__file__).resolve().parents[2]
MLP = str(ROOT / "sample_traces" / "mlp")
SLOW = str(ROOT / "sample_traces" / "mlp_slow")
DUMP = str(ROOT / "sample_traces" / "mlp" / "hlo")
HANG_S = 60          # a command that reads a FIFO waits for a writer that never comes: a failure, not a hang
HISTORY = importlib.util.find_spec("sqlalchemy") is not None and importlib.util.find_spec("scipy") is not None


class Hung(BaseException):
    """Raised by the alarm in a command that waits forever (BaseException: the CLI's bug handler lets it by)."""


class ServerStarted(BaseException):
    """Raised where `traceview dashboard` would start Streamlit: its flags were accepted."""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """The hostile paths and config files the invocations name, by placeholder."""
    tmp = tmp_path_factory.mktemp("hostile")
    (tmp / "folder").mkdir()
    os.mkfifo(tmp / "fifo")
    (tmp / "empty.db").write_bytes(b"")
    configs = {
        "int400": f"[check]\nmax_op_regression = 1{'0' * 400}\n",         # an int no float holds
        "dur400": f"[check]\nmin_op_time = 1{'0' * 400}\n",
        "rule400": f'[[check.ops]]\npattern = "*"\nmin_time = 1{"0" * 400}\n',
        "mem400": f"[check]\nmax_peak_memory_increase = 1{'0' * 400}\n",
        "mfu30": "[check]\nmin_mfu = 30\n",                                   # 3000% of peak: no run meets it
    }
    out = {"folder": str(tmp / "folder"), "fifo": str(tmp / "fifo"), "missing": str(tmp / "missing"),
           "db": str(tmp / "empty.db"), "new_db": str(tmp / "new.db")}
    for name, text in configs.items():
        (tmp / f"{name}.toml").write_text(text)
        out[name] = str(tmp / f"{name}.toml")
    return out


@pytest.fixture(autouse=True)
def no_server(monkeypatch) -> None:
    """Any dashboard invocation here is refused before the server would start."""
    from traceview.commands import dashboard

    def refuse(*args, **kwargs):
        raise ServerStarted("traceview dashboard accepted the flags and started the server")

    monkeypatch.setattr(dashboard.subprocess, "Popen", refuse)


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """``traceview ARGV`` in this process: (exit status, stderr); argparse's own exit counts as its status."""
    def alarm(signum, frame):
        raise Hung(f"traceview {' '.join(argv)[:200]} still running after {HANG_S} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_S)
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, capsys.readouterr().err


def assert_refused(argv: list[str], names: str | tuple[str, ...], capsys) -> str:
    """Exit 2 and one line on stderr naming ``names`` (or one of them): no traceback, no usage block."""
    code, err = run_cli(argv, capsys)
    shown = err if len(err) < 600 else err[:600] + "..."
    assert "Traceback" not in err, shown
    assert code == 2, f"exit {code}: {shown}"
    assert err.count("\n") == 1 and err.endswith("\n"), f"not one line: {shown!r}"
    wanted = (names,) if isinstance(names, str) else names
    assert any(n in err for n in wanted), f"{wanted!r} not named: {shown}"
    assert len(err) < 2000, f"a {len(err)}-character message"
    return err


def _id(words) -> str:
    """A test id without this checkout's path."""
    return " ".join(w.replace(f"{ROOT}/", "") for w in words)[:80]


def _expand(words: tuple[str, ...], files: dict[str, str]) -> list[str]:
    return [w.format(**files) if "{" in w else w for w in words]


LONG = "a" * 100_000

# (argv, what the one line must name); {name} is a path from the `files` fixture.
CASES = [
    # numbers: negative, zero where a count starts at 1, not a number, beyond any float
    (("analyze", MLP, "--top", "-5"), "--top"),
    (("analyze", MLP, "--top", "0"), "--top"),
    (("analyze", MLP, "--top", "1e400"), "--top"),
    (("analyze", MLP, "--top", "nan"), "--top"),
    (("hlo", DUMP, "--top", "-1"), "--top"),
    (("memory", MLP, "--top", "-3"), "--top"),
    (("memory", DUMP, "--jobs", "-2"), "--jobs"),
    (("graph", DUMP, "--op", "dot.1", "--depth", "1e400"), "--depth"),
    (("scopes", MLP, "--depth", "1e400"), "--depth"),
    (("whatif", MLP, "--chips", "nan"), "--chips"),
    (("whatif", MLP, "--chips", "0"), "--chips"),
    (("whatif", MLP, "--microbatches", "1e400"), "--microbatches"),
    (("whatif", MLP, "--mesh", "data=8,,fsdp"), "--mesh"),
    (("whatif", MLP, "--mesh", "data=8=2"), "--mesh"),
    (("dashboard", MLP, "--port", "nan"), "--port"),
    (("diff", MLP, SLOW, "--top", "-3"), "--top"),
    (("check", SLOW, "--baseline", MLP, "--min-mfu", "30"), "--min-mfu"),
    (("check", SLOW, "--baseline", MLP, "--max-step-time", "0"), "--max-step-time"),
    (("check", SLOW, "--baseline", MLP, "--max-step-regression", "-5%"), "--max-step-regression"),
    # a name, a choice, an unknown or malformed flag
    (("analyze", MLP, "--target", LONG), "unknown target"),      # named, its middle left out
    (("analyze", MLP, "--format", "xml"), "--format"),
    (("analyze", MLP, "--per-device=yes"), "--per-device"),
    (("analyze", MLP, "--no-such-flag"), "--no-such-flag"),
    (("analyze",), "PATH"),
    (("graph", DUMP), "--op"),
    (("graph", DUMP, "--op", "dot.1", "--target", "tpu-v99"), "tpu-v99"),
    (("history",), "ACTION"),
    # paths: control characters, NUL, too long, FIFOs, devices, folders for files, missing folders
    (("analyze", "no\nsuch"), "no\\nsuch"),
    (("analyze", "a\x00b"), "PATH"),
    (("analyze", "/tmp/" + "a" * 5000), "PATH"),
    (("analyze", MLP, "--hardware-file", "{fifo}"), "{fifo}"),
    (("hardware", "--hardware-file", "{fifo}"), "{fifo}"),
    (("check", SLOW, "--baseline", MLP, "--config", "{fifo}"), "{fifo}"),
    (("check", SLOW, "--baseline", MLP, "--config", "/dev/null"), "/dev/null"),
    (("dashboard", MLP, "--hlo", "{missing}"), "{missing}"),
    (("analyze", MLP, "-o", "{folder}"), "{folder}"),
    (("analyze", MLP, "-o", "{missing}/out.txt"), "-o"),
    (("hardware", "-o", "{folder}"), "{folder}"),
    (("hardware", "-o", "/dev/full"), "/dev/full"),
    (("roofline", MLP, "--plot", "{missing}/chart.png"), "--plot"),
    (("diff", MLP, SLOW, "--markdown-out", "{folder}"), "{folder}"),
    (("check", SLOW, "--baseline", MLP, "--junit-out", "{missing}/report.xml"), "--junit-out"),
    # check budgets from a TOML file: numbers beyond any float, an MFU floor above 100%
    (("check", SLOW, "--baseline", MLP, "--config", "{int400}"), "{int400}"),
    (("check", SLOW, "--baseline", MLP, "--config", "{dur400}"), "{dur400}"),
    (("check", SLOW, "--baseline", MLP, "--config", "{rule400}"), "{rule400}"),
    (("check", SLOW, "--baseline", MLP, "--config", "{mem400}"), "{mem400}"),
    (("check", SLOW, "--baseline", MLP, "--config", "{mfu30}"), "{mfu30}"),
]
HISTORY_CASES = [
    (("history", "report", "{fifo}"), "{fifo}"),
    (("history", "report", "/dev/null"), "/dev/null"),
    (("history", "report", "{db}", "-o", "{folder}"), "{folder}"),
    (("history", "add", "{fifo}", MLP, "--label", "x"), "{fifo}"),
    (("check", SLOW, "--history", "{fifo}"), "{fifo}"),
    (("check", SLOW, "--history", "{db}", "--record", ""), "--record"),
    (("dashboard", MLP, "--history", "{fifo}"), "{fifo}"),
]


@pytest.mark.parametrize("words, names", CASES, ids=[_id(c[0]) for c in CASES])
def test_hostile_value_is_one_line_and_exit_2(files, capsys, words, names):
    assert_refused(_expand(words, files), names.format(**files), capsys)


@pytest.mark.skipif(not HISTORY, reason="the history extra (sqlalchemy, scipy) is not installed")
@pytest.mark.parametrize("words, names", HISTORY_CASES, ids=[_id(c[0]) for c in HISTORY_CASES])
def test_hostile_history_store_is_one_line_and_exit_2(files, capsys, words, names):
    assert_refused(_expand(words, files), names.format(**files), capsys)


@pytest.mark.skipif(not HISTORY, reason="the history extra (sqlalchemy, scipy) is not installed")
def test_a_last_beyond_any_store_reads_every_run(files, tmp_path, capsys):
    """``--last`` larger than SQL's 64-bit LIMIT asks for every run, as any count beyond the store's does."""
    db = str(tmp_path / "history.db")
    assert main(["history", "add", db, MLP, "--label", "one"]) == 0
    capsys.readouterr()
    code, err = run_cli(["history", "report", db, "--last", "9" * 30, "--format", "json"], capsys)
    assert code == 0, err


# --------------------------------------------------------------------- every flag, an empty value

# What each command needs beside the flag under test to get as far as reading its flags: positionals, options.
_BASE_ARGV: dict[str, tuple[list[str], list[str]]] = {
    "analyze": ([MLP], []), "runs": ([MLP], []), "hlo": ([DUMP], []), "memory": ([MLP], []),
    "graph": ([DUMP], ["--op", "dot.1"]), "parallelism": ([MLP], []), "scopes": ([MLP], []),
    "inference": ([MLP], []), "roofline": ([MLP], []), "whatif": ([MLP], []), "hardware": ([], []),
    "dashboard": ([MLP], []), "diff": ([MLP, SLOW], []), "check": ([SLOW], ["--baseline", MLP]),
    "history add": (["{new_db}", MLP], ["--label", "x"]), "history report": (["{db}"], []),
}


def _commands() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every leaf command's parser, by its words (``history add``)."""
    parser = cli.build_parser()
    for action in parser._subparsers._group_actions:
        for name, sub in action.choices.items():
            inner = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
            if inner:
                for action_name, leaf in inner[0].choices.items():
                    yield f"{name} {action_name}", leaf
            else:
                yield name, sub


def _empty_value_cases() -> list[tuple[list[str], tuple[str, ...]]]:
    """(argv with one value empty, the flag's names) for every option and positional of every command that takes
    one; an option is given by its first name (``-o``), the message may use any (``--output``)."""
    cases = []
    for command, parser in _commands():
        positionals, options = _BASE_ARGV[command]
        takes = [a for a in parser._actions if a.nargs != 0 and not isinstance(a, argparse._SubParsersAction)]
        for action in takes:
            if action.option_strings:
                flags = tuple(action.option_strings)
                cases.append(([*command.split(), *positionals, *options, flags[0], ""], flags))
            else:
                at = [a for a in takes if not a.option_strings].index(action)
                values = [("" if i == at else v) for i, v in enumerate(positionals)]
                cases.append(([*command.split(), *values, *options], (str(action.metavar or action.dest),)))
    return cases


EMPTY_CASES = _empty_value_cases()


def test_the_empty_value_cases_cover_every_command():
    assert {argv[0] for argv, _ in EMPTY_CASES} == set(cli.COMMANDS)
    assert len(EMPTY_CASES) > 100


@pytest.mark.parametrize("argv, flags", EMPTY_CASES, ids=[_id([*a[:2], f[-1]]) for a, f in EMPTY_CASES])
def test_an_empty_value_is_refused_naming_its_flag(files, capsys, argv, flags):
    """``--target "$CHIP"`` with CHIP unset: never quietly "not given", never the current folder for a path."""
    if not HISTORY and (argv[0] == "history" or "--history" in argv or "--record" in argv):
        pytest.skip("the history extra (sqlalchemy, scipy) is not installed")
    assert_refused(_expand(tuple(argv), files), flags, capsys)
