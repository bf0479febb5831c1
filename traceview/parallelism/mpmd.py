"""Pipelines that run a different program per stage (MPMD), measured in the trace.

Such a pipeline has no schedule loop to read a trip count from: each stage is
its own program on its own devices, and activations move between programs
(device-to-device copies, send/recv, or a framework's ``device_put``). What
the trace shows instead is when each stage ran. From the op executions:

* stages: groups of devices that run the same programs, no program shared
  between groups (a program is its module name and program id), ordered by
  when each first runs in a step;
* a program execution starts at each occurrence of its first op (the op that
  opens the program in the step); microbatches are a stage's executions per
  step;
* in sequence: stage s + 1's k-th execution starts only after stage s's k-th
  ended (it waits for the activation), for at least 90% of the pairs; without
  that the programs are not a pipeline and nothing is reported;
* the bubble of a stage in a step: its idle time before its first op and
  after its last, within the step's span (first op start to last op end over all
  stages), the time it waits on its neighbours to fill and drain the pipeline;
  idle time between its microbatches is reported apart, and counted in the
  bubble only for a stage that runs a forward and a backward program (the
  backward pass fills from the last stage mid-step). The
  pipeline's bubble fraction is the mean over stages and steps of
  (idle before + idle after) / step span; the GPipe formula
  (p - 1)/(m + p - 1) is given beside it (equal stage times, no gaps);
* several programs per stage chained into one microbatch path are model chunks (:mod:`chunks`): an
  interleaved schedule, compared with (p - 1)/(v·m + p - 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceview.parallelism.chunks import read_chunks

MIN_STAGES = 2
# The share of (stage s, stage s + 1) execution pairs that must run in order. CPU captures, where several
# "devices" share two cores, show one pair out of order now and then (1 of 42 in a generated 4-stage run):
# a pipeline's pairs nearly all hold, programs that merely run side by side hold about none.
IN_SEQUENCE = 0.9


@dataclass
class StageIdle:
    """One stage's measured time, means per step (picoseconds)."""
    stage: int
    devices: list[str]
    programs: list[str]
    microbatches: int            # executions of its program per step (the median over steps)
    busy_ps: float               # its executions' time
    idle_before_ps: float        # from the step's start to its first microbatch
    idle_after_ps: float         # from its last microbatch to the step's end
    idle_between_ps: float       # between its microbatches
    span_ps: float               # the step's span
    bubble_fraction: float       # (idle before + idle after) / span, the mean over steps


@dataclass
class MeasuredSchedule:
    """An MPMD pipeline as the trace shows it."""
    stages: list[StageIdle]
    microbatches: int | None     # None when the stages disagree
    steps: int
    bubble_fraction: float       # the mean of the stages'
    formula_bubble_fraction: float | None   # (p - 1)/(m + p - 1)
    in_sequence: tuple[int, int]            # (pairs in order, pairs checked)
    executions: pd.DataFrame = field(repr=False)   # stage, step, microbatch, start_ps, end_ps
    schedule_name: str = "GPipe"            # GPipe: each stage's programs run in blocks; 1F1B: they alternate
    alternations: int = 0                   # program changes beyond one block each, summed over a step's stages
    virtual_stages: int = 1                 # v: model chunks per stage (an interleaved schedule, :mod:`chunks`)
    chunks: str = ""                        # how the chunks were read

    def drawn_step(self) -> int:
        """The step to draw: the one whose span is the median."""
        spans = self.executions.groupby("step").agg(start=("start_ps", "min"), end=("end_ps", "max"))
        spans = (spans["end"] - spans["start"]).sort_values(kind="stable")
        return int(spans.index[(len(spans) - 1) // 2])

    @property
    def p(self) -> int:
        return len(self.stages)

    def how(self) -> str:
        names = "; ".join(f"stage {s.stage}: {', '.join(s.programs)} on {', '.join(s.devices)}"
                          for s in self.stages)
        held, checked = self.in_sequence
        m, v = self.microbatches, self.virtual_stages
        formula = "; the stages run different numbers of microbatches: no formula" if m is None else (
            f"; the formula (p - 1)/(m + p - 1) = {self.p - 1}/{m + self.p - 1} = {(self.p - 1) / (m + self.p - 1):.4f}"
            if v == 1 else f"; the formula (p - 1)/(v·m + p - 1) = {self.p - 1}/({v}·{m} + {self.p - 1}) = "
            f"{(self.p - 1) / (v * m + self.p - 1):.4f}")
        order = (f"{v} model chunks per stage ({self.chunks}): an {self.schedule_name} schedule" if v > 1 else
                 "forward and backward programs alternate on a stage (one forward, one backward in the steady "
                 "state): a 1F1B schedule, whose bubble has GPipe's formula" if self.schedule_name == "1F1B" else
                 "each stage runs its programs' executions in one block each: a GPipe schedule")
        return (f"measured in the trace (a program per stage), {order}: {names}; each stage runs its program "
                f"{'/'.join(str(s.microbatches) for s in self.stages)} times per step, stage s + 1's k-th "
                f"execution after stage s's ({held} of {checked}); bubble = each stage's idle time before its "
                f"first and after its last microbatch over the step span, mean of {self.p} stages over "
                f"{self.steps} step(s){formula}")


def measure_mpmd(executions: pd.DataFrame) -> MeasuredSchedule | None:
    """The measured schedule of a pipeline whose stages run their own programs, or None when the trace shows no
    such pipeline. ``executions``: the op executions (device, module, program_id, op, start_ps, duration_ps,
    step), one row each."""
    need = {"device", "module", "op", "start_ps", "duration_ps", "step"}
    if executions is None or executions.empty or not need <= set(executions.columns):
        return None
    keys = [c for c in ("device", "module", "program_id") if c in executions.columns]
    stages = _stages(_program_frame(executions[keys].drop_duplicates()))
    if stages is None:      # decided on the (device, program) pairs, before the executions are copied
        return None
    ops = _op_frame(executions)
    ops["stage"] = ops["device"].map(stages).astype("int64")
    runs, alternations, every = _program_runs(ops)
    order = runs.groupby("stage")["start_ps"].min().sort_values().index.to_numpy()
    rank = {int(s): i for i, s in enumerate(order)}
    runs["stage"] = runs["stage"].map(rank)
    ops["stage"] = ops["stage"].map(rank)
    held, checked = _in_sequence(runs)
    if checked == 0 or held < IN_SEQUENCE * checked:
        return None
    found = _schedule(ops, runs, held, checked)
    if found is not None:
        found.alternations = alternations
        found.schedule_name = "1F1B" if alternations else "GPipe"
        chunks = read_chunks(every.assign(stage=every["stage"].map(rank)))
        if chunks.virtual_stages > 1:
            found.virtual_stages, found.chunks = chunks.virtual_stages, chunks.evidence
            found.schedule_name = "interleaved 1F1B" if chunks.alternations else "interleaved"
            m, p = found.microbatches, found.p
            found.formula_bubble_fraction = (p - 1) / (chunks.virtual_stages * m + p - 1) if m else None
    return found


def may_have_stages(programs: pd.DataFrame) -> bool:
    """Whether the distinct (device, module[, program_id]) pairs a trace ran could make a pipeline of a program
    per stage (:func:`measure_mpmd` then reads the executions): decided without one execution."""
    return not programs.empty and _stages(_program_frame(programs)) is not None


def _program_frame(programs: pd.DataFrame) -> pd.DataFrame:
    return _op_frame(programs.assign(op="", start_ps=0, duration_ps=0, step=0))


def _op_frame(executions: pd.DataFrame) -> pd.DataFrame:
    ops = pd.DataFrame({
        "device": executions["device"].astype(str).to_numpy(),
        "program": (executions["module"].astype(str) + (
            "#" + executions["program_id"].astype(str) if "program_id" in executions.columns else "")).to_numpy(),
        "op": executions["op"].astype(str).to_numpy(),
        "start_ps": executions["start_ps"].to_numpy(dtype="float64"),
        "end_ps": (executions["start_ps"].to_numpy(dtype="float64")
                   + executions["duration_ps"].to_numpy(dtype="float64")),
        "step": executions["step"].to_numpy(dtype="int64"),
    })
    ops = ops[executions["module"].astype(str).to_numpy() != ""]    # kernels no program claims
    stepped = ops[ops["step"] >= 0]
    return (stepped if not stepped.empty else ops.assign(step=0)).reset_index(drop=True)


def _stages(ops: pd.DataFrame) -> dict[str, int] | None:
    """device -> stage: devices grouped by the programs they run; None unless there are two groups or more and
    no program runs in two groups."""
    programs = ops.groupby("device", observed=True)["program"].agg(lambda s: tuple(sorted(set(s))))
    groups = {key: i for i, key in enumerate(sorted(set(programs)))}
    if len(groups) < MIN_STAGES:
        return None
    seen = [p for key in groups for p in key]
    if len(seen) != len(set(seen)):
        return None
    return {str(device): groups[key] for device, key in programs.items()}


def _program_runs(ops: pd.DataFrame) -> tuple[pd.DataFrame, int, pd.DataFrame]:
    """One row per execution of each stage's main program: stage, step, microbatch, start_ps, end_ps (an
    execution starts at each occurrence of the op that opens the program in the step); the alternations:
    on each stage's first device, in the step of most executions, the program changes beyond one block per
    program (0 for GPipe, where a stage runs all its forwards, then all its backwards); and every program's
    executions (device, program, step, run, stage, start_ps, end_ps)."""
    ops = ops.sort_values(["device", "program", "step", "start_ps"], kind="stable")
    keys = ["device", "program", "step"]
    first = ops.groupby(keys, sort=False)["op"].transform("first")
    ops["run"] = (ops["op"] == first).astype("int64").groupby([ops[k] for k in keys], sort=False).cumsum() - 1
    runs = ops.groupby(keys + ["run"], sort=False).agg(stage=("stage", "first"), start_ps=("start_ps", "min"),
                                                      end_ps=("end_ps", "max")).reset_index()
    alternations = _alternations(runs)
    every = runs
    # a stage's microbatch k: its main program's k-th execution in the step; the main program is the one run
    # most often, of those the one that runs first (a forward program, which passes activations down the stages)
    per = runs.groupby(["stage", "program"]).agg(n=("run", "size"), first=("start_ps", "min")).reset_index()
    per = per.sort_values(["stage", "n", "first"], ascending=[True, False, True], kind="stable")
    main = per.groupby("stage")["program"].first()
    runs = runs[runs["program"].to_numpy() == runs["stage"].map(main).to_numpy()]
    out = runs.groupby(["stage", "step", "run"], as_index=False).agg(start_ps=("start_ps", "min"),
                                                                     end_ps=("end_ps", "max"))
    return out.rename(columns={"run": "microbatch"}), alternations, every


def _alternations(runs: pd.DataFrame) -> int:
    first = runs.groupby("stage")["device"].transform("min")
    mine = runs[runs["device"] == first]
    busiest = int(mine.groupby("step").size().idxmax()) if not mine.empty else 0
    total = 0
    for _, part in mine[mine["step"] == busiest].groupby("stage"):
        seq = part.sort_values("start_ps", kind="stable")["program"].to_numpy()
        changes = int((seq[1:] != seq[:-1]).sum()) if len(seq) > 1 else 0
        total += max(0, changes - (len(set(seq)) - 1))
    return total


def _in_sequence(runs: pd.DataFrame) -> tuple[int, int]:
    """(pairs where stage s + 1's k-th execution starts at or after stage s's k-th ends, pairs checked)."""
    nxt = runs.assign(stage=runs["stage"] - 1)
    pairs = runs.merge(nxt, on=["stage", "step", "microbatch"], suffixes=("", "_next"))
    return int((pairs["start_ps_next"] >= pairs["end_ps"]).sum()), len(pairs)


def _schedule(ops: pd.DataFrame, runs: pd.DataFrame, held: int, checked: int) -> MeasuredSchedule | None:
    span = ops.groupby("step").agg(step_start=("start_ps", "min"), step_end=("end_ps", "max"))
    per = runs.groupby(["stage", "step"]).agg(microbatches=("microbatch", "size"))
    # a stage's work in the step: every program it runs (a backward program's too), first op to last
    per = per.join(ops.groupby(["stage", "step"]).agg(first=("start_ps", "min"), last=("end_ps", "max")))
    per["busy"] = _busy(ops)
    per = per.join(span, on="step")
    per["span"] = per["step_end"] - per["step_start"]
    per["before"] = per["first"] - per["step_start"]
    per["after"] = per["step_end"] - per["last"]
    per["between"] = (per["last"] - per["first"] - per["busy"]).clip(lower=0.0)
    per = per[per["span"] > 0]           # a step of no length says nothing
    if per.empty:
        return None
    # a stage that runs a forward and a backward program waits mid-step too (the backward pass fills from the
    # last stage): all its idle time in the step is bubble; a forward-only stage's is before and after
    two_way = ops.groupby("stage")["program"].nunique() > 1
    both = two_way.reindex(per.index.get_level_values("stage")).to_numpy()
    idle = per["before"] + per["after"] + np.where(both, per["between"], 0.0)
    per["bubble"] = idle / per["span"]
    means = per.groupby(level="stage").mean()
    m_of = per["microbatches"].groupby(level="stage").median().round().astype("int64")
    where = ops.groupby("stage").agg(devices=("device", lambda s: sorted(set(s))),
                                     programs=("program", lambda s: sorted({p.split("#")[0] for p in s})))
    stages = [StageIdle(int(s), where.at[s, "devices"], where.at[s, "programs"], int(m_of[s]),
                        float(means.at[s, "busy"]), float(means.at[s, "before"]), float(means.at[s, "after"]),
                        float(means.at[s, "between"]), float(means.at[s, "span"]), float(means.at[s, "bubble"]))
              for s in means.index]
    ms = {s.microbatches for s in stages}
    m = ms.pop() if len(ms) == 1 else None
    p = len(stages)
    formula = (p - 1) / (m + p - 1) if m else None
    return MeasuredSchedule(stages, m, int(per.index.get_level_values("step").nunique()),
                            float(per["bubble"].mean()), formula,
                            (held, checked), runs[["stage", "step", "microbatch", "start_ps", "end_ps"]])


def _busy(ops: pd.DataFrame) -> pd.Series:
    """Per (stage, step): the time its devices run ops (each device's ops merged where they overlap, the mean
    over the stage's devices)."""
    frame = ops.sort_values(["stage", "step", "device", "start_ps"], kind="stable")
    keys = [frame["stage"], frame["step"], frame["device"]]
    reach = frame.groupby(keys, sort=False)["end_ps"].cummax()
    prior = reach.groupby(keys, sort=False).shift(1)
    # the part of each op past what the device's earlier ops already covered
    covered = np.maximum(frame["start_ps"].to_numpy(), prior.fillna(-np.inf).to_numpy())
    frame = frame.assign(busy=np.clip(frame["end_ps"].to_numpy() - covered, 0.0, None))
    per_device = frame.groupby(["stage", "step", "device"])["busy"].sum()
    return per_device.groupby(level=["stage", "step"]).mean()
