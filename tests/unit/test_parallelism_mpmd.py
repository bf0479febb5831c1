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


def test_diagnose_adds_the_measured_stage_axis():
    """Programs per stage passing activations with send/recv (no mesh from them): the report gets a
    ``stage`` axis with the measured bubble and the GPipe verdict; only with several programs run."""
    from traceview.parallelism.diagnose import DiagnoseInputs, diagnose
    from traceview.parsers.hlo.text import parse_hlo_text

    table = _gpipe(4, 4, steps=2)
    ran = set(table["module"])
    report = diagnose(DiagnoseInputs([parse_hlo_text(SEND_RECV)], ran=ran, executions=lambda: table))
    (axis,) = report.axes
    assert axis.name == "stage" and axis.size == 4 and axis.role.role == "pipeline"
    assert axis.pipeline.bubble_fraction == pytest.approx(3 / 7) and axis.pipeline.microbatches == 4
    # GPipe's m >= 4p: (p - 1)/(5p - 1) = 3/19 < 3/7
    assert axis.verdict.verdict == "bubble-bound" and axis.verdict.threshold == pytest.approx(3 / 19)
    assert not any(w.startswith("mesh not determined") for w in report.warnings)
    one = diagnose(DiagnoseInputs([parse_hlo_text(SEND_RECV)], ran={"stage_send"}, executions=lambda: table))
    assert one.axes == []                                      # one program ran: nothing measured


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
