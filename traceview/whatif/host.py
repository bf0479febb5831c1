"""Projection for a capture whose devices are virtual devices of one host process (XLA:CPU with
``--xla_force_host_platform_device_count``): the host's cores are the one resource every device shares.

Such "devices" are threads of one process. They do not run side by side as chips do: when there are more of
them than cores, the host runs their work in turn, so a step takes about the work of *all* devices divided by
the cores that run it, and a collective is copies in memory made by the same cores (it hides behind nothing:
the compute it would hide behind needs the same cores). What a device's op lasts in the trace is then mostly
waiting: for a core, or, inside a collective, for the other devices to arrive. So the chip model (each bucket
of the per-device step scaled on its own, collectives hidden in the share the trace measured) does not hold
for such a capture, and this one does (docs/whatif.md, "Virtual devices of one host"):

* an op's work is its executions per step times what one execution lasts when its thread is not kept
  waiting: the ``WORK_QUANTILE`` quantile of its executions' durations (over every device and step); a
  compute-bound op's work has a fixed part per execution, fitted over the capture's compute-bound ops when
  their FLOPs differ (whatif.fit), which does not scale with its FLOPs;
* the host's work per step is the sum of every op's work over all devices, plus each role's collectives as
  copies: the book's bytes per chip over the role's axis times the chips, read and written once, at the
  rate the host's memory-bound ops ran at (their bytes over their work);
* for another configuration each op's work is scaled by the chip model's per-chip ratio for its kind (FLOPs,
  activation, parameter-shard or gathered-weight bytes) times the chips, and each role's copies are the book's
  bytes for the new mesh;
* today's step less its idle time (a device outside any op: launches, waking after a rendezvous; kept as
  measured, as the chip model keeps it) is today's work over c, the rate at which the host got through it
  (the cores the process had, less what waiting cost them); every projected step is its work over the same
  c, plus the idle time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceview.units import fmt_si
from traceview.whatif.book import collective_bytes
from traceview.whatif.fit import FixedPart, fixed_part

# a copy reads each byte it sends and writes it once where it lands
COPY_TRAFFIC = 2.0
# The share of an op's executions that ran at least as fast as the duration taken as its work: a low
# quantile, so that an execution whose thread waited for a core does not count, but not the very fastest
# (one timing's noise). On two sets of the what-if test's captures (8 devices x 4 steps: 32 executions per
# op) the projections within 25% of the other captures were, of 56: 52 and 54 with the fastest execution,
# 50 and 53 with the 10th percentile, 49 and 52 with the 25th, 48 and 51 with the median.
WORK_QUANTILE = 0.1


@dataclass(frozen=True)
class SharedHost:
    """A capture's devices as threads of one host process, and what each op costs the host."""
    devices: int
    host: str
    byte_rate: float                                     # B/s of the host's memory-bound ops
    work: dict[tuple[str, str], float] = field(default_factory=dict)   # (module, op) -> s of work per step
    how: str = ""
    # (module, op) -> s of a compute-bound op's work per step that does not grow with its FLOPs (whatif.fit)
    fixed: dict[tuple[str, str], float] = field(default_factory=dict)
    fit: FixedPart | None = None


def shared_host(pipeline, chips: int) -> SharedHost | None:
    """The capture's devices as one host's threads: every device a CPU device of one host and one process, more
    than one of them, as many as the mesh's chips. None otherwise (chips, several hosts: the chip model)."""
    devices = pipeline.profile.devices
    if len(devices) < 2 or len(devices) != chips:
        return None
    if any(str(d.kind or "").upper() != "CPU" for d in devices):
        return None
    hosts = {d.host for d in devices}
    procs = {str((d.stats or {}).get("process_id", "")) for d in devices}
    if len(hosts) != 1 or len(procs) != 1:
        return None
    work = _work(pipeline)
    if not work:
        return None
    rate, how_rate = _byte_rate(pipeline, work)
    if not rate:
        return None
    host = str(next(iter(hosts)))
    how = f"{len(devices)} CPU devices of one process on {host}; copies at {fmt_si(rate, 'B/s')} ({how_rate})"
    fit, fixed = _fixed_work(pipeline, work)
    return SharedHost(len(devices), host, rate, work, how, fixed, fit)


def _fixed_work(pipeline, work: dict[tuple[str, str], float]) -> tuple[FixedPart, dict[tuple[str, str], float]]:
    """The fixed part per execution fitted over the compute-bound ops (whatif.fit), and each such op's fixed
    work per step: that part times its executions per step over all devices (at most its work: the
    projection clips it)."""
    t = pipeline.ops
    if t.empty or "flops" not in t or "occurrences" not in t:
        return fixed_part(np.array([]), np.array([])), {}
    rows = t[(t["bound"] == "compute") & not_collective(t) & (t["occurrences"].fillna(0) > 0)]
    keys = list(zip(rows["module"].astype(str), rows["op"].astype(str)))
    occurrences = rows["occurrences"].astype(float).to_numpy()
    runs = occurrences / max(1, len(pipeline.steps))
    flops = rows["flops"].fillna(0.0).astype(float).to_numpy() / occurrences
    per_run = np.array([work.get(k, 0.0) for k in keys]) / runs
    fit = fixed_part(flops, per_run)
    if fit.per_execution <= 0:
        return fit, {}
    return fit, {k: fit.per_execution * n for k, n, f in zip(keys, runs, flops) if f > 0}


def _work(pipeline) -> dict[tuple[str, str], float]:
    """(module, op) -> its executions per step x the WORK_QUANTILE quantile of their durations, in seconds."""
    ops = pipeline.profile.op_executions()     # every execution, read again when the reading kept none
    if ops.empty or "duration_ps" not in ops:
        return {}
    steps = max(1, len(pipeline.steps))
    grouped = ops.groupby([ops["module"].astype(str), ops["op"].astype(str)])["duration_ps"]
    work = grouped.quantile(WORK_QUANTILE) / 1e12 * grouped.size() / steps
    return {key: float(v) for key, v in work.items()}


def _byte_rate(pipeline, work: dict[tuple[str, str], float]) -> tuple[float | None, str]:
    """The rate the host moved memory at: the memory-bound ops' bytes over their work; else the chip's
    bandwidth (the table's figure)."""
    t = pipeline.ops
    if not t.empty and "bytes_accessed" in t:
        own = not_collective(t)
        rows = t[own & (t["bound"] == "memory")]
        keys = list(zip(rows["module"].astype(str), rows["op"].astype(str)))
        seconds = sum(work.get(k, 0.0) for k in keys)
        moved = float(rows["bytes_accessed"].fillna(0.0).sum()) / max(1, len(pipeline.steps))
        if seconds > 0 and moved > 0:
            return moved / seconds, "the memory-bound ops' bytes over their work"
    judged = pipeline.judged      # the chip the step was measured on, when known
    chip = (judged.measured_on or judged.chip) if judged is not None else None
    bw = chip.hbm_bandwidth if chip is not None else None
    return bw, f"{chip.name if chip else 'no chip'}'s memory bandwidth (no memory-bound op to measure)"


def not_collective(t: pd.DataFrame) -> pd.Series:
    """The rows that are not collectives: an empty, missing or NaN collective kind."""
    if "collective_kind" not in t:
        return pd.Series(True, index=t.index)
    kind = t["collective_kind"]
    return kind.isna() | kind.astype(str).isin(["", "None", "nan"])


def _per_op(values: dict[tuple[str, str], float], rows: pd.DataFrame) -> pd.Series:
    """Each row's (module, op) value (0 where it has none), on the rows' index."""
    return pd.Series([values.get((str(m), str(o)), 0.0) for m, o in zip(rows["module"], rows["op"])],
                     index=rows.index, dtype=float)


def _compute_ratio(rows: pd.DataFrame, work: pd.Series, fixed: pd.Series, ratio: pd.Series, byte_rate: float,
                   weight_ratio: float) -> pd.Series:
    """A compute-bound op's ratio when its work has parts that do not scale with its FLOPs. Its fixed part per
    execution (``fixed``, at most its work) stays as it is: the op runs as often per chip in any mesh. Reading
    its weights, its weight bytes at the host's byte rate (at most the rest), scales with the weight a chip
    multiplies by (the gathered matrix: 1 / the tensor, pipeline and expert ways, whatever shards it between
    steps), not with the rows it multiplies it by. The rest scales as the op's kind says. A matmul on twice
    the rows reads the same weights and pays the same fixed part, so its work grows less than twice."""
    reads = (rows["weight_bytes"] / byte_rate).clip(upper=work - fixed)
    return (fixed + (work - fixed - reads) * ratio + reads * weight_ratio) / work.where(work > 0, 1.0)


def host_collective_bytes(role: str, mesh: dict[str, int], batch: float, param_bytes: float, act: float,
                          chips: int) -> float:
    """Bytes the host's cores move for one role's collectives in a step: the book's bytes per chip over the
    role's axis, for every chip, each read and written once."""
    return COPY_TRAFFIC * chips * collective_bytes(role, mesh, batch, param_bytes, act)


def gathered_with_fsdp(scale: dict[str, float], today: dict[str, int], mesh: dict[str, int]) -> dict[str, float]:
    """An op on a gathered weight (the transposing copy of an all-gathered matrix) is there, in a trace with an
    FSDP axis, because FSDP gathers the weights: in a mesh without one each chip's weights are its own, and the
    op goes with the gather. (Without FSDP today the weights were gathered by another role: the chip model's
    ratio.)"""
    if today.get("fsdp", 1) > 1 and mesh.get("fsdp", 1) <= 1:
        return {**scale, "gathered parameter bytes": 0.0}
    return scale


def host_terms(base, cfg, scale: dict[str, float]) -> list:
    """The projected step's terms for a capture of one host's virtual devices (module docstring), per step in
    ps; ``scale`` is the chip model's per-chip ratio of each kind of op (project._scales)."""
    from traceview.whatif.report import Term

    host = base.host
    chips_ratio = cfg.chips / base.chips
    kinds = gathered_with_fsdp(scale, base.mesh, cfg.mesh)
    p_bytes, act = base.param_bytes or 0.0, base.activation_bytes_per_token or 0.0
    batch = base.batch_tokens or 1.0
    parts: list[tuple[str, str | None, float, float, str, bool]] = []   # what, role, work today, new (s), how
    ops = base.ops
    for bound, label in (("compute", "compute-bound ops"), ("memory", "memory-bound ops"),
                         ("unknown", "ops of unknown bound")):
        rows = ops[ops["bound"] == bound] if not ops.empty else ops
        if rows.empty:
            continue
        work = _per_op(host.work, rows)
        ratio = rows["scale"].map(kinds).fillna(scale["flops"])
        how_fixed = ""
        if bound == "compute":
            fixed = _per_op(host.fixed, rows).clip(upper=work)
            ratio = _compute_ratio(rows, work, fixed, ratio, host.byte_rate, scale["gathered parameter bytes"])
            if host.fit is not None:
                how_fixed = (f"; {float(fixed.sum()) * 1e6:.4g} us of it a fixed part per execution, kept as it "
                             f"is ({host.fit.how})")
        today, new = float(work.sum()), float((work * ratio).sum()) * chips_ratio
        how = (f"all devices' work at its measured speed x {new / today if today else 1.0:.4g} (per-chip "
               f"ratio by op kind x chips {cfg.chips}/{base.chips}){how_fixed}")
        parts.append((label, None, today, new, how, True))
    for role in sorted(set(base.mesh) | set(cfg.mesh)):
        before = host_collective_bytes(role, base.mesh, batch, p_bytes, act, base.chips)
        after = host_collective_bytes(role, cfg.mesh, cfg.batch, p_bytes, act, cfg.chips)
        if before <= 0 and after <= 0:
            continue
        parts.append((f"{role} collectives (host copies)", role, before / host.byte_rate, after / host.byte_rate,
                      f"the book's {role} bytes per chip x {cfg.chips} chips, read and written once: "
                      f"{fmt_si(after, 'B')} at {fmt_si(host.byte_rate, 'B/s')}", base.mesh.get(role, 1) > 1))
    idle = base.buckets.get("idle", 0.0)
    busy = (base.step_ps or 0.0) - idle
    work_today = sum(p[2] for p in parts)
    if work_today <= 0 or busy <= 0:
        return [Term("step", None, base.step_ps, base.step_ps, "no work to scale by: kept as measured")]
    per_second = busy / work_today            # ps of step per second of the host's work: 1e12 / c
    cores = 1e12 / per_second
    out = [Term(what, role, new * per_second, today * per_second,
                f"{how}; / c = {cores:.3g} (today's {work_today * 1e6:.4g} us of work in {busy / 1e6:.4g} us "
                "of the step outside idle)", measured=measured)
           for what, role, today, new, how, measured in parts]
    out.append(Term("idle", None, idle, idle, "kept as measured"))
    return out
