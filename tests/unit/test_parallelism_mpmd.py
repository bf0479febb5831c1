"""A pipeline that runs a program per stage, measured from op executions (traceview.parallelism.mpmd).

Synthetic execution tables with known schedules: a GPipe fill-and-drain of equal stages has exactly the
formula's bubble (p - 1)/(m + p - 1); the tables that are no such pipeline give None.
"""

from __future__ import annotations

import pandas as pd
import pytest

from traceview.parallelism.mpmd import measure_mpmd

US = 1_000_000   # picoseconds
TICK = 12        # us a stage takes per microbatch (3 ops of 4 us)


def _gpipe(p: int, m: int, steps: int = 1, ops_per_run: int = 3, stage_us: float = TICK, gap_us: float = 50.0,
           program=lambda s: f"jit_stage{s}") -> pd.DataFrame:
    """Stage s runs microbatch k in tick s + k (each tick stage_us long), ops_per_run ops back to back."""
    rows = []
    step_len = (m + p - 1) * stage_us + gap_us
    for step in range(steps):
        for s in range(p):
            for k in range(m):
                start = step * step_len + (s + k) * stage_us
                for i in range(ops_per_run):
                    rows.append({"device": f"/device:GPU:{s}", "module": program(s), "program_id": 10 + s,
                                 "op": f"fusion.{i}", "start_ps": int((start + i * stage_us / ops_per_run) * US),
                                 "duration_ps": int(stage_us / ops_per_run * US), "step": step})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("p, m", [(2, 1), (3, 2), (4, 6), (4, 16)])
def test_equal_stages_have_the_formula_bubble(p, m):
    found = measure_mpmd(_gpipe(p, m, steps=2))
    assert found is not None and found.p == p and found.microbatches == m and found.steps == 2
    assert found.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
    assert found.formula_bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
    assert found.in_sequence == ((p - 1) * m * 2, (p - 1) * m * 2)
    for st in found.stages:
        # stage s waits s ticks to fill and p - 1 - s to drain, of m + p - 1 ticks
        assert st.idle_before_ps == pytest.approx(st.stage * TICK * US)
        assert st.idle_after_ps == pytest.approx((p - 1 - st.stage) * TICK * US)
        assert st.busy_ps == pytest.approx(m * TICK * US) and st.idle_between_ps == pytest.approx(0)
        assert st.span_ps == pytest.approx((m + p - 1) * TICK * US)
        assert st.programs == [f"jit_stage{st.stage}"] and st.devices == [f"/device:GPU:{st.stage}"]


def test_stages_ordered_by_time_not_by_name():
    table = _gpipe(3, 2, program=lambda s: f"jit_{'cba'[s]}")     # stage 0 is "jit_c"
    found = measure_mpmd(table.sample(frac=1.0, random_state=0))  # row order says nothing
    assert found is not None and [s.programs for s in found.stages] == [["jit_c"], ["jit_b"], ["jit_a"]]


def test_a_slow_stage_idles_its_neighbours():
    """Stage 1 of 2 takes twice as long per microbatch: stage 0 waits for it to drain (by hand)."""
    rows = []
    for k in range(2):                      # stage 0: [10k, 10k + 10); stage 1: starts at max(10k+10, end of k-1)
        rows.append({"device": "d0", "module": "a", "op": "f", "start_ps": 10 * k * US, "duration_ps": 10 * US,
                     "step": 0})
    for start in (10, 30):
        rows.append({"device": "d1", "module": "b", "op": "g", "start_ps": start * US, "duration_ps": 20 * US,
                     "step": 0})
    found = measure_mpmd(pd.DataFrame(rows))
    assert found is not None
    span = 50
    s0, s1 = found.stages
    assert (s0.idle_before_ps, s0.idle_after_ps) == (0, (span - 20) * US)
    assert (s1.idle_before_ps, s1.idle_after_ps) == (10 * US, 0)
    assert found.bubble_fraction == pytest.approx(((span - 20) / span + 10 / span) / 2)


def test_not_a_pipeline():
    same = _gpipe(3, 2, program=lambda s: "jit_train_step")
    named_alike = measure_mpmd(same)          # one name, but each stage compiled its own program (program ids)
    assert named_alike is not None and named_alike.p == 3
    same["program_id"] = 7
    assert measure_mpmd(same) is None                             # one program everywhere: SPMD
    shared = _gpipe(3, 2)
    also = shared[shared["device"] == "/device:GPU:1"].assign(device="/device:GPU:2")
    shared = pd.concat([shared, also.assign(start_ps=also["start_ps"] + 100 * US)])
    assert measure_mpmd(shared) is None          # GPU:2 runs stage 1's program too: the stages are not apart
    replicated = _gpipe(3, 2)
    twin = replicated[replicated["device"] == "/device:GPU:2"].assign(device="/device:GPU:3")
    both = measure_mpmd(pd.concat([replicated, twin]))
    # two devices running the same program are one stage (a stage that is itself SPMD)
    assert both is not None and both.p == 3 and both.stages[2].devices == ["/device:GPU:2", "/device:GPU:3"]
    backwards = _gpipe(3, 2)
    backwards["start_ps"] = backwards["start_ps"].max() - backwards["start_ps"]   # time reversed
    reordered = measure_mpmd(backwards)
    # reversed in time it is again a pipeline, stage order reversed (stage 2 first)
    assert reordered is not None and reordered.stages[0].programs == ["jit_stage2"]
    parallel = _gpipe(3, 2)
    parallel["start_ps"] = parallel.groupby("device")["start_ps"].transform(lambda s: s - s.min())
    assert measure_mpmd(parallel) is None                         # all stages at once: no one waits on another
    assert measure_mpmd(_gpipe(1, 4)) is None
    assert measure_mpmd(pd.DataFrame()) is None


SEND_RECV = """HloModule stage_send, num_partitions=4

ENTRY %main (x: f32[64,128]) -> f32[64,128] {
  %x = f32[64,128]{1,0} parameter(0)
  %tok = token[] after-all()
  %s = (f32[64,128]{1,0}, u32[], token[]) send(%x, %tok), channel_id=1, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1},{1,2},{2,3}}"}
  %sd = token[] send-done(%s), channel_id=1
  %r = (f32[64,128]{1,0}, u32[], token[]) recv(%tok), channel_id=2, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1},{1,2},{2,3}}"}
  %rd = (f32[64,128]{1,0}, token[]) recv-done(%r), channel_id=2
  ROOT %y = f32[64,128]{1,0} get-tuple-element(%rd), index=0
}
"""


@pytest.mark.parametrize("pairs", [True, False])
def test_diagnose_adds_the_measured_stage_axis(pairs):
    """Programs per stage passing activations with send/recv: the send/recv's pairs give the mesh axis the
    measured bubble and the GPipe verdict go to; without pairs (no mesh from them) the report gets a ``stage``
    axis; measured only with several programs run."""
    from traceview.parallelism.diagnose import DiagnoseInputs, diagnose
    from traceview.parsers.hlo.text import parse_hlo_text

    text = SEND_RECV if pairs else SEND_RECV.replace('_xla_send_recv_source_target_pairs="{{0,1},{1,2},{2,3}}"',
                                                     '_xla_other="1"')
    table = _gpipe(4, 4, steps=2)
    ran = set(table["module"])
    report = diagnose(DiagnoseInputs([parse_hlo_text(text)], ran=ran, executions=lambda: table))
    (axis,) = [a for a in report.axes if a.pipeline is not None]
    assert axis.name == ("axis0" if pairs else "stage") and axis.size == 4 and axis.role.role == "pipeline"
    assert axis.pipeline.bubble_fraction == pytest.approx(3 / 7) and axis.pipeline.microbatches == 4
    # GPipe's m >= 4p: (p - 1)/(5p - 1) = 3/19 < 3/7
    assert axis.verdict.verdict == "bubble-bound" and axis.verdict.threshold == pytest.approx(3 / 19)
    assert not any(w.startswith("mesh not determined") for w in report.warnings) or not pairs
    one = diagnose(DiagnoseInputs([parse_hlo_text(text)], ran={"stage_send"}, executions=lambda: table))
    # one program ran: nothing measured
    assert [a.pipeline.bubble_fraction for a in one.axes if a.pipeline is not None] == ([None] if pairs else [])


def _forward_backward(p: int, m: int, one_f_one_b: bool) -> pd.DataFrame:
    """Each stage runs a forward and a backward program per microbatch (one tick each): GPipe (all forwards,
    then all backwards) or 1F1B (p - s - 1 warm-up forwards, then one forward and one backward in turn). Each
    op starts when its stage is free and its input is ready (the forward of stage s - 1, the backward of stage
    s + 1 and its own forward)."""
    order = {}
    for s in range(p):
        if one_f_one_b:
            warm = min(p - s - 1, m)
            seq = [("f", k) for k in range(warm)]
            for k in range(m - warm):
                seq += [("f", warm + k), ("b", k)]
            seq += [("b", k) for k in range(m - warm, m)]
        else:
            seq = [("f", k) for k in range(m)] + [("b", k) for k in range(m)]
        order[s] = seq
    end: dict[tuple[str, int, int], float] = {}
    free = [0.0] * p
    placed = {s: 0 for s in range(p)}
    rows = []
    while any(placed[s] < len(order[s]) for s in range(p)):
        for s in range(p):
            while placed[s] < len(order[s]):
                kind, k = order[s][placed[s]]
                needs = [("f", s - 1, k)] if kind == "f" and s > 0 else []
                needs += [("f", s, k)] + ([("b", s + 1, k)] if s < p - 1 else []) if kind == "b" else []
                if any(n not in end for n in needs):
                    break
                start = max([free[s]] + [end[n] for n in needs])
                end[(kind, s, k)] = free[s] = start + TICK
                rows.append({"device": f"d{s}", "module": f"jit_s{s}_{'0fwd' if kind == 'f' else '1bwd'}",
                             "program_id": 2 * s + (kind == "b"), "op": "fusion.0", "start_ps": int(start * US),
                             "duration_ps": int(TICK * US), "step": 0})
                placed[s] += 1
    return pd.DataFrame(rows)


@pytest.mark.parametrize("p, m", [(2, 4), (4, 4), (4, 8)])
def test_gpipe_and_1f1b_are_told_apart_and_compared_with_their_formula(p, m):
    gpipe, ofob = measure_mpmd(_forward_backward(p, m, False)), measure_mpmd(_forward_backward(p, m, True))
    assert gpipe is not None and ofob is not None
    assert gpipe.schedule_name == "GPipe" and gpipe.alternations == 0
    assert ofob.schedule_name == "1F1B" and ofob.alternations > 0
    for found in (gpipe, ofob):
        assert found.microbatches == m and found.formula_bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
        # equal forward and backward ticks: each stage idles 2 (p - 1) of 2 (m + p - 1) ticks
        assert found.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
        assert "1F1B" in found.how() if found is ofob else "GPipe schedule" in found.how()


def _interleaved_table(p: int, m: int, v: int, kind: str, seed: int, forward: float = TICK,
                       backward: float = 2 * TICK) -> tuple[pd.DataFrame, list]:
    """A worked-out schedule (tests/support/pipeline_schedules.py) as op executions: one program per (stage,
    chunk, direction) under a random name (so order by name says nothing), two ops per execution."""
    import numpy as np

    from tests.support.pipeline_schedules import schedule

    rng = np.random.default_rng(seed)
    work = schedule(p, m, v, kind, forward, backward)
    names = {key: "jit_" + "".join(rng.choice(list("abcdefghij"), 6)) for key in
             {(w.stage, w.chunk, w.kind) for w in work}}
    ids = {key: i for i, key in enumerate(names)}
    rows = []
    for w in work:
        half = (w.end - w.start) / 2
        for i in range(2):
            rows.append({"device": f"/device:GPU:{w.stage}", "module": names[(w.stage, w.chunk, w.kind)],
                         "program_id": ids[(w.stage, w.chunk, w.kind)], "op": f"fusion.{i}",
                         "start_ps": int((w.start + i * half) * US), "duration_ps": int(half * US), "step": 0})
    return pd.DataFrame(rows).sample(frac=1.0, random_state=seed), work


def _hand_bubble(work: list, p: int) -> float:
    """Each stage's idle time in the step over the step's span (every idle moment: the stages run forward
    and backward programs), the mean over stages."""
    span = max(w.end for w in work) - min(w.start for w in work)
    return sum((span - sum(w.end - w.start for w in work if w.stage == s)) / span for s in range(p)) / p


@pytest.mark.parametrize("p, m, v, kind, name", [
    (2, 4, 2, "1f1b", "interleaved 1F1B"), (4, 8, 2, "1f1b", "interleaved 1F1B"),
    (4, 4, 3, "1f1b", "interleaved 1F1B"), (3, 6, 2, "gpipe", "interleaved"), (4, 5, 3, "gpipe", "interleaved"),
    (4, 8, 1, "1f1b", "1F1B"), (3, 5, 1, "gpipe", "GPipe")])
def test_interleaved_schedules_are_named_from_the_order_programs_run(p, m, v, kind, name):
    """v model chunks per stage, each a forward and a backward program: the stage timeline gives v, m, the
    schedule's name, its formula (p - 1)/(v·m + p - 1) and the measured bubble equal to the hand count."""
    for seed in range(3):
        table, work = _interleaved_table(p, m, v, kind, seed)
        found = measure_mpmd(table)
        assert found is not None and found.p == p, (p, m, v, kind, seed)
        assert (found.microbatches, found.virtual_stages, found.schedule_name) == (m, v, name), seed
        assert found.formula_bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1))
        assert found.bubble_fraction == pytest.approx(_hand_bubble(work, p), rel=1e-6)
        assert name in found.how() and ("(p - 1)/(v·m + p - 1)" in found.how()) == (v > 1)


def test_interleaving_cuts_the_measured_bubble_as_the_formula_says():
    """Megatron-LM's claim, measured: the same p and m with v = 2 chunks of half the work each idle less."""
    p, m = 4, 8
    plain = measure_mpmd(_interleaved_table(p, m, 1, "1f1b", 0, 2 * TICK, 4 * TICK)[0])
    split = measure_mpmd(_interleaved_table(p, m, 2, "1f1b", 0, TICK, 2 * TICK)[0])
    assert plain.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), rel=1e-6)
    assert split.bubble_fraction == pytest.approx((p - 1) / (2 * m + p - 1), rel=0.05)
    assert split.bubble_fraction < plain.bubble_fraction


def test_two_forward_programs_that_are_no_chunks_stay_one_stage_program():
    """Two forward programs per stage run side by side (each feeds its own next stage, never the first stage
    again): no chunk chain, so no interleaved schedule."""
    table, _ = _interleaved_table(3, 4, 1, "gpipe", 0)
    forward = table.sort_values("start_ps").groupby("device")["module"].first()    # each stage's forward
    twin = table[table["module"].isin(forward)].copy()
    twin["module"] = twin["module"] + "_twin"
    twin["program_id"] = twin["program_id"] + 100
    twin["start_ps"] = twin["start_ps"] + 1
    found = measure_mpmd(pd.concat([table, twin]))
    assert found is not None and found.virtual_stages == 1 and found.schedule_name in ("GPipe", "1F1B")
