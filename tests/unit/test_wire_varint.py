"""The one scalar varint decoder (parsers.xspace.schema.read_varint) and the field walk on it (field_span),
against the encoder and the vectorized decoder, on generated values and on broken bytes."""

from __future__ import annotations

import numpy as np
import pytest

from traceview.parsers.xspace.schema import WireError, _varints, field_span, read_varint, varint_bytes


def _values(rng: np.random.Generator, n: int) -> list[int]:
    """Numbers of every varint length (1 to 10 bytes), the edges of each length among them."""
    edges = [0, 1, 127, 128, 16383, 16384, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]
    drawn = [int(rng.integers(0, 1 << 62)) >> int(rng.integers(0, 62)) for _ in range(n)]
    return edges + drawn


def test_read_varint_undoes_the_encoder_and_agrees_with_the_vectorized_decoder():
    rng = np.random.default_rng(5)
    values = _values(rng, 500)
    data = b"".join(varint_bytes(v) for v in values)
    pos, starts = 0, []
    for v in values:
        starts.append(pos)
        got, pos = read_varint(data, pos)
        assert got == v
    assert pos == len(data)
    vector, ends = _varints(np.frombuffer(data + bytes(10), dtype=np.uint8), np.array(starts, dtype=np.int64))
    assert vector.tolist() == values and ends.tolist() == starts[1:] + [len(data)]


def test_read_varint_refuses_what_runs_past_its_bytes_or_over_ten_bytes():
    with pytest.raises(WireError, match="runs past"):
        read_varint(varint_bytes(1 << 40)[:-1], 0)
    with pytest.raises(WireError, match="runs past"):
        read_varint(b"", 0)
    with pytest.raises(WireError, match="longer than 10 bytes"):
        read_varint(b"\xff" * 11, 0)


@pytest.mark.parametrize("number", [1, 2, 15, 16, 2047, 1 << 20])
def test_field_span_of_every_wire_type(number):
    payload = b"hello, plane"
    fields = [
        (0, varint_bytes(number << 3 | 0) + varint_bytes(300), 2),                            # varint 300
        (1, varint_bytes(number << 3 | 1) + bytes(8), 8),                                      # fixed64
        (2, varint_bytes(number << 3 | 2) + varint_bytes(len(payload)) + payload, len(payload)),
        (5, varint_bytes(number << 3 | 5) + bytes(4), 4),                                      # fixed32
    ]
    for wire, data, size in fields:
        got_number, got_wire, start, end = field_span(b"xx" + data, 2)
        assert (got_number, got_wire, end - start, end) == (number, wire, size, 2 + len(data))
    with pytest.raises(WireError, match="wire type"):
        field_span(varint_bytes(number << 3 | 3), 0)
