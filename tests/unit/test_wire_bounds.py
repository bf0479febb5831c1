"""Every length, offset and count the columnar event decoder reads is checked against the buffer.

Malformed event bytes must end in a clean TraceError naming the file: never an
IndexError, a wrapped-around offset or a loop that does not end.
"""

from __future__ import annotations

import numpy as np
import pytest

from traceview.errors import TraceError
from traceview.parsers.xspace.reader import read_xplane
from traceview.parsers.xspace.schema import WireError, XEvent, XSpaceRaw, decode_events

_HUGE = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"  # varint 2**64 - 1
_INT64_MIN = b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01"  # varint 2**63: negative as int64

MALFORMED = {
    "huge stats length": b"\x08\x01\x22" + _HUGE,
    "stats length that wraps negative": b"\x08\x01\x22" + _INT64_MIN + b"\x08\x01",
    "stats length one past the end": b"\x08\x01\x22\x03\x08\x01",
    "varint running off the end": b"\x08\xff\xff",
    "tag running off the end": b"\x08\x01\xff",
    "varint longer than 10 bytes": b"\x08" + b"\xff" * 11 + b"\x01",
    "group wire type": b"\x0b\x08\x01\x0c",
    "field number 0": b"\x00\x01",
    "fixed64 cut short": b"\x08\x01\x11\x01\x02",
    "stat value length past the stat": b"\x22\x04\x08\x01\x2a\x09",
    "stat id running off the stat": b"\x22\x02\x08\xff",
    "huge stat value length": b"\x22\x0d\x08\x01\x2a" + _HUGE + b"ab",
}


def _space(events: list[bytes]) -> XSpaceRaw:
    space = XSpaceRaw()
    plane = space.planes.add(name="/device:GPU:0")
    plane.stat_metadata[1].name = "hlo_op"
    plane.stat_metadata[1].id = 1
    line = plane.lines.add(name="Stream #1")
    for e in events:
        line.events.append(e)
    return space


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_event_is_a_trace_error_naming_the_file(tmp_path, case):
    good = XEvent(metadata_id=1, offset_ps=10, duration_ps=5).SerializeToString()
    f = tmp_path / "host7.xplane.pb"
    f.write_bytes(_space([good, MALFORMED[case], good]).SerializeToString())
    with pytest.raises(TraceError) as info:
        read_xplane(f)
    message = str(info.value)
    assert str(f) in message and "corrupt events" in message and "\n" not in message


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_event_alone_raises_wire_error(case):
    with pytest.raises(WireError):
        decode_events([MALFORMED[case]])


def test_random_bytes_decode_or_raise_wire_error():
    """Fuzz: mutated real events either decode (protobuf accepts them too) or raise WireError."""
    rng = np.random.default_rng(15)
    event = XEvent(metadata_id=3, offset_ps=123456, duration_ps=789)
    stat = event.stats.add(metadata_id=1)
    stat.str_value = "fusion.3"
    event.stats.add(metadata_id=2, uint64_value=2**63 + 5)
    base = bytearray(event.SerializeToString())
    for _ in range(400):
        data = bytearray(base)
        for pos in rng.integers(0, len(data), size=int(rng.integers(1, 4))):
            data[pos] = int(rng.integers(0, 256))
        data = data[: int(rng.integers(1, len(data) + 1))]
        try:
            cols = decode_events([bytes(data)])
        except WireError:
            continue
        # whatever decoded lies inside the buffer
        assert ((cols.stat_start <= cols.stat_end) & (cols.stat_end <= len(data))).all()


def test_well_formed_events_still_decode():
    event = XEvent(metadata_id=7, offset_ps=2**40, duration_ps=3)
    event.stats.add(metadata_id=1).str_value = "x" * 300  # a two-byte length
    cols = decode_events([event.SerializeToString()] * 3)
    assert cols.metadata_id.tolist() == [7, 7, 7]
    assert cols.offset_ps.tolist() == [2**40] * 3
    assert [cols.stat_bytes(i) for i in range(3)] == [b"x" * 300] * 3
