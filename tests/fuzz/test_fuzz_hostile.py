"""The bounded fuzz run of the newer readers (trace JSON, StableHLO, history stores, GPU dumps) with the hostile
mutations of tests/support/fuzz_hostile.py; ``python scripts/fuzz.py --kinds newer`` is the long campaign.

Every case ends in a correct result or one clean error line naming the file; a case that must be refused
(recursion, impossible times, a damaged store) and is accepted is garbage; a history store a read or a
failed add changes, a native library's log on stderr, or a case over 4 GiB are findings too.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from tests.support import fuzz_hostile, fuzzing

pytestmark = pytest.mark.fuzz

CASES = int(os.environ.get("TRACEVIEW_FUZZ_HOSTILE_CASES", "150"))
SEED = int(os.environ.get("TRACEVIEW_FUZZ_SEED", "20261128"))


def _seeds() -> list[fuzzing.Seed]:
    return [s for s in fuzzing.default_seeds() if s.kind in fuzz_hostile.NEWER]


def test_the_cases_reach_every_newer_reader_with_hostile_input():
    seeds = _seeds()
    cases = list(fuzzing.make_cases(seeds, CASES, SEED))
    wanted = {"trace_json", "stablehlo"} | ({"history_db"} if any(s.kind == "history_db" for s in seeds) else set())
    assert wanted <= {c.kind for c in cases}
    refused = Counter(c.kind for c in cases if c.expect == "refused")
    assert all(refused[kind] for kind in wanted)


def test_bounded_fuzz_run_of_the_newer_readers(capsys):
    report = fuzzing.fuzz(CASES, SEED, seeds=_seeds(), timeout_s=60.0)
    with capsys.disabled():
        print("\n" + report.summary())
    assert report.cases == CASES
    assert report.outcomes["ok"] > CASES // 10 and report.outcomes["error"] > CASES // 10
    assert not report.findings, "\n".join(f.line() for f in report.findings[:20])


def test_the_oracle_catches_a_modified_store_and_native_noise(tmp_path):
    """The oracle itself: a store that a read changed is garbage; an absl log line on stderr is noise."""
    import sqlite3
    from contextlib import closing

    seed = fuzzing.history_seed()
    if seed is None:
        pytest.skip("the history extra is not installed")
    path = tmp_path / "h.db"
    path.write_bytes(seed)
    import traceview.history.trends as trends

    original = trends.build_report

    def writing(store, *args, **kwargs):
        with closing(sqlite3.connect(path)) as conn:
            conn.execute("UPDATE traceview_runs SET target = 'x'")
            conn.commit()
        return original(store, *args, **kwargs)

    trends.build_report = writing
    try:
        with pytest.raises(fuzzing.Garbage, match="modified the store"):
            fuzz_hostile.check_history_untouched(path)
    finally:
        trends.build_report = original
    assert fuzz_hostile.NATIVE_NOISE.search("E1128 12:00:00.000 hlo_sharding.cc:1054] RET_CHECK failure")
    assert not fuzz_hostile.NATIVE_NOISE.search("traceview: error: f.mlir: mhlo.sharding '{{{' is not")
