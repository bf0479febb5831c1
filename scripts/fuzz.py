"""The long fuzz campaign: ``python scripts/fuzz.py [--cases N] [--seed S] [--timeout SECONDS]``.

Mutates the project's sample traces and HLO files, the real traces of
../shared/traces when present, and sample baselines, configs and hardware files,
and feeds each case to the reader it targets (see tests/support/fuzzing.py). Prints the
seed first, then a line per finding as it happens and a summary; exits 1 when
anything crashed, hung, died, passed the memory bound, was accepted where it
must be refused or with impossible numbers, spoke more than one line, or
modified a history store it only read. ``--kinds newer`` runs the trace JSON,
StableHLO, history store and GPU dump readers only (tests/support/fuzz_hostile.py).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import fuzz_hostile, fuzzing  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per case before it counts as a hang")
    parser.add_argument("--no-shared", action="store_true", help="only the project's own samples as seeds")
    parser.add_argument("--kinds", default=None,
                        help="only these readers, comma-separated (e.g. trace_json,history_db), or 'newer': "
                             f"{','.join(fuzz_hostile.NEWER)}")
    args = parser.parse_args()
    seeds = fuzzing.default_seeds(shared=not args.no_shared)
    if args.kinds:
        kinds = set(fuzz_hostile.NEWER if args.kinds == "newer" else args.kinds.split(","))
        seeds = [s for s in seeds if s.kind in kinds]
        if not seeds:
            parser.error(f"--kinds {args.kinds}: no seed of these readers")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    print(f"fuzz seed {seed} ({args.cases} cases); rerun with --seed {seed}", flush=True)
    seen = 0

    def progress(number: int, report: fuzzing.Report) -> None:
        nonlocal seen
        for finding in report.findings[seen:]:
            print(finding.line(), flush=True)
        seen = len(report.findings)
        if (number + 1) % 500 == 0:
            print(f"  {number + 1} cases: {dict(report.outcomes)}", flush=True)

    report = fuzzing.fuzz(args.cases, seed, seeds, timeout_s=args.timeout, progress=progress)
    print(report.summary())
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
