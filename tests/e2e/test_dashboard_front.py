"""The dashboard's first page from a stored analysis record (dashboards/front.py): drawn before the full
analysis is loaded, with the same figures as from the analysis itself.

The record is what `traceview analyze PATH --format json` stored in the result cache (run here through the
CLI entry point), or what an earlier dashboard stored; the reference for every figure is the dashboard's own
loaded analysis of the same trace.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("streamlit")
pytest.importorskip("altair")

from streamlit.testing.v1 import AppTest  # noqa: E402

import traceview  # noqa: E402
import traceview.dashboards  # noqa: E402
from traceview.cache import results as resultcache  # noqa: E402
from traceview.cli import build_parser, main  # noqa: E402
from traceview.commands.dashboard import record_keys  # noqa: E402
from traceview.dashboards import data, front, overview, warm  # noqa: E402
from traceview.dashboards.config import DashboardConfig, from_env  # noqa: E402
from traceview.dashboards.tabs import TAB_KEY  # noqa: E402
from traceview.units import fmt_share  # noqa: E402

APP = Path(traceview.dashboards.__file__).resolve().parent / "app.py"


@pytest.fixture
def result_cache(tmp_path, monkeypatch) -> Path:
    """A result cache of this test's own (the test session turns it off)."""
    folder = tmp_path / "cache"
    monkeypatch.delenv("TRACEVIEW_NO_RESULT_CACHE", raising=False)
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(folder))
    return folder


def _copy(trace: Path, tmp_path: Path) -> Path:
    """A private copy of a trace (its own files: no other test's analysis of it is loaded in this process)."""
    target = tmp_path / "trace"
    if trace.is_dir():
        shutil.copytree(trace, target)
        return target
    target.mkdir()
    shutil.copy(trace, target / trace.name)
    return target / trace.name


def _analyze(path: Path, tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "analyze.json"
    assert main(["analyze", str(path), "--format", "json", "-o", str(out), *extra]) == 0
    return json.loads(out.read_text())


def _config(path: Path, *extra: str) -> DashboardConfig:
    """What `traceview dashboard PATH EXTRA...` hands its server."""
    args = build_parser("dashboard").parse_args(["dashboard", str(path), *extra])
    keys = record_keys(args)
    return DashboardConfig(path=str(path.resolve()), target=args.target, record_keys=",".join(keys) or None)


def _same_parts(a: overview.Parts, b: overview.Parts) -> None:
    for name in ("split", "steps_frame", "devices"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    for name in ("sentences", "steps", "split_chart", "steps_chart", "advice"):
        assert getattr(a, name) == getattr(b, name), name


CASES = [("sample", "mlp", ()), ("sample", "sharded", ()), ("sample", "mlp", ("--target", "h100-sxm")),
         ("shared", "openxla-xprof/tpu_inference_2.xplane.pb", ()),
         ("shared", "tensorflow-profiler/GPU-multi-worker/34.83.195.179_6003.xplane.pb", ())]


@pytest.mark.parametrize(("where", "rel", "extra"), CASES, ids=[f"{c[1]}{' '.join(c[2])}" for c in CASES])
def test_overview_from_the_stored_record_equals_the_analysis(where, rel, extra, sample_traces, shared_traces,
                                                            result_cache, tmp_path):
    path = _copy((sample_traces if where == "sample" else shared_traces) / rel, tmp_path)
    cli = _analyze(path, tmp_path, *extra)
    config = _config(path, *extra)
    request = data.opening_request(config)
    stamp = request.stamp()
    stored = data.stored_front(config, request, stamp)
    assert stored is not None, "the analyze output stored by the CLI was not found"
    assert stored.record == cli

    view = data.load_view(request)
    loaded = view.front
    assert loaded.record == stored.record           # the dashboard's analysis is the CLI's, field for field
    assert stored.chip == loaded.chip               # the chip as the page names its resources
    assert stored.detected == view.analysis.judged.detected
    assert stored.executions == len(view.analysis.profile.op_executions())   # the header's count, without the op table
    _same_parts(overview.build_parts(stored), overview.build_parts(loaded))
    assert overview.build_parts(stored).steps, "nothing to compare: no steps"


def test_a_record_of_other_inputs_is_not_used(sample_traces, result_cache, tmp_path):
    path = _copy(sample_traces / "mlp", tmp_path)
    _analyze(path, tmp_path)
    config = _config(path)
    request = data.opening_request(config)
    stamp = request.stamp()
    files = [f for f, _, _ in stamp]
    db = data.hardware(None)
    keys = data.record_keys(config)
    assert front.stored(keys, request.path, files, db, ()) is not None
    assert front.stored(keys, request.path + "/", files, db, ()) is None          # another path
    assert front.stored(keys, request.path, files[:-1] + ["x.xplane.pb"], db, ()) is None   # other files
    # another option, or a touched trace: other keys, nothing stored under them
    assert front.stored(data.record_keys(_config(path, "--target", "h100-sxm")), request.path, files, db, ()) is None
    trace = next(path.rglob("*.xplane.pb"))
    trace.touch()
    assert front.stored(data.record_keys(_config(path)), request.path, files, db, ()) is None
    # a corrupt entry is a miss
    entry = resultcache.entry_path(keys[0])
    entry.write_bytes(entry.read_bytes()[:-10])
    assert front.stored(keys[:1], request.path, files, db, ()) is None


def test_no_record_keys_without_the_result_cache(sample_traces, monkeypatch):
    monkeypatch.setenv("TRACEVIEW_NO_RESULT_CACHE", "1")
    assert data.record_keys(_config(sample_traces / "mlp")) == []
    monkeypatch.delenv("TRACEVIEW_NO_RESULT_CACHE")
    assert data.record_keys(_config(sample_traces / "mlp", "--no-cache")) == []


def _open_app(monkeypatch, config: DashboardConfig) -> AppTest:
    for key in list(from_env().to_env()):
        monkeypatch.delenv(key, raising=False)
    for key, value in config.to_env().items():
        monkeypatch.setenv(key, value)
    at = AppTest.from_file(str(APP), default_timeout=300)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_first_page_is_drawn_from_the_record_before_the_analysis(sample_traces, result_cache, tmp_path,
                                                                monkeypatch):
    path = _copy(sample_traces / "sharded", tmp_path)
    cli = _analyze(path, tmp_path)
    config = _config(path)

    def no_read(*args, **kwargs):
        raise AssertionError("the first page waited for the analysis")
    monkeypatch.setattr(traceview, "load", no_read)
    at = _open_app(monkeypatch, config)
    assert not at.error, [e.value for e in at.error]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["MFU"] == fmt_share(cli["summary"]["mfu"])
    assert metrics["devices"] == str(cli["summary"]["active_devices"])
    text = "\n".join(m.value for m in at.markdown)
    assert "Where the time goes" in text and str(path.resolve()) in text

    # Another tab needs the analysis' tables: it loads them (here, once reading is allowed again).
    monkeypatch.setattr(traceview, "load", traceview.api.analysis.load)
    at.session_state[TAB_KEY] = "Ops"
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any({"name", "gap_us", "bound"} <= set(d.value.columns) for d in at.dataframe)


def test_warm_up_reads_the_record_then_the_analysis_and_keeps_its_own(sample_traces, result_cache, tmp_path):
    path = _copy(sample_traces / "mlp", tmp_path)
    config = _config(path)
    keys = data.record_keys(config)
    out = io.StringIO()
    warm.warm(config, out=out, wait_for_page=False)      # no record yet: the analysis, then its record kept
    assert "analysed in" in out.getvalue() and warm.READY in out.getvalue()
    own = resultcache.get(keys[-1])
    assert own is not None and resultcache.get(keys[0]) is None
    view = data.load_view(data.opening_request(config))
    assert json.loads(own.texts[0]) == view.front.record

    # The next opening of the same run: its first page from that record, then the analysis.
    again = io.StringIO()
    data._stored_front.clear()
    warm.warm(config, out=again, wait_for_page=False)
    lines = again.getvalue().splitlines()
    assert "read from the stored analysis" in lines[0] and warm.READY in lines[0]
    assert "analysed in" in lines[1]


def test_a_record_stored_from_a_terminal_is_found(sample_traces, result_cache, tmp_path, monkeypatch):
    """`traceview analyze --format json` run in a terminal (its key says stdout had colour) while the dashboard
    runs elsewhere: the JSON is the same, and the dashboard finds it under the coloured key."""
    from traceview.commands import runner

    path = _copy(sample_traces / "mlp", tmp_path)
    with monkeypatch.context() as patch:
        patch.setattr(runner, "_colour", lambda: True)
        cli = _analyze(path, tmp_path)
    keys = data.record_keys(_config(path))
    assert len(keys) == 3 and len(set(keys)) == 3
    assert resultcache.get(keys[0]) is None and resultcache.get(keys[1]) is not None
    config = _config(path)
    request = data.opening_request(config)
    found = data.stored_front(config, request, request.stamp())
    assert found is not None and found.record == cli
