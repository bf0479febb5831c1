"""The what-if baseline and projection on a generated program: a stack of two or three residual MLP blocks of
random hidden widths (tests/support/whatif_capture.py, WHATIF_FFN), captured on the CPU with 8 simulated devices
under the four meshes of test_whatif_meshes and two random batches, one round each.

What must hold for any such program, and is tested: the mesh and the batch are read back as they were set;
the parameters P (every block's D x F and F x D matrices), the MLP width F (the widest block's) and the
activation bytes per token crossing a tensor axis (a matmul pair per block, forward and backward) are read
from the program's state and dots; and each capture projected onto its own configuration gives its measured
step within 2%. How close the cross-projections come on these programs is measured, not asserted
(docs/whatif.md, "How well it projects": the host model was calibrated on the one-block program of
test_whatif_meshes, and puts fewer of these within 25%). A failure names its seed: TRACEVIEW_WHATIF_SEED=<seed>
draws the same program again.
"""

from __future__ import annotations

import json
import os
import random

import pytest

import traceview
from tests.support.whatif_accuracy import capture
from traceview.whatif.baseline import measure

pytestmark = pytest.mark.slow

D_MODEL = 256       # the capture script's WIDTH
F32 = 4


def _draw(seed: int) -> tuple[list[int], list[int], str]:
    """Two or three distinct hidden widths (multiples of 64, so that every mesh's tensor and FSDP ways divide
    them) and two batches, the second twice the first, drawn so that an activation has a weight's shape in
    some capture: the rows a device of data 2 x tensor 4 holds equal one block's F / 4 (its activation
    all-reduce [T, D] has the shape of that block's second weight shard, and of its gradient), or the tokens
    per device equal D (x [T, D] has the shape of a gathered D x D weight). Shape rules cannot tell these
    apart; the readers must read the data flow."""
    rng = random.Random(seed)
    widths = rng.sample(range(128, 1537, 64), rng.choice((2, 3)))
    if rng.random() < 0.5:
        block = rng.randrange(len(widths))
        small, case = widths[block] // 2, f"data 2 x tensor 4 at batch {widths[block] // 2}: T = F/4 of block {block}"
    else:
        widths[0] = 4 * D_MODEL if D_MODEL * 4 not in widths[1:] else widths[0]
        small, case = 2 * D_MODEL, f"data 2 x tensor 4 at batch {2 * D_MODEL}: T = D"
    return widths, [small, small * 2], case


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict:
    pytest.importorskip("jax")
    seed = int(os.environ.get("TRACEVIEW_WHATIF_SEED") or int.from_bytes(os.urandom(4), "little"))
    widths, batches, case = _draw(seed)
    try:
        captures = capture(tmp_path_factory.mktemp("whatif_generated"), tuple(batches), rounds=1, steps=3,
                           ffn=",".join(map(str, widths)))
    except RuntimeError as failed:
        pytest.fail(f"seed {seed}: {failed}")
    return {"seed": seed, "widths": widths, "batches": batches, "case": case,
            "meta": {n: json.loads((path / "capture.json").read_text()) for n, path in captures.items()},
            "analyses": {n: traceview.load(path, run="r0") for n, path in captures.items()}}


def test_draws_are_programs_the_meshes_can_split():
    cases = set()
    for seed in range(200):
        widths, batches, case = _draw(seed)
        assert len(set(widths)) == len(widths) >= 2
        assert all(w % 64 == 0 for w in widths) and all(b % 8 == 0 for b in batches)
        rows = batches[0] // 2                              # data 2 x tensor 4
        assert rows == D_MODEL or any(rows == w // 4 for w in widths), (seed, widths, batches)
        cases.add(case.split(": ")[1].split(" of")[0])
    assert cases == {"T = F/4", "T = D"}


def test_shapes_and_state_read_back(generated):
    widths = generated["widths"]
    wrong = []
    for name, analysis in generated["analyses"].items():
        meta = generated["meta"][name]
        base = measure(analysis.pipeline, analysis.parallelism(), analysis.memory())
        got = {"mesh": {r: s for r, s in base.mesh.items() if s > 1}, "batch": base.batch_tokens,
               "P bytes": base.param_bytes, "F": base.ffn, "activation bytes": base.activation_bytes_per_token}
        want = {"mesh": meta["mesh"], "batch": meta["batch"], "P bytes": sum(2 * D_MODEL * f for f in widths) * F32,
                "F": max(widths), "activation bytes": len(widths) * 2 * D_MODEL * F32}
        wrong += [(name, k, got[k], want[k]) for k in want if got[k] != want[k]]
    assert not wrong, (generated["seed"], widths, generated["batches"], generated["case"], wrong)


def test_each_capture_projected_onto_itself_within_2_percent(generated):
    batches = [str(b) for b in generated["batches"]]
    meshes = [m["mesh"] for m in generated["meta"].values()]
    for name, analysis in generated["analyses"].items():
        meta = generated["meta"][name]
        measured = float(analysis.pipeline.steps["time_ps"].mean())
        report = analysis.whatif(meshes=meshes, batches=batches)
        own = next(p for p in report.projections if p.config.batch == meta["batch"]
                   and {r: s for r, s in p.config.mesh.items() if s > 1} == meta["mesh"])
        assert own.step_ps == pytest.approx(measured, rel=0.02), (generated["seed"], generated["widths"], name)
        assert all(p.step_ps is not None and p.step_ps > 0 for p in report.projections), (generated["seed"], name)
