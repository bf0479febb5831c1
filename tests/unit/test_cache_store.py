"""The caches' size limit (traceview/cache/store.py): counted now and then, never exceeded by a process's own stores."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from traceview.cache import store


def _put(folder: Path, name: str, size: int) -> Path:
    time.sleep(0.02)  # mtimes apart (the file system's clock may tick every few ms): the oldest is known
    entry = folder / f"{name}.e"
    assert store.store(entry, ".e", lambda handle: handle.write(b"x" * size))
    return entry


@pytest.fixture
def counts(monkeypatch):
    """How many times the folder was counted (listed)."""
    seen = []
    listing = Path.iterdir

    def iterdir(self):
        seen.append(self)
        return listing(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    monkeypatch.setattr(store, "_tallies", {})
    return seen


def test_the_folder_is_counted_once_while_stores_fit(tmp_path, monkeypatch, counts):
    monkeypatch.setenv("TRACEVIEW_CACHE_MAX_MB", str(10_000 / 2**20))
    for k in range(5):
        _put(tmp_path, f"a{k}", 1000)
    assert len(counts) == 1
    assert len(list(tmp_path.glob("*.e"))) == 5


def test_own_stores_over_the_limit_count_again_and_evict(tmp_path, monkeypatch, counts):
    monkeypatch.setenv("TRACEVIEW_CACHE_MAX_MB", str(2500 / 2**20))  # room for two entries of 1000 bytes
    for k in range(4):
        _put(tmp_path, f"a{k}", 1000)
    left = sorted(p.name for p in tmp_path.glob("*.e"))
    assert left == ["a2.e", "a3.e"] and len(counts) == 3      # counted at the first, third and fourth store


def test_what_another_process_stored_is_seen_at_the_next_count(tmp_path, monkeypatch, counts):
    monkeypatch.setenv("TRACEVIEW_CACHE_MAX_MB", str(2500 / 2**20))
    clock = [100.0]
    monkeypatch.setattr(store, "time", type("Clock", (), {"monotonic": staticmethod(lambda: clock[0])}))
    _put(tmp_path, "a0", 1000)
    (tmp_path / "other.e").write_bytes(b"y" * 1000)        # another process's entry, unknown to this one
    (tmp_path / "more.e").write_bytes(b"y" * 1000)
    _put(tmp_path, "a1", 100)                               # within the count's few seconds: not counted
    assert len(list(tmp_path.glob("*.e"))) == 4 and len(counts) == 1
    clock[0] += store._RECOUNT_S
    _put(tmp_path, "a2", 100)
    assert len(counts) == 2
    assert sum(p.stat().st_size for p in tmp_path.glob("*.e")) <= 2500
    assert (tmp_path / "a2.e").exists()
