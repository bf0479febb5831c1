"""The table cache's file format: exact round trips, corruption is a miss, background writes are safe."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceview.cache import tables as table_cache
from traceview.parsers.profile import Device
from traceview.parsers.tables.trace_data import TraceData


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(d))
    return d


def _data(n: int = 5000, ratio: np.ndarray | None = None) -> TraceData:
    rng = np.random.default_rng(4)
    ops = pd.DataFrame({
        "device": pd.Categorical(rng.choice(["h/GPU:0", "h/GPU:1", "é/GPU:2"], n)),
        "start_ps": rng.integers(0, 2**62, n),
        "flops": np.full(n, np.nan),                     # one repeated value (NaN): stored once
        "step": np.full(n, -1, dtype=np.int32),
        "ratio": rng.normal(size=n) if ratio is None else ratio,
        "flag": rng.integers(0, 2, n).astype(bool),
    }, copy=False)
    host_events = pd.DataFrame({"name": pd.Categorical(["a"] * 3), "start_ps": np.arange(3, dtype=np.int64)})
    steps = pd.DataFrame({"step": np.zeros(0, dtype=np.int32)})
    return TraceData(host="h", ops=ops, host_events=host_events, steps=steps,
                     devices=[Device(id="h/GPU:0", host="h", kind="GPU", stats={"x": b"\x00\xff"})],
                     hlo_protos={"m(1)": b"\x08\x01"}, environment={"jax": "0.8"}, warnings=["w"])


def _same(a: TraceData, b: TraceData) -> None:
    for table in ("ops", "host_events", "steps"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table), check_exact=True)
    assert (a.host, a.devices, a.hlo_protos, a.environment, a.warnings) == \
        (b.host, b.devices, b.hlo_protos, b.environment, b.warnings)


def test_round_trip_is_exact_and_columns_are_writable(cache_dir, tmp_path):
    f = tmp_path / "h.xplane.pb"
    f.write_bytes(b"x")
    data = _data()
    assert table_cache.put(f, data)
    got = table_cache.get(f)
    assert got is not None
    _same(got, data)
    got.ops.loc[0, "start_ps"] = 7  # tables read back are ordinary, writable frames
    (entry,) = cache_dir.glob("*" + table_cache.SUFFIX)
    # the all-NaN and all -1 columns take no room: the entry is smaller than the varying columns alone
    assert entry.stat().st_size < data.ops[["start_ps", "ratio"]].memory_usage(index=False).sum() + 2 * 5000 + 4096


@pytest.mark.parametrize("where", [0.3, 0.6, 0.95])
def test_a_flipped_byte_is_a_miss(cache_dir, tmp_path, where):
    f = tmp_path / "h.xplane.pb"
    f.write_bytes(b"x")
    assert table_cache.put(f, _data())
    (entry,) = cache_dir.glob("*" + table_cache.SUFFIX)
    raw = bytearray(entry.read_bytes())
    raw[int(len(raw) * where)] ^= 0x40
    entry.write_bytes(bytes(raw))
    assert table_cache.get(f) is None
    assert not entry.exists()  # a corrupt entry is removed


def test_truncated_or_foreign_entry_is_a_miss(cache_dir, tmp_path):
    f = tmp_path / "h.xplane.pb"
    f.write_bytes(b"x")
    assert table_cache.put(f, _data())
    (entry,) = cache_dir.glob("*" + table_cache.SUFFIX)
    whole = entry.read_bytes()
    for bad in (whole[:-100], whole[:20], b"", b"TVTABLES" + (10**9).to_bytes(8, "little")):
        entry.write_bytes(bad)
        assert table_cache.get(f) is None


def test_background_put_stores_and_get_waits_for_it(cache_dir, tmp_path):
    f = tmp_path / "h.xplane.pb"
    f.write_bytes(b"x")
    data = _data(200_000)
    assert table_cache.put(f, data, background=True)
    got = table_cache.get(f)  # waits for the writer
    assert got is not None
    _same(got, data)


def test_background_put_of_a_table_changed_meanwhile_stores_nothing(cache_dir, tmp_path, monkeypatch):
    f = tmp_path / "h.xplane.pb"
    f.write_bytes(b"x")
    column = np.random.default_rng(5).normal(size=5000)
    data = _data(ratio=column)  # the table holds this very array
    real_write = table_cache._write_planned
    changed = []

    def write_then_change(handle, header, payload):
        real_write(handle, header, payload)
        if any(np.shares_memory(a, column) for _, a in payload):
            column[0] += 1.0  # changed in place after it was written
            changed.append(True)

    monkeypatch.setattr(table_cache, "_write_planned", write_then_change)
    assert table_cache.put(f, data, background=True)
    table_cache.flush()
    assert changed
    assert not list(cache_dir.glob("*" + table_cache.SUFFIX))
    assert not list(cache_dir.glob(".tmp-*"))
    assert table_cache.get(f) is None


def test_an_unreported_column_is_stored_once_and_read_back_writable(cache_dir, tmp_path):
    """The reader's unreported figures (one NaN seen on every row, read-only, no memory) are stored as one
    value without being made contiguous first, and come back as an ordinary column."""
    from traceview.parsers.tables.columns import is_unreported, unreported

    f = tmp_path / "h.xplane.pb"
    f.write_bytes(b"x")
    data = _data()
    columns = {name: data.ops[name].array for name in data.ops.columns} | {"flops": unreported(len(data.ops))}
    data.ops = pd.DataFrame(columns, copy=False)        # as the reader builds its tables: no copy
    assert is_unreported(data.ops["flops"].to_numpy())
    assert table_cache.put(f, data)
    got = table_cache.get(f)
    assert got is not None
    _same(got, data)
    assert not is_unreported(got.ops["flops"].to_numpy())
    got.ops.loc[0, "flops"] = 1.0
