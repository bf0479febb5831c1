"""Every hostile input issue 10 listed ("What was seen"), as a regression test.

Each gives exit 2 with one line naming the file, or a correct result with a
warning; none may crash, hang, take gigabytes or be accepted with impossible
numbers.
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
import os
import xml.etree.ElementTree as ET
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

import traceview.parsers.compressed as compressed
from traceview.cli import main
from traceview.errors import HloError, UserError
from traceview.parsers.hlo.checks import check_module
from traceview.parsers.hlo.proto import modules_from_trace_protos, parse_hlo_proto
from traceview.parsers.hlo.replica_groups import parse_replica_groups
from traceview.parsers.hlo.schema import message_class
from traceview.parsers.hlo.text import parse_hlo_text
from traceview.parsers.profile import Device
from traceview.parsers.xspace.reader import read_xplane
from traceview.parsers.xspace.schema import XSpace

REPO = Path(__file__).resolve().parents[2]
SAMPLE_TRACE = REPO / "sample_traces/mlp/plugins/profile/mlp/localhost.xplane.pb"


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def assert_one_line_error(rc: int, err: str, name: str) -> None:
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceview: error:") and name in lines[0], err


# ------------------------------------------------------------------ exit codes


def test_internal_error_is_one_line_and_exit_3(monkeypatch):
    from traceview import __version__, cli

    def boom(args):
        raise KeyError("something traceview did not expect\nsecond line")

    args = cli.build_parser().parse_args(["hardware"])
    args.handler = boom
    monkeypatch.setattr(cli.argparse.ArgumentParser, "parse_args", lambda self, argv=None: args)
    rc, _, err = run_cli("hardware")
    assert rc == 3
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"internal error in traceview {__version__}: KeyError")
    assert lines[0].endswith("run with --debug for the traceback and please report it")
    args.debug = True
    rc, _, err = run_cli("hardware")
    assert rc == 3 and "Traceback" in err


def test_ci_docs_name_every_exit_code():
    text = (REPO / "docs/ci.md").read_text()
    for row in ("| 0 |", "| 1 |", "| 2 |", "| 3 |"):
        assert row in text
    assert "internal error in traceview X.Y" in text


# ------------------------------------------------------------------ the event decoder and plane stats


def _space(durations=(10,), offsets=(5,), timestamp_ns=0, line_name="THREAD", stats: dict | None = None) -> XSpace:
    space = XSpace()
    plane = space.planes.add()
    plane.name = "/device:GPU:0"
    plane.event_metadata[1].id = 1
    plane.event_metadata[1].name = "fusion.1"
    for k, (name, value) in enumerate((stats or {}).items(), start=1):
        plane.stat_metadata[k].id = k
        plane.stat_metadata[k].name = name
        st = plane.stats.add()
        st.metadata_id = k
        if isinstance(value, str):
            st.str_value = value
        else:
            st.double_value = value
    line = plane.lines.add()
    line.name = "Stream #1(" + line_name + ")"
    line.timestamp_ns = timestamp_ns
    for d, o in zip(durations, offsets):
        e = line.events.add()
        e.metadata_id = 1
        e.duration_ps = d
        e.offset_ps = o
    return space


def _write(tmp_path: Path, space: XSpace | bytes, name: str = "host.xplane.pb") -> Path:
    path = tmp_path / name
    path.write_bytes(space if isinstance(space, bytes) else space.SerializeToString())
    return path


@pytest.mark.parametrize("bad", [
    {"durations": (10, -5), "offsets": (5, 20)},
    {"durations": (10, (1 << 63) - 1), "offsets": (5, 20)},
    {"durations": (10, 10), "offsets": (5, (1 << 63) - 1)},
    {"durations": (10, 10), "offsets": (5, -20)},
])
def test_impossible_event_times_are_dropped_with_a_counted_warning(tmp_path, bad):
    data = read_xplane(_write(tmp_path, _space(**bad)))
    assert len(data.ops) == 1 and (data.ops["duration_ps"] >= 0).all() and (data.ops["start_ps"] >= 0).all()
    assert any("dropped 1 event(s) with negative or overflowing times" in w for w in data.warnings)


def test_a_line_starting_past_any_session_is_dropped(tmp_path):
    data = read_xplane(_write(tmp_path, _space(durations=(10, 10), offsets=(0, 5), timestamp_ns=-(1 << 63))))
    assert data.ops.empty and any("dropped 2 event(s)" in w for w in data.warnings)


def test_impossible_times_never_reach_the_report(tmp_path):
    path = _write(tmp_path, _space(durations=(10_000, -10_000, (1 << 63) - 1), offsets=(0, 20_000, 30_000)))
    rc, out, err = run_cli("analyze", str(path), "--format", "json")
    assert rc == 0, err
    report = json.loads(out)
    assert all(op["self_time_us"] >= 0 for op in report["ops"])
    assert report["summary"]["device_time_us"] >= 0
    assert all(s["time_us"] >= 0 for s in report["summary"].get("steps", []))


def test_plane_stat_of_an_unexpected_type_is_read_by_name():
    dev = Device.from_plane_stats("h/GPU:0", "h", "GPU", {"compute_cap_major": "9.5", "compute_cap_minor": "x",
                                                         "clock_rate": "fast", "core_count": float("nan")})
    assert dev.compute_capability == "9.0" and dev.clock_hz is None and dev.core_count is None


def test_invalid_utf8_in_one_thread_name_costs_that_name_only(tmp_path):
    raw = _space(line_name="worker").SerializeToString().replace(b"worker", b"wo\xe2\x82er")
    data = read_xplane(_write(tmp_path, raw))
    assert len(data.ops) == 1 and "wo\ufffder" in data.ops["line"].iloc[0]
    assert any("not valid UTF-8" in w for w in data.warnings)


def test_xspace_whose_planes_tag_is_a_varint_is_an_error(tmp_path):
    """The first field's tag rewritten as a varint: protobuf keeps it as an unknown field and reads on
    through garbage (here, into its UTF-8 repair path); traceview refuses the file as protobuf does."""
    from google.protobuf.message import DecodeError

    data = SAMPLE_TRACE.read_bytes()
    assert data[0] == 0x0A  # field 1 (planes), wire type 2
    path = _write(tmp_path, b"\x08" + data[1:])
    with pytest.raises(DecodeError):
        XSpace.FromString(path.read_bytes())
    rc, _, err = run_cli("analyze", str(path), "--no-cache")
    assert_one_line_error(rc, err, str(path))
    assert "field 1 (planes) has wire type 0" in err


def test_non_regular_files_named_like_traces_are_warned_about(tmp_path):
    from traceview.parsers.discover import find_run

    run = tmp_path / "run"
    run.mkdir()
    _write(run, _space(), "good.xplane.pb")
    (run / "dir.xplane.pb").mkdir()
    os.mkfifo(run / "fifo.xplane.pb")
    (run / "gone.xplane.pb").symlink_to(run / "nowhere")
    found = find_run(tmp_path)
    assert [f.name for f in found.files] == ["good.xplane.pb"]
    text = " ".join(found.warnings)
    assert "a directory" in text and "a FIFO" in text and "a dangling symbolic link" in text
    with pytest.raises(UserError, match="FIFO"):
        find_run(run / "fifo.xplane.pb")


# ------------------------------------------------------------------ decompression bombs


@pytest.fixture
def small_limit(monkeypatch):
    """The decompression bound lowered to 8 MiB: a bomb costs megabytes here, not the real 2 GiB."""
    monkeypatch.setattr(compressed, "PROTO_LIMIT", 8 << 20)
    return 8 << 20


def test_real_bound_is_what_protobuf_can_hold():
    assert compressed.PROTO_LIMIT == 2 << 30


def _gzip_zeros(size: int) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as fh:
        for _ in range(size >> 20):
            fh.write(bytes(1 << 20))
    return buf.getvalue()


def test_xplane_gzip_bomb_stops_at_the_bound(tmp_path, small_limit):
    path = tmp_path / "host.xplane.pb.gz"
    path.write_bytes(_gzip_zeros(64 << 20))
    assert path.stat().st_size < 200_000
    rc, _, err = run_cli("analyze", str(path))
    assert_one_line_error(rc, err, str(path))
    assert "larger than" in err


@pytest.mark.parametrize("name,pack", [
    ("module.hlo.pb.gz", lambda d: gzip.compress(d)),
    ("module.hlo.txt.xz", lambda d: lzma.compress(d, preset=1)),
])
def test_hlo_bombs_stop_at_the_bound(tmp_path, small_limit, name, pack):
    path = tmp_path / name
    path.write_bytes(pack(b"HloModule m\n" + b"\n" * (32 << 20)))
    rc, _, err = run_cli("hlo", str(path))
    assert_one_line_error(rc, err, name)
    assert "larger than" in err


def test_corrupt_gzip_hlo_text_is_a_clean_error(tmp_path):
    path = tmp_path / "m.txt.gz"
    path.write_bytes(gzip.compress(b"HloModule m\n")[:-9] + b"\x00" * 9)
    rc, _, err = run_cli("hlo", str(path))
    assert_one_line_error(rc, err, "m.txt.gz")


def test_trace_json_gzip_bomb_stops_at_the_bound(tmp_path, monkeypatch):
    import traceview.parsers.trace_json.text as trace_json_text

    monkeypatch.setattr(trace_json_text, "JSON_LIMIT", 8 << 20)
    path = tmp_path / "host.trace.json.gz"
    path.write_bytes(_gzip_zeros(64 << 20))
    rc, _, err = run_cli("analyze", str(path), "--no-cache")
    assert_one_line_error(rc, err, str(path))
    assert "larger than 8 MiB" in err


@pytest.mark.parametrize("content, words", [
    (b"", "empty"),
    (b"{", "not readable trace JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"traceEvents": 3}', "no traceEvents list"),
    (b'{"traceEvents": []}', "no events"),
    (b'{"traceEvents": [{"ph": "X", "ts": -1, "dur": 1}, {"ph": "X", "ts": "x"}, 7, null]}',
     "no event has a usable time (2 dropped"),
    (b"\xff\xfe{}", "not readable trace JSON"),
])
def test_bad_trace_json_is_a_one_line_error(tmp_path, content, words):
    path = tmp_path / "host.trace.json"
    path.write_bytes(content)
    rc, _, err = run_cli("analyze", str(path), "--no-cache")
    assert_one_line_error(rc, err, str(path))
    assert words in err


def test_trace_json_events_with_impossible_times_are_dropped_with_a_warning(tmp_path):
    from traceview.parsers.trace_json.reader import read_trace_json

    events = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:TPU:0"}},
              {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "XLA Ops"}},
              {"ph": "X", "pid": 1, "tid": 2, "ts": 1.5, "dur": 2, "name": "fusion.1", "args": {"hlo_category": 7}},
              {"ph": "X", "pid": 1, "tid": 2, "ts": 1e300, "dur": 2, "name": "fusion.2"},
              {"ph": "X", "pid": 1, "tid": 2, "ts": 5, "dur": -1, "name": "fusion.3"},
              {"ph": "X", "pid": [1], "tid": {"a": 1}, "ts": 5, "dur": 1, "name": {"x": 1}, "args": [1]}]
    path = tmp_path / "h.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    data = read_trace_json(path)
    assert data.ops["op"].tolist() == ["fusion.1"] and data.ops["start_ps"].tolist() == [1_500_000]
    assert data.ops["category"].tolist() == ["7"]
    assert any("dropped 2 event(s)" in w for w in data.warnings)
    assert data.host_events["thread"].astype(str).tolist() == ["{'a': 1}"]


# ------------------------------------------------------------------ HLO readers and the cost model

MODULE = """HloModule m

{extra}
ENTRY %main (p: f32[8]) -> f32[8] {{
  %p = f32[8]{{0}} parameter(0)
  ROOT %r = {root}
}}
"""


def _hlo(root: str = "f32[8]{0} add(f32[8]{0} %p, f32[8]{0} %p)", extra: str = "") -> str:
    return MODULE.format(root=root, extra=extra)


def test_valid_module_parses():
    module = parse_hlo_text(_hlo())
    assert module.entry == "main"


@pytest.mark.parametrize("extra,root", [
    ("%f (x: f32[8]) -> f32[8] {\n  %x = f32[8]{0} parameter(0)\n"
     "  ROOT %y = f32[8]{0} fusion(f32[8]{0} %x), kind=kLoop, calls=%f\n}\n",
     "f32[8]{0} fusion(f32[8]{0} %p), kind=kLoop, calls=%f"),
    ("%a (x: f32[8]) -> f32[8] {\n  %x = f32[8]{0} parameter(0)\n  ROOT %y = f32[8]{0} call(f32[8]{0} %x), to_apply=%b\n}\n"
     "%b (x: f32[8]) -> f32[8] {\n  %x = f32[8]{0} parameter(0)\n  ROOT %y = f32[8]{0} call(f32[8]{0} %x), to_apply=%a\n}\n",
     "f32[8]{0} call(f32[8]{0} %p), to_apply=%a"),
    ("%c (x: f32[8]) -> pred[] {\n  %x = f32[8]{0} parameter(0)\n  ROOT %t = pred[] constant(true)\n}\n"
     "%body (x: f32[8]) -> f32[8] {\n  %x = f32[8]{0} parameter(0)\n"
     "  ROOT %w = f32[8]{0} while(f32[8]{0} %x), condition=%c, body=%body\n}\n",
     "f32[8]{0} while(f32[8]{0} %p), condition=%c, body=%body"),
])
def test_computations_that_call_themselves_are_clean_errors(extra, root):
    with pytest.raises(HloError, match="calls itself"):
        parse_hlo_text(_hlo(root, extra), "m.txt")


def test_deep_call_chains_are_clean_errors():
    chain = "".join(f"%c{i} (x: f32[8]) -> f32[8] {{\n  %x = f32[8]{{0}} parameter(0)\n"
                    f"  ROOT %y = f32[8]{{0}} call(f32[8]{{0}} %x), to_apply=%c{i + 1}\n}}\n" for i in range(300))
    chain += "%c300 (x: f32[8]) -> f32[8] {\n  ROOT %x = f32[8]{0} parameter(0)\n}\n"
    with pytest.raises(HloError, match="levels"):
        parse_hlo_text(_hlo("f32[8]{0} call(f32[8]{0} %p), to_apply=%c0", chain), "m.txt")


@pytest.mark.parametrize("shape,words", [
    ("f32[-1024,128]{1,0}", "negative dimension"),
    ("f32[4611686018427387904,4]{1,0}", "2\\^48"),
    ("(" * 5000 + "f32[8]" + ")" * 5000, "nested"),
])
def test_impossible_shapes_are_clean_errors(shape, words):
    with pytest.raises(HloError, match=words):
        parse_hlo_text(_hlo(f"{shape} negate(f32[8]{{0}} %p)"), "m.txt")


def test_huge_trip_count_is_unknown_not_an_overflow():
    from traceview.parsers.hlo.attributes import known_trip_count

    assert known_trip_count('{"known_trip_count":{"n":"' + "9" * 400 + '"}}') is None
    assert known_trip_count('{"known_trip_count":{"n":"-3"}}') is None
    assert known_trip_count('{"known_trip_count":"x"}') is None
    assert known_trip_count('{"known_trip_count":{"n":"12"}}') == 12
    assert known_trip_count("[" * 5000) is None


@pytest.mark.parametrize("text", ["[2,4]<=[3]", "[3,3]<=[9]T(5,9)", "[2,2]<=[2,2]T(0,0)",
                                  "[1000000000,1000000000]<=[1000000000000000000]",
                                  "mesh['a'=0,'b'=4] {'a'}", "mesh['a'=1125899906842624] {'a'}"])
def test_replica_groups_that_do_not_fit_are_unreadable(text):
    assert parse_replica_groups(text) is None


def test_replica_groups_that_fit_still_read():
    assert parse_replica_groups("[2,2]<=[2,2]T(1,0)") == [[0, 2], [1, 3]]
    assert parse_replica_groups("[2,4]<=[8]") == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_non_integer_stack_frame_ids_are_a_warning():
    text = _hlo(extra="") + "\nFileNames\n1 \"f.py\"\n\nFunctionNames\n1 \"g\"\n\nFileLocations\n" \
        "1 {file_name_id=1 function_name_id=1 line=x}\n\nStackFrames\n1 {file_location_id=1}\n"
    module = parse_hlo_text(text, "m.txt")
    assert any("not integers" in w for w in module.warnings)


def _proto_module(reverse: bool = False, f16: bytes | None = None) -> bytes:
    """A two-instruction HloModuleProto: p = parameter; r = negate(p) (listed before p when `reverse`)."""
    M = message_class("HloModuleProto")
    m = M(name="m", entry_computation_name="main", id=1)
    comp = m.computations.add(name="main", id=1, root_id=2)
    p = comp.instructions.add(name="p", opcode="parameter", id=1)
    p.shape.element_type = 11  # F32
    p.shape.dimensions.append(8)
    r = comp.instructions.add(name="r", opcode="negate", id=2)
    r.shape.CopyFrom(p.shape)
    r.operand_ids.append(1)
    if f16 is not None:
        c = comp.instructions.add(name="c", opcode="constant", id=3)
        c.shape.element_type = 10  # F16
        c.literal.f16s = f16
    if reverse:
        insts = list(comp.instructions)[::-1]
        del comp.instructions[:]
        comp.instructions.extend(insts)
    return m.SerializeToString()


def test_hlo_proto_operands_may_refer_forward():
    module = parse_hlo_proto(_proto_module(reverse=True), "m.hlo.pb")
    r = module.computations["main"].by_name()["r"]
    assert r.operands == ["p"]


def test_odd_f16_literal_bytes_are_read():
    parse_hlo_proto(_proto_module(f16=b"\x00\x3c\x00"), "m.hlo.pb")


def test_one_bad_trace_proto_is_a_warning_not_the_end():
    good = _proto_module()
    modules, warnings = modules_from_trace_protos({"jit_a(1)": good, "jit_b(2)": good[:-3] + b"\xff\xff\xff"})
    assert [m.name for m in modules] == ["m"] and any("jit_b(2)" in w for w in warnings)


def test_check_module_accepts_every_sample_module():
    from traceview.parsers.hlo.dump import load_hlo_modules

    modules, _ = load_hlo_modules(REPO / "sample_traces/sharded/hlo")
    for m in modules:
        check_module(m, m.file or m.name)


# ------------------------------------------------------------------ baselines, hardware files, budget configs


@pytest.mark.parametrize("content,words", [
    ("[" * 5000 + "]" * 5000, ["nested more than"]),
    ('{"summary": {}, "ops": [{"name": "x", "self_time_us": ' + "9" * 5000 + "}]}", ["5000-digit"]),
    ('{"summary": {}, "ops": [{"name": "x", "self_time_us": 1e400}]}', ["out of range"]),
    ('{"summary": {}, "ops": [{"name": "x", "self_time_us": "12"}]}', ["ops[0].self_time_us", "a number"]),
    ('{"summary": {}, "ops": [{"name": {"a": 1}}]}', ["ops[0].name", "a string"]),
    ('{"summary": {"steps": [{"time_us": -5}]}, "ops": []}', ["summary.steps[0].time_us", ">= 0"]),
    ('{"modules": [{"name": "m", "instructions": "many"}]}', ["modules[0].instructions", "a list"]),
    ('{"summary": {}, "ops": [{"name": "x", "self_time_us": NaN}]}', ["NaN"]),
])
def test_bad_baselines_are_one_line_errors(tmp_path, content, words):
    path = tmp_path / "baseline.json"
    path.write_text(content)
    rc, _, err = run_cli("check", str(REPO / "sample_traces/mlp/hlo"), "--baseline", str(path))
    assert_one_line_error(rc, err, "baseline.json")
    assert all(w in err for w in words), err


@pytest.mark.parametrize("content,words", [
    ('[[check.ops]]\npattern = "*"\nignore = "no"\n', ["check.ops[0].ignore", "true or false", '"no"']),
    ('[check]\nmin_op_time = [1]\n', ["min_op_time"]),
    ("[check]\nmax_step_regression = " + "9" * 5000 + "\n", ["budgets.toml"]),
    ("a = " + "[" * 5000 + "]" * 5000 + "\n", ["nested more than"]),
])
def test_bad_budget_configs_are_one_line_errors(tmp_path, content, words):
    path = tmp_path / "budgets.toml"
    path.write_text(content)
    hlo = str(REPO / "sample_traces/mlp/hlo")
    rc, _, err = run_cli("check", hlo, "--baseline", hlo, "--config", str(path))
    assert_one_line_error(rc, err, "budgets.toml")
    assert all(w in err for w in words), err


@pytest.mark.parametrize("content,words", [
    ('{"name": "x", "kind": "GPU", "hbm_bandwidth": "fast"}', ["hbm_bandwidth", "positive number"]),
    ('{"name": {"a": 1}, "kind": "GPU"}', ["name"]),
    ('{"name": "x", "kind": "GPU", "assumption": "no"}', ["assumption", "true or false"]),
    ("[" * 5000 + "]" * 5000, ["nested more than"]),
])
def test_bad_hardware_files_are_one_line_errors(tmp_path, content, words):
    path = tmp_path / "chips.json"
    path.write_text(content)
    rc, _, err = run_cli("hardware", "--hardware-file", str(path))
    assert_one_line_error(rc, err, "chips.json")
    assert all(w in err for w in words), err


def test_published_schemas_accept_real_outputs(tmp_path):
    from traceview.config.files import validate

    rc, out, err = run_cli("analyze", str(SAMPLE_TRACE), "--format", "json")
    assert rc == 0, err
    validate(json.loads(out), "analyze", "analyze.json")
    rc, out, err = run_cli("hlo", str(REPO / "sample_traces/mlp/hlo"), "--format", "json")
    assert rc == 0, err
    validate(json.loads(out), "hlo", "hlo.json")
    hlo = str(REPO / "sample_traces/mlp/hlo")
    rc, out, err = run_cli("check", hlo, "--baseline", hlo, "--format", "json")
    assert rc == 0, err
    validate(json.loads(out), "check", "check.json")


# ------------------------------------------------------------------ safe output

HOSTILE = "fus|ion\n<b>x</b> ![i](http://e.com/x.png) \x01\x0b\x1b[2J\x1b"


def _baseline_pair(tmp_path: Path) -> tuple[Path, Path]:
    def snap(time_us: float) -> dict:
        return {"summary": {"steps": [{"step": i, "time_us": 1000.0} for i in range(3)]},
                "ops": [{"module": "jit_" + HOSTILE, "name": HOSTILE, "self_time_us": time_us, "occurrences": 3,
                         "flops": 1e9, "bytes_accessed": 1e6, "step_times_us": [time_us / 3] * 3}]}
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    base.write_text(json.dumps(snap(3000.0)))
    new.write_text(json.dumps(snap(6000.0)))
    return base, new


def test_check_reports_stay_well_formed_whatever_the_names(tmp_path):
    base, new = _baseline_pair(tmp_path)
    rc, out, err = run_cli("check", str(new), "--baseline", str(base), "--format", "junit", "--min-op-time", "0")
    assert rc == 1, err
    root = ET.fromstring(out.split("\n", 1)[1])  # parses: no character XML forbids
    assert any("fus|ion" in (c.get("name") or "") for c in root.iter("testcase"))
    rc, out, _ = run_cli("check", str(new), "--baseline", str(base), "--format", "markdown", "--min-op-time", "0")
    assert rc == 1
    table_lines = [ln for ln in out.splitlines() if ln.startswith("|")]
    widths = {ln.replace("\\|", "").count("|") for ln in table_lines if "---" not in ln}
    assert table_lines and all(ln.endswith("|") for ln in table_lines)
    assert "<b>" not in out and "&lt;b&gt;" in out and "\x1b" not in out and "\x01" not in out
    assert "![i](" not in out and "\\!\\[i\\](http" in out  # image syntax shown as text, never fetched
    assert widths, out
    rc, out, _ = run_cli("check", str(new), "--baseline", str(base), "--format", "table", "--min-op-time", "0")
    assert rc == 1 and "\x1b" not in out and "\x01" not in out and "\\x1b[2J" in out


def test_terminal_table_with_a_stray_escape():
    from traceview.render.tables import _visible_len, text_table

    assert _visible_len("a\x1bb") == 3
    table = text_table(["name"], [["a\x1b"], ["\x1b[31mred\x1b[0m"]])
    assert "\x1b" not in table and "\\x1b[31mred\\x1b[0m" in table


def test_a_colour_sequence_in_an_op_name_is_shown_as_text_in_every_terminal_cell():
    """A name's own colour codes look exactly like traceview's: only traceview's (unforgeable markers) colour."""
    from traceview.render.escape import terminal_lines, terminal_text
    from traceview.render.tables import colour, text_table

    name = "\x1b[31mfusion.1\x1b[0m"
    table = text_table(["op", "bound"], [[name, colour("memory", "red", True)]])
    out = terminal_lines(table)
    assert out.count("\x1b[") == 2  # the bound cell's colour and its reset, nothing of the name
    assert "\\x1b[31mfusion.1\\x1b[0m" in out and "\x1b[31mmemory\x1b[0m" in out
    assert terminal_text(name, keep_colour=True) == "\\x1b[31mfusion.1\\x1b[0m"
    # The column is as wide as what shows: the marker takes no width.
    header, rule, row = table.split("\n")
    assert len(rule.split("  ")[0]) == len(terminal_text(name))


def test_coloured_terminal_report_escapes_a_colour_sequence_in_an_op_name(tmp_path, monkeypatch):
    """A whole coloured report (diff, as on a terminal) whose op is named by a colour sequence."""
    import traceview.render.regress as regress

    monkeypatch.setattr(regress, "use_colour", lambda stream=None: True)
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    for path, time_us in ((base, 3000.0), (new, 6000.0)):
        path.write_text(json.dumps({"summary": {"steps": [{"step": 0, "time_us": 1000.0}]},
                                    "ops": [{"module": "jit_f", "name": "\x1b[31mevil\x1b[0m", "self_time_us": time_us,
                                             "occurrences": 1, "flops": 1e9, "bytes_accessed": 1e6,
                                             "step_times_us": [time_us]}]}))
    rc, out, _ = run_cli("diff", str(base), str(new), "--format", "table")
    assert rc in (0, 1) and "\x1b[1m" in out  # coloured: traceview's own bold titles
    assert "\\x1b[31mevil\\x1b[0m" in out and "\x1b[31mevil" not in out


def test_dashboard_names_render_as_text_never_as_image_link_or_html():
    """What the dashboard passes to st.markdown (seen in Chromium: no <img>, no link to the name's URL)."""
    from traceview.render.escape import markdown_text

    shown = markdown_text("![pwn](http://example.com/x.png) www.example.com <img src=x> [a](b)")
    assert "![" not in shown and "<img" not in shown and "](b)" not in shown.replace("\\](b)", "")
    assert "http://" not in shown and "www." not in shown  # no bare URL left for autolinking


@pytest.mark.parametrize("length", [(1 << 64) - 1, 1 << 63, (1 << 31) + 5, 1000])
def test_event_field_with_a_huge_length_never_hangs(tmp_path, length):
    """A length-delimited field inside event bytes whose length varint is huge (read as negative): a clean
    error or the other events, never a hang (run in the fuzzer's worker, which is killed past its time)."""
    from tests.support import fuzzing
    from traceview.parsers.xspace.schema import XSpaceRaw

    space = XSpaceRaw()
    plane = space.planes.add(name="/device:GPU:0")
    plane.event_metadata[1].id = 1
    plane.event_metadata[1].name = "op"
    line = plane.lines.add(name="Stream #1")
    good = bytes([0x08, 0x01, 0x10, 0x05, 0x18, 0x0A])  # metadata_id 1, offset 5, duration 10
    line.events.append(good)
    line.events.append(bytes([0x08, 0x01, 0x22]) + fuzzing._varint(length) + b"\x08\x01")
    case = fuzzing.Case(0, "huge-length", "xplane", f"length={length}", "host.xplane.pb", space.SerializeToString())
    pool = fuzzing._Pool(timeout_s=20.0)
    try:
        outcome, detail = pool.run(case)
    finally:
        pool.close()
    assert outcome in ("ok", "error"), detail


def test_allocator_events_at_impossible_times_are_dropped(shared_traces, tmp_path):
    """Found by the fuzzer (seed 31): a host line starting at -2^63 ns made the memory view's reader crash
    (OverflowError); its events are dropped, as the op reader drops them."""
    from traceview.parsers.xspace.allocator_events import read_allocator_events

    space = XSpace()
    space.ParseFromString((shared_traces / "AMD-AGI-TraceLens/jax08_gemm/tw003.xplane.pb").read_bytes())
    whole = read_allocator_events(_write(tmp_path, space, "whole.xplane.pb"))
    host = next(p for p in space.planes if p.name == "/host:CPU")
    for line in host.lines:
        line.timestamp_ns = -(1 << 63)
    events = read_allocator_events(_write(tmp_path, space))
    assert len(whole) > 0 and events.empty


def test_a_lone_surrogate_in_a_baseline_is_read_and_written_out(tmp_path):
    """`"fu\\ud800sion"` in a baseline's op name made every output an internal error (UnicodeEncodeError)."""
    from tests.support.fuzzing import BASELINE

    doc = json.loads(json.dumps(BASELINE))
    doc["ops"][0]["name"] = "fu\ud800sion"
    path = tmp_path / "surrogate.json"
    path.write_text(json.dumps(doc))
    import subprocess
    import sys

    for fmt in ("json", "table", "markdown"):   # a real process: its stdout encodes what it is given
        done = subprocess.run([sys.executable, "-m", "traceview", "diff", str(path), str(path), "--format", fmt,
                               "--min-op-time", "0"], capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr[-500:]
        assert "fu\ufffdsion".encode() in done.stdout or b"fu\\ufffdsion" in done.stdout
