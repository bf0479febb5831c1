"""Trace JSON decoding on hostile text (parsers/trace_json/text.py): strings never raise, times are typed,
and the bounds refuse before the decoder's objects exist."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest

from traceview.errors import TraceError
from traceview.parsers.trace_json import text as trace_json_text
from traceview.parsers.trace_json.text import event_times, load_events, replace_lone_surrogates


def test_lone_surrogate_escapes_are_replaced_and_pairs_kept():
    text = r'["op\ud800x", "\udfff", "\ud83d\ude00", "a\\ud800", "\\\ud800"]'
    assert json.loads(replace_lone_surrogates(text)) == ["op\ufffdx", "\ufffd", "\U0001F600", "a\\ud800",
                                                          "\\\ufffd"]
    assert replace_lone_surrogates('["plain"]') == '["plain"]'


def test_invalid_utf8_and_control_characters_are_kept_or_replaced(tmp_path):
    path = tmp_path / "t.trace.json"
    path.write_bytes(b'\xef\xbb\xbf{"traceEvents": [{"ph": "X", "name": "a\xff\xfeb\x01\x1b", "ts": 1, "dur": 2},'
                     b' {"ph": "M", "name": "thread_name", "args": {"name": "t\\ud800"}}]}')
    events = load_events(path)
    assert events[0]["name"] == "a\ufffd\ufffdb\x01\x1b"
    assert events[1]["args"]["name"] == "t\ufffd"
    for event in events:   # whatever is kept can be written out as UTF-8
        json.dumps(event, ensure_ascii=False).encode("utf-8")


def test_times_must_be_json_numbers():
    times = event_times([1, 2.5, True, False, "3", None, [], {}, 1 << 70, -(1 << 70), float("nan")])
    assert times[:2].tolist() == [1.0, 2.5]
    assert all(math.isnan(t) for t in times[2:])


def test_values_and_events_are_bounded_before_and_after_decoding(tmp_path, monkeypatch):
    events = [{"ph": "X", "pid": 1, "tid": 1, "ts": i, "dur": 1, "name": "a"} for i in range(50)]
    path = tmp_path / "many.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    assert len(load_events(path)) == 50
    monkeypatch.setattr(trace_json_text, "MAX_VALUES", 200)     # 50 events x 6 commas: over
    with pytest.raises(TraceError, match=r"many\.trace\.json\.gz: trace JSON of about 3\d\d values"):
        load_events(path)
    monkeypatch.setattr(trace_json_text, "MAX_VALUES", 10_000)
    monkeypatch.setattr(trace_json_text, "MAX_EVENTS", 49)
    with pytest.raises(TraceError, match="50 trace events, more than the 49"):
        load_events(path)


@pytest.mark.parametrize("data, wanted", [(b"", "empty"), (b"  \n", "empty"), (b"[" * 100_000, "nested too deeply"),
                                          (b'{"traceEvents": 5}', "no traceEvents list"), (b"{", "not readable")])
def test_unusable_text_is_one_line_naming_the_file(tmp_path, data, wanted):
    path = tmp_path / "bad.trace.json"
    path.write_bytes(data)
    with pytest.raises(TraceError) as caught:
        load_events(path)
    assert wanted in str(caught.value) and str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_times_array_is_float64():
    assert event_times([]).dtype == np.float64
