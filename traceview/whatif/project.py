"""Project today's measured step onto another configuration, term by term (docs/whatif.md).

Every term starts from what the trace measured and is multiplied by the ratio of the book's model for the
new configuration to the book's model for today's; a term the trace has nothing to calibrate (a role the
program does not use, a pipeline from a program without one) is the book's formula alone, on the target's
links, scaled by how far the trace's measured collectives ran from theirs, and marked as such. Projecting
today's configuration therefore gives today's step time exactly: every ratio is 1.
"""

from __future__ import annotations

from traceview.hardware.chips import Chip
from traceview.parallelism.rules import GPUS_PER_NODE, axis_link, critical_ratio
from traceview.units import fmt_time_us
from traceview.whatif.baseline import Baseline
from traceview.whatif.book import (
    batch_ways,
    bubble_fraction,
    collective_bytes,
    crossovers,
    parameter_ways,
)
from traceview.whatif.config import Config
from traceview.whatif.host import host_terms
from traceview.whatif.report import Projection, Term

MICROBATCHES_PER_STAGE = 4      # the book's (GPipe's) m >= 4p when the trace has no pipeline to read m from


def project(base: Baseline, cfg: Config) -> Projection:
    """One configuration's projected step (its terms, MFU, tokens/s/chip, memory, crossovers); the step is
    null with ``step_reason`` when there is nothing to project from or no figures to scale by."""
    out = Projection(cfg, None)
    if base.step_ps is None:
        out.step_reason = "the trace has no steps: nothing to project from"
        return out
    chip = cfg.chip
    speed = _speed_ratios(base.chip, chip, base.dtype)
    if speed is None:
        out.step_reason = f"{chip.name if chip else 'no chip'} or the trace's chip lacks a peak or bandwidth"
        return out
    flops_ratio, bw_ratio = speed
    batch = base.batch_tokens or 1.0
    r_flops = (cfg.batch / batch) * (base.chips / cfg.chips)        # per-chip FLOPs: 6 P T / N
    scale = _scales(base, cfg, r_flops)
    if base.host is not None and _same_chip(base.chip, chip):
        terms = host_terms(base, cfg, scale)     # the same host's virtual devices: the host is what is shared
        out.notes.append(f"the trace's devices are threads of one host ({base.host.how}): projected as the "
                         "host's work over the rate it got through today's, not as chips side by side")
    else:
        terms = _op_terms(base, scale, flops_ratio, bw_ratio)
        terms += _collective_terms(base, cfg, out)
        idle = Term("idle", None, base.buckets.get("idle", 0.0), base.buckets.get("idle", 0.0), "kept as measured")
        terms.append(idle)
    bubble = _bubble(base, cfg, terms, out)
    if bubble is not None:
        terms.append(bubble)
    shapes = _matmul_shape_note(base, cfg)
    if shapes is not None:
        out.notes.append(shapes)
    out.terms = terms
    out.step_ps = sum(t.time_ps or 0.0 for t in terms)
    out.bound = _bound(terms)
    out.dominant_change = _dominant(terms)
    if base.mfu is not None and out.step_ps > 0:
        out.mfu = base.mfu * r_flops * flops_ratio * base.step_ps / out.step_ps
    if out.step_ps > 0:
        out.tokens_per_s_per_chip = cfg.batch / (out.step_ps * 1e-12) / cfg.chips if base.batch_tokens else None
    _memory(base, cfg, scale, out)
    out.crossovers = _crossovers(base, cfg)
    return out


def _matmul_shape_note(base: Baseline, cfg: Config) -> str | None:
    """What "same kernels" assumes of a config that changes the tensor ways: each device's MLP matmuls take
    another shape (the hidden width F split t ways, the token rows split by the batch axes), and a kernel's
    FLOP rate depends on the shape, which the trace measured only at today's. None when the tensor ways stay
    (the rows alone change with the batch: the fixed part per execution and the weight reads account for
    those) or F or the batch is unknown."""
    t_now, t_new = base.mesh.get("tensor", 1), cfg.mesh.get("tensor", 1)
    if t_now == t_new or not base.ffn or not base.batch_tokens:
        return None
    rows_now, rows_new = base.batch_tokens / batch_ways(base.mesh), cfg.batch / batch_ways(cfg.mesh)
    return (f"same kernels at another shape: tensor {t_now} -> {t_new} turns each device's MLP matmuls from "
            f"{rows_now:.4g} token rows x {base.ffn / t_now:.4g} hidden columns into {rows_new:.4g} x "
            f"{base.ffn / t_new:.4g}; their FLOP rate there is assumed to be today's, not measured (XLA:CPU ran "
            "a tensor split's matmuls 0-19% slower per FLOP on seven programs: docs/whatif.md)")


def _same_chip(src: Chip | None, tgt: Chip | None) -> bool:
    return (src is None and tgt is None) or (src is not None and tgt is not None and src.name == tgt.name)


def _speed_ratios(src: Chip | None, tgt: Chip | None, dtype: str) -> tuple[float, float] | None:
    """(peak FLOP/s today / target's, HBM bandwidth today / target's): 1 when the chip does not change; None
    when either chip is unknown or lacks the figures."""
    if _same_chip(src, tgt):
        return 1.0, 1.0
    if src is None or tgt is None:
        return None
    ps, pt = src.peak_flops_for(dtype), tgt.peak_flops_for(dtype)
    if not ps or not pt or not src.hbm_bandwidth or not tgt.hbm_bandwidth:
        return None
    return ps / pt, src.hbm_bandwidth / tgt.hbm_bandwidth


def _scales(base: Baseline, cfg: Config, r_flops: float) -> dict[str, float]:
    """What each kind of op's work is multiplied by (docs/whatif.md, "ops")."""
    def ways(mesh: dict[str, int]) -> int:
        return mesh.get("tensor", 1) * mesh.get("pipeline", 1) * mesh.get("expert", 1)
    return {"flops": r_flops, "activation bytes": r_flops,
            "parameter shard bytes": parameter_ways(base.mesh) / parameter_ways(cfg.mesh),
            "gathered parameter bytes": ways(base.mesh) / ways(cfg.mesh),
            "activation memory": (cfg.batch / (base.batch_tokens or 1.0)) * batch_ways(base.mesh)
            / batch_ways(cfg.mesh)}


def _op_terms(base: Baseline, scale: dict[str, float], flops_ratio: float, bw_ratio: float) -> list[Term]:
    """The compute, memory and unknown buckets of today's step, each times the time-weighted mean ratio of
    its ops (a compute-bound op scales with its FLOPs, a memory-bound one with its bytes)."""
    out = []
    for bucket, label in (("compute", "compute-bound ops"), ("memory", "memory-bound ops"),
                          ("unknown", "ops of unknown bound")):
        today = base.buckets.get(bucket, 0.0)
        ops = base.ops[base.ops["bound"] == bucket] if not base.ops.empty else base.ops
        weight = float(ops["time_ps"].sum()) if not ops.empty else 0.0
        if weight > 0:
            ratio = float((ops["time_ps"] * ops["scale"].map(scale)).sum()) / weight
        else:
            ratio = scale["flops"]
        speed = flops_ratio if bucket == "compute" else bw_ratio if bucket == "memory" else 1.0
        how = {"compute": "x per-chip FLOPs ratio (B'/B)(N/N') at the measured efficiency",
               "memory": "x per-chip bytes ratio by op kind (activations (B'/B)(N/N'), parameter shards "
                         "P/ways, gathered weights P/(tensor x pipeline x expert))",
               "unknown": "x per-chip FLOPs ratio"}[bucket]
        if speed != 1.0:
            how += f" x {speed:.3g} (today's chip / target's {'peak' if bucket == 'compute' else 'HBM bandwidth'})"
        out.append(Term(label, None, today * ratio * speed, today, f"{ratio:.4g} {how}"))
    return out


# mesh roles from the innermost (fastest links: tensor parallelism within a node) to the outermost
INNER_FIRST = ("tensor", "expert", "context", "fsdp", "pipeline", "data")


def _link(chip: Chip | None, role: str, mesh: dict[str, int]) -> tuple[float | None, str]:
    """W of the role's axis on the target: on GPUs the roles fill a node inner role first, and a role whose
    ways reach past the node's GPUS_PER_NODE crosses the data-centre network (the book's GPU chapter); a TPU
    axis is one ICI torus axis (the pod's size is not in the hardware table: DCN is not judged)."""
    if chip is None:
        return None, "no chip"
    inside = 1
    for r in INNER_FIRST:
        inside *= mesh.get(r, 1)
        if r == role:
            break
    dcn = chip.kind == "GPU" and inside > GPUS_PER_NODE
    link = axis_link(chip, crosses_dcn=dcn)
    return link.bandwidth, f"{link.kind}: {link.how}"


def _collective_terms(base: Baseline, cfg: Config, out: Projection) -> list[Term]:
    """Each role's exposed collective time: today's, times the book's bytes ratio and the links' ratio; a
    role the trace lacks from the book's bytes on the target's link, times the trace's measured slowdown
    against its links, and fully exposed (nothing measured says how much of it would hide: an upper bound)."""
    p_bytes, act = base.param_bytes or 0.0, base.activation_bytes_per_token or 0.0
    batch = base.batch_tokens or 1.0
    measured = {r: m for r, m in base.roles.items() if m.time_ps is not None}
    slow = _calibration(base, measured, batch, p_bytes, act)
    comm_today = base.buckets.get("communication", 0.0)
    exposed_today = sum(m.exposed_ps or 0.0 for m in measured.values())
    squeeze = min(1.0, comm_today / exposed_today) if exposed_today > 0 else 1.0
    terms = []
    for role in sorted(set(base.mesh) | set(cfg.mesh) | set(measured)):
        before = collective_bytes(role, base.mesh, batch, p_bytes, act)
        after = collective_bytes(role, cfg.mesh, cfg.batch, p_bytes, act)
        w_tgt, link_how = _link(cfg.chip, role, cfg.mesh)
        m = measured.get(role)
        if m is not None and m.time_ps is not None and before > 0:
            w_src, _ = _link(base.chip, role, base.mesh)       # today's link by the same rule: self gives 1
            links = (w_src / w_tgt) if (w_src and w_tgt) else 1.0
            in_flight = m.time_ps * (after / before) * links
            share = (m.exposed_ps or 0.0) / m.time_ps if m.time_ps else 0.0
            today = (m.exposed_ps or 0.0) * squeeze
            formula = (f"today's {m.time_ps / 1e6:.4g} us in flight x bytes ratio {after / before:.4g} (the book's "
                       f"{role} volume) x link ratio {links:.3g}, {share:.1%} exposed as measured")
            terms.append(Term(f"{role} collectives (exposed)", role, in_flight * share * squeeze, today, formula))
            continue
        if m is not None and m.time_ps is not None:    # over axes no mesh role covers (e.g. a "context+data" axis)
            today = (m.exposed_ps or 0.0) * squeeze
            terms.append(Term(f"{role} collectives (exposed)", role, today, today,
                              "kept as measured: they run over axes no role of today's mesh covers"))
            continue
        if after <= 0:
            continue
        if not w_tgt:
            terms.append(Term(f"{role} collectives (exposed)", role, None, 0.0,
                              f"the target has no link bandwidth for {role}", measured=False))
            out.notes.append(f"{role}: no link bandwidth on {cfg.chip.name if cfg.chip else 'the target'}")
            continue
        in_flight = after / w_tgt * 1e12 * slow
        formula = (f"the book's {role} volume {after:.4g} B / W {w_tgt:.3g} B/s ({link_how}) x {slow:.3g} (the "
                   "trace's collectives against their links), fully exposed (an upper bound)")
        terms.append(Term(f"{role} collectives (exposed)", role, in_flight, 0.0, formula, measured=False))
        out.notes.append(f"{role}: the program does not use it; its collectives are the book's formula, "
                         "calibrated by the trace's other collectives, and counted fully exposed")
    other = comm_today - exposed_today * squeeze
    if other > 0:
        terms.append(Term("other communication", None, other, other, "kept: not attributed to a role"))
    return terms


def _calibration(base: Baseline, measured: dict, batch: float, p_bytes: float, act: float) -> float:
    """Measured in-flight time / the book's time on today's links, over the measured roles; 1 without any
    (the link's roofline)."""
    book, real = 0.0, 0.0
    for role, m in measured.items():
        vol = collective_bytes(role, base.mesh, batch, p_bytes, act)
        if vol > 0 and m.link_bandwidth and m.time_ps:
            book += vol / m.link_bandwidth * 1e12
            real += m.time_ps
    if book <= 0 or real <= 0:
        return 1.0
    return real / book


def _bubble(base: Baseline, cfg: Config, terms: list[Term], out: Projection) -> Term | None:
    """A pipeline's bubble, the book's (p-1)/(m+p-1) of the step. Today's bubble (measured, or read from the
    schedule loop) is a share of every term of today's step (stages idle, or compute on nothing, while the
    pipeline fills and drains): the terms are scaled by (1 - today's) first, then the target's added on."""
    today = base.pipeline_bubble if base.mesh.get("pipeline", 1) > 1 and base.pipeline_bubble else 0.0
    p = cfg.mesh.get("pipeline", 1)
    if p <= 1 and not today:
        return None
    for t in terms:
        t.time_ps = None if t.time_ps is None else t.time_ps * (1 - today)
        t.baseline_ps = None if t.baseline_ps is None else t.baseline_ps * (1 - today)
    m = cfg.microbatches or (base.pipeline_microbatches if base.mesh.get("pipeline", 1) > 1 else None)
    measured = m is not None
    m = m or MICROBATCHES_PER_STAGE * p
    frac = bubble_fraction(p, m)
    work = sum(t.time_ps or 0.0 for t in terms)
    if not measured:
        out.notes.append(f"pipeline: the trace has none; the bubble is the book's (p-1)/(m+p-1) with m = {m} "
                         "(GPipe's m = 4p), not measured")
    return Term("pipeline bubble", "pipeline", work * frac / (1 - frac), today * (base.step_ps or 0.0),
                f"(p-1)/(m+p-1) = {frac:.3g} with p = {p}, m = {m}: bubble = work x f / (1 - f); today's "
                f"{today:.3g} of the step taken out of every term first", measured=measured)


def _bound(terms: list[Term]) -> str | None:
    groups: dict[str, float] = {}
    for t in terms:
        key = ("compute" if t.what.startswith("compute") else "memory" if t.what.startswith("memory")
               else "bubble" if t.role == "pipeline" else "idle" if t.what == "idle"
               else "communication" if "communication" in t.what or "collectives" in t.what else "unknown")
        groups[key] = groups.get(key, 0.0) + (t.time_ps or 0.0)
    return max(groups, key=lambda k: groups[k]) if groups else None


def _dominant(terms: list[Term]) -> str | None:
    changes = [(abs((t.time_ps or 0.0) - (t.baseline_ps or 0.0)), t) for t in terms if t.time_ps is not None]
    if not changes:
        return None
    delta, term = max(changes, key=lambda c: c[0])
    if delta <= 0:
        return None
    sign = "+" if (term.time_ps or 0.0) > (term.baseline_ps or 0.0) else "-"
    return f"{term.what}: {sign}{fmt_time_us(delta / 1e6)}"


def _memory(base: Baseline, cfg: Config, scale: dict[str, float], out: Projection) -> None:
    if base.memory is None:
        out.memory_reason = base.memory_how or "today's memory per chip is unknown"
        return
    factor = {"parameter shard bytes": scale["parameter shard bytes"],
              "gathered parameter bytes": scale["gathered parameter bytes"],
              "activation bytes": scale["activation memory"]}
    out.memory_terms = {k: v * factor[k] for k, v in base.memory.items()}
    out.memory_per_chip_bytes = sum(out.memory_terms.values())
    cap = cfg.chip.hbm_capacity if cfg.chip else None
    out.capacity_bytes = cap
    if cap:
        out.fits = out.memory_per_chip_bytes <= cap
        out.headroom_bytes = cap - out.memory_per_chip_bytes
    else:
        out.memory_reason = f"{cfg.chip.name if cfg.chip else 'the target'} has no HBM capacity figure"


def _crossovers(base: Baseline, cfg: Config):
    chip = cfg.chip
    ratio = critical_ratio(chip, axis_link(chip), base.dtype) if chip is not None else None
    return crossovers(cfg.mesh, cfg.batch, base.ffn, ratio)
