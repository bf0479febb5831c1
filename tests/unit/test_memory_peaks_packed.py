"""A host's allocator peaks as the reading hands them to a pod's parent (hostreduce.memory_peaks.host_peaks):
each peak's timeline and rows packed into one compressed string, read back equal to the peaks of the same
events unpacked, and the memory view's JSON of them the same."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceview.hostreduce.memory_peaks import MAX_TIMELINE_POINTS, HostPeaks, host_peaks, merged_peaks, runtime_peaks
from traceview.parsers.xspace.allocator_events import ALLOCATOR_COLUMNS


def _events(rng: np.random.Generator, host: str, memories: int, n: int) -> pd.DataFrame:
    """Random allocator events of ``memories`` allocators: allocations and frees of live addresses, the
    heap's use after each, some events without a step or an op."""
    rows = []
    for m in range(memories):
        live: dict[int, int] = {}
        heap, stack, t = int(rng.integers(0, 1 << 20)), int(rng.integers(0, 1 << 12)), int(rng.integers(0, 1000))
        for i in range(n):
            t += int(rng.integers(1, 50))
            if live and rng.random() < 0.4:
                address = int(rng.choice(list(live)))
                size = live.pop(address)
                heap -= size
                kind = "free"
            else:
                address, size = int(rng.integers(1, 1 << 40)), int(rng.integers(1, 1 << 16))
                live[address] = size
                heap += size
                kind = "alloc"
            rows.append({"host": host, "memory": str(m), "time_ps": t, "kind": kind, "stack_bytes": stack,
                         "heap_bytes": heap, "free_bytes": int(rng.integers(0, 1 << 30)),
                         "fragmentation": float(rng.random()), "peak_bytes_in_use": heap + stack,
                         "requested_bytes": size, "allocation_bytes": size, "address": address,
                         "step": int(rng.integers(-1, 5)), "tf_op": f"op{i % 7}" if i % 3 else None,
                         "region_type": "output" if i % 2 else None, "data_type": "f32" if i % 5 else None,
                         "shape": f"[{i}]" if i % 4 else None})
    frame = pd.DataFrame(rows, columns=list(ALLOCATOR_COLUMNS)).astype(ALLOCATOR_COLUMNS)
    for name, dtype in ALLOCATOR_COLUMNS.items():
        if dtype == "object":
            frame[name] = pd.Series(list(frame[name]), dtype=object)
    return frame


def _rows(peaks) -> list[dict]:
    return [{**{k: v for k, v in vars(p).items() if k != "detail"}, "timeline": p.timeline.to_dict("list"),
             "dtypes": p.timeline.dtypes.to_dict(), "index": list(p.timeline.index), "at_peak": p.at_peak}
            for p in peaks]


@pytest.mark.parametrize("seed", range(4))
def test_packed_peaks_read_back_equal_those_unpacked(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 3 * MAX_TIMELINE_POINTS))     # below and above the timeline's limit
    events = _events(rng, "h0", int(rng.integers(1, 4)), n)
    plain = runtime_peaks(events)
    held = host_peaks(events)
    assert all(isinstance(p.detail, bytes) for p in held.peaks)     # what the parent holds: one string each
    assert _rows(held.peaks) == _rows(plain)
    assert all(p.packed() is p for p in held.peaks)                 # packing twice packs nothing again
    assert held.first_ps == int(events["time_ps"].min())


def test_packed_peaks_are_smaller_and_merge_as_one_table_does():
    rng = np.random.default_rng(7)
    frames = [_events(rng, f"h{k}", 2, 400) for k in (2, 0, 1)]
    parts = [host_peaks(f) for f in frames]
    merged = merged_peaks(parts)
    assert merged is not None
    assert _rows(merged) == _rows(runtime_peaks(pd.concat(frames, ignore_index=True)))
    unpacked = HostPeaks(runtime_peaks(frames[0]), None)
    import pickle

    assert len(pickle.dumps(parts[0])) < len(pickle.dumps(unpacked)) / 2
