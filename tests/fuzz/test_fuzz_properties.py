"""Property-based tests (hypothesis) over the readers and renderers: any input, a clean result or a clean error."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceview.errors import HloError, TraceError, UserError
from traceview.parsers.hlo.replica_groups import parse_replica_groups
from traceview.parsers.hlo.text import parse_hlo_text
from traceview.parsers.xspace.reader import read_xplane
from traceview.parsers.xspace.schema import XSpace
from traceview.render.escape import markdown_text, terminal_text, xml_text
from traceview.render.tables import markdown_table, text_table

pytestmark = pytest.mark.fuzz
FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
# Names with every special character: Markdown, HTML, table pipes, line breaks, control and escape sequences.
NAMES = st.lists(st.sampled_from(list("ab|\n\r\t<>&\"'`*_[]()!#~-+.:\\$ 1") +
                                  ["\x00", "\x01", "\x0b", "\x1b", "\x1b[2J", "\x1b]0;t\x07", "\x7f", "\x9b",
                                   "\u202e", "\ud7ff", "\ufffe", "é", "😀", "http://e.com/x.png"]),
                 max_size=30).map("".join)


# ------------------------------------------------------------------ renderers


@FAST
@given(NAMES)
def test_markdown_text_is_one_literal_line(name):
    out = markdown_text(name)
    assert "\n" not in out and "\r" not in out and "<" not in out and ">" not in out
    assert re.search(r"(?<!\\)[|`*\[\]!]", out) is None  # every syntax character escaped
    assert not re.search(r"[\x00-\x1f\x7f-\x9f]", out)


@FAST
@given(NAMES)
def test_xml_text_always_parses(name):
    element = ET.Element("testcase", name=xml_text(name))
    element.text = xml_text(name)
    ET.fromstring(ET.tostring(element, encoding="unicode"))


@FAST
@given(NAMES)
def test_terminal_text_carries_no_control_character(name):
    assert not re.search(r"[\x00-\x1f\x7f-\x9f]", terminal_text(name))


@FAST
@given(st.lists(st.lists(NAMES, min_size=3, max_size=3), max_size=6))
def test_tables_keep_their_shape_whatever_the_cells(rows):
    md = markdown_table(["a", "b", "c"], rows).split("\n")
    assert len(md) == len(rows) + 2
    assert all(len(re.findall(r"(?<!\\)\|", line)) == 4 for line in md)
    text = text_table(["a", "b", "c"], rows).split("\n")
    assert len(text) == len(rows) + 2
    assert all("\x1b" not in line for line in text)


# ------------------------------------------------------------------ xplane wire


@FAST
@given(st.binary(max_size=400))
def test_any_bytes_give_tables_or_a_trace_error(tmp_path, data):
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(data)
    try:
        read_xplane(path)
    except TraceError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)


@FAST
@given(st.lists(st.tuples(INT64, INT64), min_size=1, max_size=12), st.integers(0, 1 << 40))
def test_event_times_are_valid_or_dropped_and_counted(tmp_path, events, timestamp_ns):
    space = XSpace()
    plane = space.planes.add(name="/device:GPU:0")
    plane.event_metadata[1].id = 1
    plane.event_metadata[1].name = "op"
    line = plane.lines.add(name="Stream #1", timestamp_ns=timestamp_ns)
    for offset, duration in events:
        line.events.add(metadata_id=1, offset_ps=offset, duration_ps=duration)
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(space.SerializeToString())
    data = read_xplane(path)
    limit = 1 << 62
    line_ps = timestamp_ns * 1000
    valid = sum(1 for o, d in events if 0 <= o and 0 <= d and line_ps + o + d <= limit)
    assert len(data.ops) == valid
    assert (data.ops["duration_ps"] >= 0).all() and (data.ops["self_ps"] >= 0).all()
    assert (data.ops["start_ps"] >= 0).all()
    dropped = len(events) - valid
    assert any(f"dropped {dropped} event(s)" in w for w in data.warnings) == bool(dropped)


# ------------------------------------------------------------------ HLO text


@FAST
@given(st.lists(st.integers(-(1 << 64), 1 << 64), min_size=0, max_size=4), st.sampled_from(["negate", "reduce-precision"]))
def test_any_dims_give_a_module_with_sane_costs_or_an_hlo_error(dims, opcode):
    from traceview.cost import instruction_costs

    shape = f"f32[{','.join(map(str, dims))}]"
    text = (f"HloModule m\n\nENTRY %main (p: {shape}) -> {shape} {{\n  %p = {shape} parameter(0)\n"
            f"  ROOT %r = {shape} negate({shape} %p)\n}}\n")
    try:
        module = parse_hlo_text(text, "m.txt")
    except HloError as exc:
        assert "\n" not in str(exc) and "m.txt" in str(exc)
        return
    costs = instruction_costs(module)
    for column in ("flops", "bytes_read", "bytes_written"):
        assert (costs[column].fillna(0) >= 0).all()


@FAST
@given(st.integers(-3, 20), st.integers(-3, 20), st.lists(st.integers(0, 12), max_size=3),
       st.lists(st.integers(-1, 3), max_size=3))
def test_iota_replica_groups_fit_or_are_unreadable(groups, size, dims, perm):
    text = f"[{groups},{size}]<=[{','.join(map(str, dims))}]" + (f"T({','.join(map(str, perm))})" if perm else "")
    try:
        out = parse_replica_groups(text)
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"{text}: {type(exc).__name__}: {exc}")
    if out is not None:
        assert len(out) == groups and all(len(g) == size for g in out)
        assert sorted(x for g in out for x in g) == list(range(groups * size))


# ------------------------------------------------------------------ user files

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | NAMES,
                    lambda children: st.lists(children, max_size=4) | st.dictionaries(NAMES, children, max_size=4),
                    max_leaves=20)


@FAST
@given(st.fixed_dictionaries({"summary": JSON, "ops": st.lists(st.dictionaries(
    st.sampled_from(["name", "module", "self_time_us", "flops", "occurrences", "step_times_us", "bound"]), JSON),
    max_size=3)}))
def test_any_baseline_json_loads_or_is_a_user_error(tmp_path, data):
    from traceview.regress.baseline import load_baseline

    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    try:
        snap = load_baseline(path)
    except UserError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        return
    assert (snap.ops["time_ps"].fillna(0) >= 0).all()


@FAST
@given(st.dictionaries(st.sampled_from(["pattern", "max_regression", "min_time", "ignore"]),
                       st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=6)
                       | st.lists(st.integers(), max_size=2), min_size=1))
def test_any_budget_rule_loads_or_is_a_user_error(tmp_path, rule):
    from traceview.regress.budgets import load_config

    def toml(value) -> str:
        return json.dumps(value).lower() if isinstance(value, bool) else json.dumps(value)

    body = "".join(f"{k} = {toml(v)}\n" for k, v in rule.items() if v is not None)
    path = tmp_path / "c.toml"
    path.write_text("[[check.ops]]\n" + body)
    try:
        values = load_config(path)
    except UserError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        return
    assert all(isinstance(r.ignore, bool) for r in values.get("ops", []))
    if rule.get("ignore") is not None:
        assert isinstance(rule["ignore"], bool) and values["ops"][0].ignore is rule["ignore"]


# ------------------------------------------------------------------ scope paths (traceview scopes)

OP_NAME_PARTS = st.sampled_from(["jit(", "jvp(", "transpose(", "pjit", "while", "body", ")", "(", "/", ";",
                                 "layer_0", "attn", "main", "remat", "", "a,b->c", "\x1b[2J", "|", "é"])


@FAST
@given(st.one_of(NAMES, st.lists(OP_NAME_PARTS, max_size=60).map("".join)))
def test_any_op_name_gives_a_bounded_path_with_no_marker(name):
    from traceview.scopes.paths import MARKERS, MAX_COMPONENTS, PASSES, parse_op_name

    path = parse_op_name(name)
    if path is None:
        assert name == "" or not name.replace(";", "")
        return
    assert len(path.scopes) <= MAX_COMPONENTS and path.pass_ in PASSES
    assert not set(path.scopes) & MARKERS and "" not in path.scopes


# ------------------------------------------------------------------ idle causes and stragglers

_INTERVAL = st.tuples(st.integers(0, 3), st.integers(0, 10_000), st.integers(0, 3_000))
_HOST_EVENT = st.tuples(st.sampled_from(["main", "worker", "pool"]),
                        st.sampled_from(["PjitFunction(f)", "block_until_ready", "np.asarray(jax.Array)",
                                         "$x.py:1 load", "train", "all-reduce", "\x1b[2J|`x`"]),
                        st.integers(0, 10_000), st.integers(0, 3_000))


@FAST
@given(st.lists(_INTERVAL, min_size=1, max_size=40), st.lists(_HOST_EVENT, max_size=60),
       st.lists(st.sampled_from(["fusion", "all-reduce.1", "dot", "nccl_send"]), min_size=1, max_size=40))
def test_idle_causes_always_add_up_to_each_devices_idle_time(intervals, host_rows, names):
    """Any timeline (overlaps, zero lengths, improper nesting on the host): every cause >= 0, the causes of a
    device add up to its idle time (span less the union of its ops), the steps' parts to no more."""
    import numpy as np
    import pandas as pd

    from traceview.advice.idle import CAUSES, idle_causes
    from traceview.advice.stragglers import stragglers
    from traceview.timeline.devices import device_time

    ops = pd.DataFrame({"host": "h", "device": [f"h/TPU:{d}" for d, _, _ in intervals], "line": "XLA Ops",
                        "op": [names[i % len(names)] for i in range(len(intervals))],
                        "start_ps": [s for _, s, _ in intervals], "duration_ps": [n for _, _, n in intervals],
                        "self_ps": [n for _, _, n in intervals], "step": [s // 4_000 for _, s, _ in intervals]})
    host = pd.DataFrame({"host": "h", "thread": [r[0] for r in host_rows], "name": [r[1] for r in host_rows],
                         "start_ps": [r[2] for r in host_rows], "duration_ps": [r[3] for r in host_rows]})
    steps = pd.DataFrame({"step": [0, 1, 2], "start_ps": [0, 4_000, 8_000], "time_ps": [4_000, 4_000, 5_000]})
    result = idle_causes(ops, host, steps)
    expected = device_time(ops).set_index("device")["idle_ps"]
    table = result.per_device.set_index("device")
    for device, idle in expected.items():
        parts = [int(table.loc[device, f"{c}_ps"]) for c in CAUSES]
        assert min(parts) >= 0 and sum(parts) == idle == table.loc[device, "idle_ps"]
    assert sum(result.causes.values()) == result.idle_ps == int(expected.sum())
    assert (result.per_step["idle_ps"] <= result.idle_ps).all()
    assert all(e["time_ps"] > 0 for ev in result.evidence.values() for e in ev)
    late = stragglers(ops)
    assert (late.steps[["start_lag_ps", "finish_lag_ps", "wait_ps"]].to_numpy() >= 0).all() if len(late.steps) \
        else True
    assert np.isfinite(result.idle_ps)
