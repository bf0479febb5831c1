"""How well the what-if projection predicts captured steps: capture a set of meshes and batches on the CPU
(tests/support/whatif_capture.py), project every capture onto every other, and judge the projections as
issue 42 asks (each within 25%, the measured order kept).

The integration test (tests/integration/test_whatif_meshes.py) judges one program with these functions, and
``python scripts/whatif_accuracy.py`` judges any: other block widths, other batches, more rounds. What is
judged:

* a (source, target) pair's error is the median over rounds of (projected / measured - 1), where round r's
  projection from the source is compared with the target's step in round r (the captures are traced in turn,
  round by round, so that the two ran within moments of each other);
* which pairs of configurations the measurement orders is decided from the rounds (:func:`median_interval`):
  a configuration is measurably slower than another when its median's interval lies wholly above the other's;
* a projection orders such a pair wrongly when it puts the slower one at or below the faster one.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "whatif_capture.py"
MESHES = {"d8": "data=8", "f8": "fsdp=8", "d2t4": "data=2,tensor=4", "f4t2": "fsdp=4,tensor=2"}
# The confidence of the interval that decides whether the measurement orders two configurations
CONFIDENCE = 0.95
WITHIN = 0.25

# (source, target) -> [(projected step us, the target's measured step us) per round]
Pairs = dict[tuple[str, str], list[tuple[float, float]]]


def cases(batches: tuple[int, ...]) -> list[str]:
    """The capture script's cases for the four meshes at each batch: ``name:batch:mesh``."""
    return [f"{m}_b{b}:{b}:{spec}" for m, spec in MESHES.items() for b in batches]


def capture_dirs(out: Path, batches: tuple[int, ...]) -> dict[str, Path]:
    """Where :func:`capture` puts each case under OUT: name -> its log folder."""
    return {name: out / name for name in (case.split(":")[0] for case in cases(batches))}


def capture(out: Path, batches: tuple[int, ...], rounds: int, steps: int, ffn: str | None = None,
            timeout: float = 600) -> dict[str, Path]:
    """Capture the four meshes at each batch into OUT (a subprocess: JAX on the CPU, 8 devices, one core),
    ``rounds`` rounds of ``steps`` traced steps; name -> its log folder. Raises with the script's error."""
    dump = out / "dump"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "WHATIF_DUMP": str(dump), "WHATIF_ROUNDS": str(rounds),
           "WHATIF_STEPS": str(steps), "PYTHONHASHSEED": "0",
           "XLA_FLAGS": f"--xla_force_host_platform_device_count=8 --xla_cpu_multi_thread_eigen=false "
                        f"--xla_dump_to={dump} --xla_dump_hlo_as_text --xla_dump_hlo_as_proto"}
    if ffn is not None:
        env["WHATIF_FFN"] = ffn
    done = subprocess.run([sys.executable, str(SCRIPT), str(out), *cases(batches)], env=env, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the capture failed ({done.returncode}): {done.stderr[-3000:]}")
    return capture_dirs(out, batches)


def project_all(captures: dict[str, Path], rounds: int) -> dict:
    """Each capture's every round projected onto every capture's configuration: {"pairs": Pairs, "meta":
    name -> capture.json, "reports": (name, round) -> the what-if report}."""
    import traceview

    meta = {name: json.loads((path / "capture.json").read_text()) for name, path in captures.items()}
    batches = sorted({str(m["batch"]) for m in meta.values()}, key=float)
    analyses = {(name, r): traceview.load(path, run=f"r{r}") for name, path in captures.items()
                for r in range(rounds)}
    measured = {key: float(a.pipeline.steps["time_ps"].mean()) / 1e6 for key, a in analyses.items()}
    pairs: Pairs = {}
    reports = {}
    for (source, r), analysis in analyses.items():
        report = analysis.whatif(meshes=[m["mesh"] for m in meta.values()], batches=batches)
        reports[(source, r)] = report
        by_config = {(tuple(sorted(p.config.mesh.items())), p.config.batch): p for p in report.projections}
        for target, m in meta.items():
            p = by_config[(tuple(sorted(m["mesh"].items())), float(m["batch"]))]
            if p.step_ps is None:
                raise AssertionError(f"{source} projects no step for {target}: {p.step_reason}")
            pairs.setdefault((source, target), []).append((p.step_ps / 1e6, measured[(target, r)]))
    return {"pairs": pairs, "meta": meta, "reports": reports}


def median_error(rounds: list[tuple[float, float]]) -> float:
    return statistics.median(projected / measured - 1 for projected, measured in rounds)


def errors(pairs: Pairs) -> dict[tuple[str, str], float]:
    """Each (source, target)'s median error over the rounds, source and target different."""
    names = _names(pairs)
    return {(s, t): median_error(pairs[(s, t)]) for s in names for t in names if s != t}


def median_interval(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A distribution-free interval for the median step of a configuration from its rounds: the k-th smallest
    and k-th largest of n values cover the median with probability 1 - 2 P(Binomial(n, 1/2) < k), for any
    distribution of the rounds; k is the largest that keeps this at least ``confidence`` (the smallest and
    largest of 6 rounds: 96.9%; the 4th smallest and largest of 16: 97.9%). Fewer than 6 rounds cannot reach
    95%: their smallest and largest."""
    ordered, n = sorted(values), len(values)

    def coverage(k: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n

    k = 1
    while k + 1 <= n // 2 and coverage(k + 1) >= confidence:
        k += 1
    return ordered[k - 1], ordered[n - k]


def measurably_distinct(pairs: Pairs) -> list[tuple[str, str]]:
    """The pairs (slower, faster) that the measurement orders: the slower one's median interval lies wholly
    above the faster one's."""
    names = _names(pairs)
    interval = {t: median_interval([m for _, m in pairs[(t, t)]]) for t in names}
    return [(a, b) for a in names for b in names if interval[a][0] > interval[b][1]]


def misordered(pairs: Pairs) -> tuple[list[tuple[str, str, str]], int]:
    """(source, slower, faster) for each measurably distinct pair a capture's projection does not order as
    measured (projected medians over rounds), and how many orderings were judged."""
    names = _names(pairs)
    distinct = measurably_distinct(pairs)
    wrong = []
    for source in names:
        projected = {t: statistics.median(p for p, _ in pairs[(source, t)]) for t in names}
        wrong += [(source, a, b) for a, b in distinct if projected[a] <= projected[b]]
    return wrong, len(distinct) * len(names)


@dataclass(frozen=True)
class Verdict:
    """One set's figures, as docs/whatif.md reports them."""
    pairs: int                       # cross-projections (56 for eight captures)
    within: int                      # of them, median error within WITHIN
    mean_abs_error: float
    largest_error: float
    batch_up: float | None           # mean error from the smaller batch onto the larger (any meshes)
    batch_down: float | None         # and from the larger onto the smaller
    distinct: int                    # pairs of configurations the measurement orders (of n(n-1)/2)
    orderings: int                   # their orderings judged (distinct x sources)
    wrong: list[tuple[str, str, str]]

    def line(self) -> str:
        def pct(x: float | None) -> str:
            return "n/a" if x is None else f"{x:+.1%}"
        share = 1 - len(self.wrong) / self.orderings if self.orderings else float("nan")
        return (f"within {WITHIN:.0%}: {self.within} of {self.pairs}; mean |error| {self.mean_abs_error:.3f}, "
                f"largest {self.largest_error:.3f}; twice the batch {pct(self.batch_up)}, half "
                f"{pct(self.batch_down)}; measurably distinct pairs {self.distinct}; wrong orderings "
                f"{len(self.wrong)} of {self.orderings} ({share:.1%} right)")


def verdict(pairs: Pairs, batch_of: dict[str, float]) -> Verdict:
    """The set's figures; ``batch_of`` is each capture's batch (the twice-the-batch bias compares the smallest
    and largest)."""
    errs = errors(pairs)
    low, high = min(batch_of.values()), max(batch_of.values())
    up = [e for (s, t), e in errs.items() if batch_of[s] == low and batch_of[t] == high]
    down = [e for (s, t), e in errs.items() if batch_of[s] == high and batch_of[t] == low]
    wrong, judged = misordered(pairs)          # each distinct pair judged once per source
    return Verdict(len(errs), sum(abs(e) <= WITHIN for e in errs.values()),
                   statistics.fmean(abs(e) for e in errs.values()), max(abs(e) for e in errs.values()),
                   statistics.fmean(up) if up and low != high else None,
                   statistics.fmean(down) if down and low != high else None,
                   judged // len(_names(pairs)), judged, wrong)


def error_table(pairs: Pairs) -> str:
    """Median error of every (source row, target column), and each target's measured median step in us."""
    names = _names(pairs)
    width = max(9, *(len(n) for n in names))
    head = " " * width + "".join(f"{t:>{width + 1}}" for t in names)
    rows = [f"{s:<{width}}" + "".join(f"{median_error(pairs[(s, t)]):>+{width + 1}.2f}" for t in names)
            for s in names]
    measured = f"{'measured':<{width}}" + "".join(
        f"{statistics.median(m for _, m in pairs[(t, t)]):>{width + 1}.0f}" for t in names)
    return "\n".join([head, *rows, measured])


def _names(pairs: Pairs) -> list[str]:
    return sorted({s for s, _ in pairs})
