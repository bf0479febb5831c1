"""Judge the what-if projection on a program captured on the CPU: ``python scripts/whatif_accuracy.py``.

Captures one step of a stack of MLP blocks (tests/support/whatif_capture.py: JAX on the CPU, 8 devices, one
core) under four meshes (data 8; FSDP 8; data 2 x tensor 4; FSDP 4 x tensor 2) at each batch, round by round,
projects every capture onto every other, and prints what issue 42 asks of the projection (each within 25%,
the measured order kept) with the error of each pair. The integration test judges the default program this
way; the options give others (docs/whatif.md, "How well it projects"):

    python scripts/whatif_accuracy.py --ffn 1024,256 --batches 2560,5120 --out /tmp/set

``--out DIR`` keeps the captures (and judges DIR again without capturing when it already holds them:
``--judge-only``). ``--cores all`` lets the devices spread over every core: on a machine with eight or more,
each virtual device has a core of its own, as each chip of a pod has its own compute. Exit 0, whatever the verdict: it reports, it does not gate. Needs jax (the test extra).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.whatif_accuracy import (  # noqa: E402
    capture,
    capture_dirs,
    error_table,
    project_all,
    verdict,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ffn", default="768", help="the blocks' hidden widths, comma-separated (multiples of 32)")
    parser.add_argument("--batches", default="320,640", help="global batches in tokens, comma-separated")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=4, help="traced steps per round")
    parser.add_argument("--out", type=Path, default=None, help="keep the captures here (default: a temp dir)")
    parser.add_argument("--judge-only", action="store_true", help="judge the captures already in --out")
    parser.add_argument("--cores", choices=("1", "all"), default="1",
                        help="run the eight devices on one core (the test's setting) or on every core the "
                             "machine has (with eight or more, no two devices share one)")
    args = parser.parse_args()
    os.environ["WHATIF_CORES"] = args.cores        # read by the capture script, which inherits the environment
    batches = tuple(int(b) for b in args.batches.split(","))
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        if args.judge_only:
            if args.out is None:
                parser.error("--judge-only needs --out")
            captures = capture_dirs(out, batches)
        else:
            out.mkdir(parents=True, exist_ok=True)
            captures = capture(out, batches, args.rounds, args.steps, args.ffn, timeout=3600)
        result = project_all(captures, args.rounds)
    batch_of = {name: float(m["batch"]) for name, m in result["meta"].items()}
    judged = verdict(result["pairs"], batch_of)
    print(f"FFN {args.ffn}, batches {args.batches}, {args.rounds} rounds of {args.steps} steps")
    print(judged.line())
    print("median error, source (row) projected onto target (column); the targets' measured medians in us:")
    print(error_table(result["pairs"]))
    if judged.wrong:
        print("wrong orderings (source: slower, faster as measured):")
        for source, slower, faster in judged.wrong:
            print(f"  {source}: {slower} > {faster}")
    if args.out is not None:
        (out / "pairs.json").write_text(json.dumps({f"{s}|{t}": v for (s, t), v in result["pairs"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
