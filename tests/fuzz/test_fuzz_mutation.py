"""The bounded mutation-fuzz run of the default suite: 1,000 hostile inputs built from the samples and real traces.

Every case must end in a correct result or one clean error line naming the file
(see tests/support/fuzzing.py for the oracle). The seed is fixed so a failure
reproduces; set TRACEVIEW_FUZZ_SEED to explore others, or run the long
campaign with ``python scripts/fuzz.py``.
"""

from __future__ import annotations

import os

import pytest

from tests.support import fuzzing

pytestmark = pytest.mark.fuzz

CASES = int(os.environ.get("TRACEVIEW_FUZZ_CASES", "1000"))
SEED = int(os.environ.get("TRACEVIEW_FUZZ_SEED", "20261123"))


def test_bounded_fuzz_run(capsys):
    report = fuzzing.fuzz(CASES, SEED, timeout_s=30.0)
    with capsys.disabled():
        print("\n" + report.summary())
    assert report.cases == CASES
    # The run must reach past the readers' first checks, or it tests nothing: accepted inputs exist.
    assert report.outcomes["ok"] > CASES // 10
    assert not report.findings, "\n".join(f.line() for f in report.findings[:20])


def test_oracle_catches_garbage_and_crashes(tmp_path):
    """The oracle itself: a negative time is garbage, an unexpected exception a crash, a UserError fine."""
    import pandas as pd

    with pytest.raises(fuzzing.Garbage):
        fuzzing._check_frame(pd.DataFrame({"duration_ps": [5, -1]}), ("duration_ps",), "ops")
    with pytest.raises(fuzzing.Garbage):
        fuzzing._check_json_numbers({"ops": [{"self_time_us": float("nan")}]})
    fuzzing._check_json_numbers({"ops": [{"gap_us": -3.0, "self_time_us": 1.0}]})  # a gap may be negative
    case = fuzzing.Case(0, "x", "baseline", "none", "b.json", b"{not json")
    assert fuzzing.run_one(case, tmp_path) == ("error", "")
    case = fuzzing.Case(1, "x", "config", "none", "c.toml", b'[check]\nmax_step_regression = "5%"\n')
    assert fuzzing.run_one(case, tmp_path)[0] == "ok"


def test_the_compiled_reader_loads_before_any_case_is_timed():
    """A fresh clone compiles numba's kernels on first use (15-40 s): that must happen in the parent,
    before the forked workers' per-case alarm runs, or the first xplane case is reported as a hang."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("numba")
    script = (
        "from tests.support import fuzzing\n"
        "from traceview.parsers.xspace import fast as xspace_fast\n"
        "from traceview.parsers.native import loader as native_loader\n"
        "assert not native_loader.loaded()\n"
        "seeds = [s for s in fuzzing.default_seeds(shared=False) if s.kind == 'config'][:1]\n"
        "report = fuzzing.fuzz(1, 1, seeds=seeds, timeout_s=30.0)\n"
        "assert report.cases == 1\n"
        "print(native_loader.loaded())\n"
    )
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True"
