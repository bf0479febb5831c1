"""The dashboard, driven through Streamlit's own AppTest, checked against the CLI's numbers.

The reference for every number is `traceview analyze PATH --format json`
run through the CLI entry point (traceview.cli.main), so the page and the
command line must agree; HLO text is checked against XLA's own dump text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("altair")

from streamlit.testing.v1 import AppTest  # noqa: E402

import traceview  # noqa: E402
import traceview.dashboards  # noqa: E402
from traceview.cli import main  # noqa: E402
from traceview.dashboards.config import DashboardConfig, from_env  # noqa: E402
from traceview.dashboards.hlo_format import instruction_text  # noqa: E402
from traceview.dashboards.tabs import TAB_KEY  # noqa: E402
from traceview.errors import UserError  # noqa: E402
from traceview.render.escape import markdown_text  # noqa: E402
from traceview.units import (  # noqa: E402
    fmt_pct,
    fmt_share,  # noqa: E402
    fmt_time_us,
)

APP = Path(traceview.dashboards.__file__).resolve().parent / "app.py"
BOUNDS = ("compute", "memory", "communication", "unknown", "idle")


def cli_json(path: Path, tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / f"cli{len(list(tmp_path.glob('cli*.json')))}.json"
    assert main(["analyze", str(path), "--format", "json", "-o", str(out), *extra]) == 0
    return json.loads(out.read_text())


def open_app(monkeypatch, **config) -> AppTest:
    for key in list(from_env().to_env()):
        monkeypatch.delenv(key, raising=False)
    for key, value in DashboardConfig(**config).to_env().items():
        monkeypatch.setenv(key, value)
    at = AppTest.from_file(str(APP), default_timeout=300)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def show(at: AppTest, tab: str) -> AppTest:
    """Open a tab, as a click on it does: only the open tab's content runs."""
    at.session_state[TAB_KEY] = tab
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def page_text(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [e.value for e in at.error]
    return "\n".join(parts)


def shown_warnings(at: AppTest) -> list[str]:
    boxes = [e for e in at.expander if re.fullmatch(r"\d+ warnings?", e.label)]
    return [m.value for box in boxes for m in box.markdown]


def op_table(at: AppTest):
    tables = [d.value for d in at.dataframe if {"name", "gap_us", "bound"} <= set(d.value.columns)]
    assert tables, "no op table on the page"
    return tables[0]


def check_against_cli(at: AppTest, cli: dict) -> None:
    """MFU, the bound split and the top gap op on the page are the CLI's; the op table has every op.
    Leaves the Overview open."""
    assert len(op_table(show(at, "Ops"))) == len(cli["ops"])
    show(at, "Overview")
    assert not at.dataframe or not any("gap_us" in d.value.columns for d in at.dataframe)   # Ops is closed
    s = cli["summary"]
    assert metrics(at)["projected MFU" if s.get("projected") else "MFU"] == fmt_share(s["mfu"])
    text = page_text(at)
    total = sum(s["time_by_bound_us"].values())
    split = ", ".join(f"{b} {fmt_pct(s['time_by_bound_us'][b] / total)}" for b in BOUNDS)
    projected = f" (projected onto {cli['target']['name']})" if cli["target"].get("projected") else ""
    assert f"**Where the time goes**{projected} ({split})" in text
    # the bar under it (HTML, dashboards/bars.py): a box per bound with time, its tooltip the CLI's figures
    bar = next(h.proto.body for h in at.get("html") if 'aria-label="time by bound' in h.proto.body)
    for b in BOUNDS:
        box = f'title="{b}: {s["time_by_bound_us"][b] / 1000:,.3f} ms ({fmt_pct(s["time_by_bound_us"][b] / total)})"'
        assert (box in bar) == (s["time_by_bound_us"][b] > 0), (b, box)
    # ranked by gain: what the device would save (for async work at most the time it waited)
    top = max((o for o in cli["ops"] if o.get("gain_us") is not None), key=lambda o: o["gain_us"])
    # the ops list's first item ("1. **op** (module): ..."; the advice list above it reads "1. **title**: ...")
    first_gap = next(m.value for m in at.markdown if re.match(r"1\. \*\*[^*]+\*\* \(", m.value))
    shown, how = ((top["projected_time_us"], "projected") if s.get("projected")
                  else (top["judged_time_us"], "measured"))
    assert first_gap.startswith(f"1. **{markdown_text(top['name'])}** ({markdown_text(top['module'])}): "
                                f"{fmt_time_us(shown)} {how}, {fmt_time_us(top['roofline_time_us'])} at the ")
    assert f"({fmt_time_us(top['gain_us'])} to gain" in first_gap.splitlines()[0]
    assert f"{top['bound']}-bound" in first_gap.splitlines()[0]


def test_sample_trace_matches_cli(sample_traces, tmp_path, monkeypatch):
    path = sample_traces / "transformer"
    at = open_app(monkeypatch, path=str(path))
    assert not at.error, [e.value for e in at.error]
    check_against_cli(at, cli_json(path, tmp_path))

    # Re-target: the page's numbers and warnings are those of `analyze --target h100-sxm`.
    at.sidebar.selectbox(key="target").set_value("h100-sxm").run()
    assert not at.exception and not at.error
    cli = cli_json(path, tmp_path, "--target", "h100-sxm")
    check_against_cli(at, cli)
    shown = shown_warnings(at)
    assert sorted(shown) == sorted(f"- {w}" for w in cli["warnings"])   # none left from the detected cpu target

    # Filter the op table by bound and name.
    show(at, "Ops")
    at.multiselect(key="filter_bound").set_value(["memory"]).run()
    table = op_table(at)
    assert set(table["bound"]) == {"memory"}
    assert len(table) == sum(o["bound"] == "memory" for o in cli["ops"])
    at.text_input(key="filter_name").set_value("fusion").run()
    table = op_table(at)
    assert len(table) == sum(o["bound"] == "memory" and "fusion" in o["name"] for o in cli["ops"])

    # The filters are kept while another tab is open.
    show(at, "Overview")
    assert len(op_table(show(at, "Ops"))) == len(table)

    # Select an op: the detail panel shows its CLI numbers and its HLO line.
    op = sorted((o for o in cli["ops"] if o["name"].startswith("dot")), key=lambda o: -o["gap_us"])[0]
    show(at, "Op detail")
    at.selectbox(key="tv_op_pick").set_value(f"{op['name']}  ·  {op['module']}").run()
    assert not at.exception
    m = metrics(at)
    assert (m["gap"], m["roofline"]) == (fmt_time_us(op["gap_us"]), fmt_time_us(op["roofline_time_us"]))
    assert any(x.value.startswith(f"#### `{op['name']}`") and f"[{op['bound']}-bound]" in x.value
               for x in at.markdown)
    assert any(c.value.startswith(f"%{op['name']} = ") and " dot(" in c.value for c in at.code)
    terms = at.table[0].value
    assert list(terms.index) == ["T_compute", "T_memory", "T_comm", "roofline", "measured"] + (
        ["projected"] if op.get("projected_time_us") is not None else []) + ["gap", "gain"]
    assert terms.loc["gain", "time"] == fmt_time_us(op["gain_us"])
    assert terms.loc["roofline", "time"] == fmt_time_us(op["roofline_time_us"])
    assert terms.loc["T_compute", "time"] == fmt_time_us(op["t_compute_us"])

    # A fusion: its fused computation is listed, and its instructions' FLOPs add up to the fusion's.
    fusion = next(o for o in cli["ops"] if o.get("opcode") == "fusion" and (o.get("flops") or 0) > 0)
    at.selectbox(key="tv_op_pick").set_value(f"{fusion['name']}  ·  {fusion['module']}").run()
    inside = next(d.value for d in at.dataframe if {"opcode", "flops", "transcendentals"} <= set(d.value.columns))
    assert inside["flops"].sum() * fusion["occurrences"] == pytest.approx(fusion["flops"], rel=1e-9)
    assert any(e.label.startswith("HLO of ") for e in at.expander)


def test_real_tpu_trace_matches_cli(shared_traces, tmp_path, monkeypatch):
    path = shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb"
    at = open_app(monkeypatch, path=str(path))
    assert not at.error, [e.value for e in at.error]
    cli = cli_json(path, tmp_path)
    assert cli["target"]["name"] == "tpu-v6e"
    check_against_cli(at, cli)
    assert metrics(at)["devices"] == "4"
    # Communication-bound host offload copies lead; the sentence names the link.
    # the ops list's first item ("1. **op** (module): ..."; the advice list above it reads "1. **title**: ...")
    first_gap = next(m.value for m in at.markdown if re.match(r"1\. \*\*[^*]+\*\* \(", m.value))
    assert "communication-bound" in first_gap.splitlines()[0] and "PCIe roofline" in first_gap.splitlines()[0]

    at.sidebar.selectbox(key="target").set_value("tpu-v5p").run()
    assert not at.exception and not at.error
    check_against_cli(at, cli_json(path, tmp_path, "--target", "tpu-v5p"))


def test_hlo_line_is_xlas_own_text(sample_traces):
    """The op-detail HLO line equals XLA's dump text of the same instruction (metadata aside)."""
    analysis = traceview.load(sample_traces / "transformer").pipeline
    dump = next((sample_traces / "transformer" / "hlo").glob("*after_optimizations.txt")).read_text()
    reference = {}
    for line in dump.splitlines():
        m = re.match(r"\s*(?:ROOT )?%(\S+) = ", line)
        if m:
            reference.setdefault(m.group(1), line.strip())

    def norm(text: str) -> tuple[str, frozenset]:
        text = re.sub(r"/\*index=\d+\*/", "", re.split(r", (?:metadata|backend_config|frontend_attributes)=", text)[0])
        head, _, rest = text.partition("), ")
        return head, frozenset(_top_level_split(rest))   # attribute order is not meaningful

    module = next(m for m in analysis.hlo.every if m.name == "jit_train_step")
    compared = 0
    for comp in module.computations.values():
        for inst in comp.instructions:
            if inst.name in reference:
                assert norm(instruction_text(inst, comp)) == norm(reference[inst.name]), inst.name
                compared += 1
    assert compared > 500


def _top_level_split(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch in "{([" and 1 or 0
        depth -= ch in "})]" and 1 or 0
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return [p for p in parts + [current.strip()] if p]


@pytest.mark.parametrize("case", ["missing", "empty_dir", "corrupt", "garbage_name"])
def test_bad_input_is_one_line_on_the_page(case, tmp_path, monkeypatch):
    if case == "missing":
        path, expected = tmp_path / "nope", "no such file or directory"
    elif case == "empty_dir":
        path, expected = tmp_path, "no profiler trace found"
    elif case == "corrupt":
        path = tmp_path / "host.xplane.pb"
        path.write_bytes(b"\x0a\xff\xff\xff\x0fthis is not an xspace")
        expected = "host.xplane.pb"
    else:
        path = tmp_path / "notes.txt"
        path.write_text("hello")
        expected = "not a trace file"
    at = open_app(monkeypatch, path=str(path))
    assert len(at.error) == 1 and expected in at.error[0].value
    assert "\n" not in at.error[0].value and "Traceback" not in at.error[0].value


def test_trace_without_hlo_says_so(shared_traces, monkeypatch):
    path = shared_traces / "tensorflow-profiler" / "GPU-multi-worker" / "34.83.195.179_6003.xplane.pb"
    at = open_app(monkeypatch, path=str(path))
    assert not at.error
    assert any("no HLO modules found" in w for w in shown_warnings(at))
    show(at, "Op detail")
    at.selectbox(key="tv_op_pick").set_value(at.selectbox(key="tv_op_pick").options[0]).run()
    assert not at.exception
    assert any("no HLO instruction of that name" in i.value for i in at.info)


def test_compare_two_runs_of_a_log_dir(sample_traces, monkeypatch):
    at = open_app(monkeypatch, path=str(sample_traces), run="mlp_slow")
    assert not at.error, [e.value for e in at.error]
    show(at, "Compare")
    at.selectbox(key="compare_run").set_value("mlp").run()
    assert not at.exception and not at.error
    diff = traceview.diff(sample_traces, sample_traces, base_run="mlp", run="mlp_slow")
    assert metrics(at)["ops changed"] == str(diff.summary.ops.changed)

    # Any other trace, by path; a bad one is an error line in the tab, the rest of the page stays.
    at.selectbox(key="compare_run").set_value("(another path)").run()
    at.text_input(key="compare_path").set_value(str(sample_traces / "mlp")).run()
    assert not at.exception and not at.error
    assert metrics(at)["ops changed"] == str(diff.summary.ops.changed)
    at.text_input(key="compare_path").set_value("/no/such/trace").run()
    assert [e.value for e in at.error] == ["/no/such/trace: no such file or directory"]
    assert "device op executions" in page_text(at)     # the header above the tabs stays
    assert "MFU" in metrics(show(at, "Overview"))


def test_upload_is_saved_and_read_like_a_path(sample_traces, tmp_path, monkeypatch):
    from traceview.dashboards.data import LoadRequest, load_view, save_upload

    original = next((sample_traces / "mlp").rglob("*.xplane.pb"))
    saved = save_upload("../../evil/localhost.xplane.pb", original.read_bytes())
    assert saved.name == "localhost.xplane.pb" and "evil" not in str(saved)
    view = load_view(LoadRequest(path=str(saved)))
    cli = cli_json(original, tmp_path)
    assert view.summary["mfu"] == pytest.approx(cli["summary"]["mfu"], rel=1e-9)
    with pytest.raises(UserError, match="not a trace file"):
        save_upload("model.onnx", b"x")
    with pytest.raises(UserError, match="empty"):
        save_upload("a.xplane.pb", b"")


def test_config_round_trips_through_the_environment():
    config = DashboardConfig(path="/x/y", run="r1", target="tpu-v6e", hardware_file="hw.json", hlo="dump",
                             stage="before")
    assert from_env(config.to_env()) == config
    assert from_env({}) == DashboardConfig()


def test_cli_dashboard_command(monkeypatch, capsys, sample_traces):
    import importlib.util

    from traceview.commands import dashboard

    parser_args = ["dashboard", str(sample_traces / "transformer"), "--port", "8123"]
    args = __import__("traceview.cli", fromlist=["build_parser"]).build_parser().parse_args(parser_args)
    command = dashboard.streamlit_command(args)
    assert command[1:3] == ["-m", "traceview.dashboards.serve"]   # Streamlit's CLI, with the trace warmed beside it
    assert command[command.index("--server.address") + 1] == "127.0.0.1"
    assert command[command.index("--server.headless") + 1] == "true"
    assert command[command.index("--browser.gatherUsageStats") + 1] == "false"
    assert Path(command[command.index("run") + 1]) == APP and APP.is_file()

    assert main(["dashboard", "/no/such/trace"]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert main(["dashboard", str(sample_traces / "transformer"), "--target", "nochip"]) == 2
    assert "unknown target 'nochip'" in capsys.readouterr().err

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "streamlit" else real(name, *a))
    assert main(["dashboard", str(sample_traces / "transformer")]) == 2
    assert "pip install 'traceview[dashboard]'" in capsys.readouterr().err


def test_timeline_keeps_the_longest_ops_and_true_gaps(shared_traces):
    """Drawn bars are the window's longest leaf ops; no idle bar overlaps an op of its lane."""
    import numpy as np

    from traceview.dashboards.data import LoadRequest, load_view
    from traceview.dashboards.timeline import timeline

    view = load_view(LoadRequest(path=str(shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb")))
    raw = view.analysis.profile.op_executions()
    step = int(view.analysis.steps["step"].iloc[3])
    tl = timeline(view, step=step, limit=20)
    window = view.analysis.steps.set_index("step").loc[step]
    lo, hi = int(window["start_ps"]), int(window["start_ps"] + window["time_ps"])
    ends = raw["start_ps"] + raw["duration_ps"]
    leaf = raw[(raw["self_ps"] == raw["duration_ps"]) & (ends > lo) & (raw["start_ps"] < hi)]
    assert tl.ops_in_window == len(leaf) > 20 and len(tl.bars) == 20
    longest = np.sort(leaf["duration_ps"].to_numpy())[::-1]
    assert np.allclose(np.sort(tl.bars["duration_us"].to_numpy())[::-1], longest[:20] / 1e6)
    assert (tl.bars["start_ms"] < tl.window_ms).all() and (tl.bars["end_ms"] > 0).all()
    assert set(tl.bars["lane"]) <= {"TPU:0", "TPU:1", "TPU:2", "TPU:3"}
    for gap in tl.idle.itertuples():
        on_lane = leaf[leaf["device"].astype(str).str.endswith(gap.lane)]
        starts = (on_lane["start_ps"].to_numpy() - lo) / 1e9
        stops = starts + on_lane["duration_ps"].to_numpy() / 1e9
        assert not ((starts < gap.end_ms - 1e-9) & (stops > gap.start_ms + 1e-9)).any()
    assert len(tl.idle) and tl.idle["duration_us"].min() > 0


def _selection_script():
    import streamlit as st

    from traceview.dashboards import selection

    selection.select_if_changed("chart", ("m", "a"))      # a click on the chart selects op a
    first = selection.selected()
    selection.select("m", "b")                # then op b is picked elsewhere
    selection.select_if_changed("chart", ("m", "a"))      # the chart reports its old click again on the rerun
    second = selection.selected()
    selection.select_if_changed("chart", ("m", "c"))      # a new click wins
    st.write(repr((first, second, selection.selected())))


def test_a_stale_chart_click_does_not_override_a_later_pick():
    from traceview.dashboards.roofline_view import clicked_op

    at = AppTest.from_function(_selection_script).run()
    assert not at.exception
    assert at.markdown[0].value == repr((("m", "a"), ("m", "b"), ("m", "c")))

    class Event:
        selection = {"op": [{"module": "jit_f", "op": "fusion.3"}]}
    assert clicked_op(Event()) == ("jit_f", "fusion.3")
    Event.selection = {"op": []}
    assert clicked_op(Event()) is None and clicked_op(None) is None


def test_pick_run_and_host_of_a_log_dir(sample_traces, tmp_path, monkeypatch):
    import shutil

    trace = next((sample_traces / "mlp").rglob("*.xplane.pb"))
    run = tmp_path / "logs" / "plugins" / "profile" / "2026_01_02_03_04_05"
    run.mkdir(parents=True)
    for host in ("worker0", "worker1"):   # two hosts of one run (copies in a temp dir)
        shutil.copy(trace, run / f"{host}.xplane.pb")
    at = open_app(monkeypatch, path=str(tmp_path / "logs"))
    assert not at.error, [e.value for e in at.error]
    assert "hosts: worker0, worker1" in page_text(at)
    at.sidebar.selectbox(key="host").set_value("worker1").run()
    assert not at.exception and not at.error
    assert "hosts: worker1 " in page_text(at)

    at = open_app(monkeypatch, path=str(sample_traces), run="mlp_slow")
    assert "run `mlp_slow`" in page_text(at)
    at.sidebar.selectbox(key="run").set_value("transformer").run()
    assert not at.exception and not at.error
    assert "run `transformer`" in page_text(at)
    check_against_cli(at, cli_json(sample_traces, tmp_path, "--run", "transformer"))


@pytest.mark.parametrize("layout", ["file", "log dir of two runs"])
def test_warm_up_fills_the_cache_the_first_page_reads(layout, sample_traces, tmp_path, monkeypatch):
    """`traceview dashboard` reads and analyses the trace before a browser opens the page: the page's first
    run then reads nothing (a fresh copy of the trace, so no other test's cache entry can serve it)."""
    import io
    import shutil

    from traceview.dashboards import warm

    trace = next((sample_traces / "mlp").rglob("*.xplane.pb"))
    if layout == "file":
        path = tmp_path / "host.xplane.pb"
        shutil.copy(trace, path)
    else:
        path = tmp_path / "logs"
        for run in ("2026_01_01_00_00_00", "2026_01_02_00_00_00"):
            (path / "plugins" / "profile" / run).mkdir(parents=True)
            shutil.copy(trace, path / "plugins" / "profile" / run / "host.xplane.pb")
    config = DashboardConfig(path=str(path))
    out = io.StringIO()
    warm.warm(config, out=out, wait_for_page=False)
    assert warm.READY in out.getvalue()

    def no_read(*args, **kwargs):
        raise AssertionError("the page read the trace again")
    monkeypatch.setattr(traceview, "load", no_read)
    at = open_app(monkeypatch, path=str(path))
    assert not at.error, [e.value for e in at.error]
    assert "MFU" in metrics(at)
    if layout != "file":
        assert "run `2026_01_02_00_00_00`" in page_text(at)     # the newest run, as the sidebar opens it


def test_warm_up_of_a_bad_trace_says_so_in_one_line(tmp_path):
    import io

    from traceview.dashboards import warm

    bad = tmp_path / "host.xplane.pb"
    bad.write_bytes(b"\x0a\xff\xff\xff\x0fnot an xspace")
    out = io.StringIO()
    warm.warm(DashboardConfig(path=str(bad)), out=out, wait_for_page=False)
    assert "could not pre-load" in out.getvalue() and warm.READY not in out.getvalue()
    assert len(out.getvalue().strip().splitlines()) == 1 and "Traceback" not in out.getvalue()


def test_model_tab_matches_the_scopes_cli(sample_traces, tmp_path, monkeypatch, capsys):
    """The Model tab's totals, scopes and op counts are `traceview scopes --format json`'s."""
    path = sample_traces / "transformer"
    assert main(["scopes", str(path), "--format", "json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    at = show(open_app(monkeypatch, path=str(path)), "Model")
    text = page_text(at)
    assert f"**{fmt_time_us(cli['total_us'])}** of op time by named scope: **{fmt_pct(cli['attributed_share'])}**" \
        in text
    box = next(s for s in at.selectbox if s.label == "Scope")
    assert list(box.options) == ["/".join(n["path"]) for n in cli["nodes"]]
    for scope in ("train_step/Transformer/layer_0/mlp", "train_step/sgd"):
        box = next(s for s in at.selectbox if s.label == "Scope")
        box.set_value(scope).run()
        node = next(n for n in cli["nodes"] if "/".join(n["path"]) == scope)
        assert f"{node['ops']} ops under {scope}" in page_text(at)


def test_an_op_picked_in_the_model_tab_opens_in_op_detail(sample_traces, monkeypatch):
    at = show(open_app(monkeypatch, path=str(sample_traces / "transformer")), "Model")
    at.session_state["tv_model_ops"] = {"selection": {"rows": [1], "columns": []}}   # a click on the 2nd row
    at.run()
    assert not at.exception
    listed = next(d.value for d in at.dataframe if "op_name" in d.value.columns)
    module, op = listed.iloc[1]["module"], listed.iloc[1]["op"]
    assert f"{op} is selected" in page_text(at)
    show(at, "Op detail")
    assert any(op in str(s.value) for s in at.selectbox), [s.value for s in at.selectbox]
    assert module == "jit_train_step"


def test_host_lanes_add_up_to_each_devices_busy_time(shared_traces):
    """The pod timeline's aggregated lanes: per host, busy share x slice x devices summed over the slices is
    the union of its devices' leaf ops (merged here by hand, interval by interval)."""
    from traceview.dashboards.data import LoadRequest, load_view
    from traceview.dashboards.timeline import host_lanes, is_pod

    view = load_view(LoadRequest(path=str(shared_traces / "AMD-AGI-TraceLens" / "jax08_gemm" / "tw003.xplane.pb")))
    raw = view.analysis.profile.op_executions()
    lanes = host_lanes(view, slices=50)
    assert not is_pod(view) and lanes.hosts == [str(h) for h in raw["host"].unique()]
    leaf = raw[raw["self_ps"] == raw["duration_ps"]]
    expected = 0
    for _, rows in leaf.groupby("device", observed=True):
        end = None
        for s, d in sorted(zip(rows["start_ps"], rows["duration_ps"])):
            e = s + d
            if end is None or s > end:
                expected += max(e - s, 0) if e > s else 0
                end = e if e > s else end
            elif e > end:
                expected += e - end
                end = e
    cells = lanes.cells
    got = ((cells["busy"] * (cells["end_ms"] - cells["start_ms"]) * cells["devices"]).sum()) * 1e9
    assert len(cells) == 50 * len(lanes.hosts) and cells["busy"].between(0, 1).all()
    assert abs(got - expected) <= 1e-6 * expected and expected > 0


def test_whatif_table_writes_each_figure_as_the_text_view_does(sample_traces):
    """The What if tab's table: the change from today, tokens/s/chip and MFU in the text view's forms
    (render.whatif), and today's own row with no dominant change as "-", never Python's "None"."""
    from traceview.dashboards.whatif import _table
    from traceview.render.whatif import change_text, tokens_text, whatif_json
    from traceview.units import fmt_share

    record = whatif_json(traceview.load(sample_traces / "sharded").whatif())
    table = _table(record)
    today = record["baseline"]["step_time_us"]
    assert len(table) == len(record["configs"]) > 2
    for (_, row), config in zip(table.iterrows(), record["configs"]):
        assert row["vs today"] == change_text(config["step_time_us"], today)
        assert row["tokens/s/chip"] == tokens_text(config["tokens_per_s_per_chip"])
        assert row["MFU"] == fmt_share(config["mfu"])
        assert row["dominant change"] == (config["dominant_change"] or "-")
    assert "None" not in table.astype(str).to_numpy() and "+0.0%" in set(table["vs today"])
    assert (table["dominant change"] == "-").sum() >= 1          # today's own configuration changed nothing
