"""The book's rules for when a mesh axis turns communication-bound.

Source: Austin et al., "How to Scale Your Model" (2025), chapter 5 "How to
Parallelize a Transformer for Training" (the rules), chapter 2 "How to Think
About TPUs" and chapter 12 "How to Think About GPUs" (the figures). C is the
chip's peak FLOP/s, W the bandwidth of the links an axis runs over; each rule,
paraphrased, compares a figure of the program with C/W:

* Data parallelism and FSDP stay compute-bound while the per-chip batch B/X
  (tokens) exceeds C/W. TPU v5p, one ICI axis: C/W = 4.59e14 / 1.8e11 ≈ 2,550
  tokens per chip (W: 9e10 B/s one way per link, both directions of the
  ring); over three axes W triples: ≈ 850. H100 within a node:
  9.89e14 / 4.5e11 ≈ 2,200 (W: the GPU's NVLink egress); across nodes
  ≈ 2,475 (W: 400 GB/s, the node's 8 x 400 Gb/s NICs).
* Tensor parallelism stays compute-bound while the per-shard MLP width F/Y
  exceeds C/W, hence 8-16 ways on TPU (F of 20-50k) and about 8 on H100.
* Mixed FSDP + tensor parallelism needs a per-chip batch above about
  2·(C/W)² / F (F the full MLP width).
* Context parallelism (ring attention) hides the K/V transfer while one
  block's attention outlasts it: per-chip sequence s > (C/W)·b·H_kv/(2·H).
* Expert parallelism's all-to-alls hide behind the experts' matmuls while the
  expert width F > (C/W)·b/n (n matmuls per expert).
* Pipelines pay their bubbles more than bandwidth: judged by the bubble
  (p - 1)/(m + p - 1) against the GPipe guidance m >= 4p.

The book's decision table gives what to try when an axis is communication-
bound; :data:`SUGGESTIONS` states them as the book's, not as certainties.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traceview.hardware.chips import Chip
from traceview.parallelism.context import ContextFinding
from traceview.parallelism.expert import EXPERT_MATMULS, ExpertFinding
from traceview.parallelism.structure import PipelineFinding
from traceview.units import fmt_si

GPUS_PER_NODE = 8   # HGX / DGX nodes, the book's GPU chapter

SUGGESTIONS = {
    "data": ["the book: grow the per-chip batch above C/W, or overlap the gradient all-reduce with the "
             "backward pass; FSDP over the same axis costs no more bandwidth and saves memory"],
    "fsdp": ["the book: grow the per-chip batch above C/W, use fewer FSDP ways, or add tensor parallelism "
             "(mixed FSDP + TP needs a smaller per-chip batch)",
             "the book: prefetch (overlap) the parameter all-gathers with the previous layer's compute"],
    "tensor": ["the book: use fewer tensor-parallel ways (keep F/Y above C/W) and move the ways to FSDP or "
               "data parallelism", "the book: overlap the activation collectives with the matmuls "
               "(collective matmul)"],
    "expert": ["the book: wider experts (F above (C/W) b/n) or fewer expert ways, so the dispatch and combine "
               "all-to-alls hide behind the experts' matmuls; overlap the all-to-all with the shared layers"],
    "context": ["the book: longer sequence blocks per chip (fewer context ways), so one block's attention "
                "outlasts one K/V transfer; overlap the ring's permute with the block's compute"],
    "pipeline": ["the book: more microbatches (the bubble (p-1)/(m+p-1) shrinks as m grows)",
                 "the book: interleaved stages (v virtual stages per chip divide the bubble by v)",
                 "the book: keep the activation transfer between stages small against a stage's compute"],
}
MICROBATCHES_PER_STAGE = 4   # GPipe's guidance: m >= 4p makes the bubble small


@dataclass
class Link:
    kind: str                        # ICI, NVLink, Infinity Fabric, DCN, host shared memory
    bandwidth: float | None          # W in C/W, bytes/s
    how: str


@dataclass
class AxisVerdict:
    verdict: str | None              # compute-bound, communication-bound, None (not judged)
    rule: str
    value: float | None = None
    value_what: str = ""
    threshold: float | None = None
    threshold_how: str = ""
    suggestions: list[str] = field(default_factory=list)
    reason: str = ""


def axis_link(chip: Chip, crosses_dcn: bool = False, torus_axes: int = 1, group_size: int = 2) -> Link:
    """The link an axis's collectives run over and the bandwidth W the book's rules use for it."""
    ic = chip.interconnect
    if crosses_dcn:
        if chip.kind == "GPU" and chip.dcn_bandwidth is not None:
            return Link("DCN", chip.dcn_bandwidth * GPUS_PER_NODE,
                        f"node egress: {GPUS_PER_NODE} GPUs x {chip.dcn_bandwidth:.3g} B/s scale-out per GPU "
                        "(hierarchical collectives, the book's GPU chapter)")
        return Link("DCN", chip.dcn_bandwidth, "DCN bandwidth per chip")
    if ic is None:
        return Link("unknown", None, f"{chip.name} has no interconnect figures")
    if ic.type == "shared-memory":
        return Link("host", ic.device_bandwidth, "host 'devices' exchange data through shared memory")
    if ic.topology.endswith("torus"):
        bw = None if ic.link_bandwidth is None else 2 * ic.link_bandwidth * torus_axes
        return Link("ICI", bw, f"{torus_axes} torus axis x 2 directions x {ic.link_bandwidth:.3g} B/s per link"
                    if ic.link_bandwidth else "no ICI link bandwidth")
    if ic.topology == "full_mesh":
        links = min(group_size - 1, ic.links or 1)
        bw = None if ic.link_bandwidth is None else ic.link_bandwidth * links
        return Link("Infinity Fabric", bw, f"{links} direct link(s) x {ic.link_bandwidth} B/s")
    return Link("NVLink" if ic.type == "nvlink" else ic.type, ic.egress_bandwidth, "GPU egress through the switch")


def critical_ratio(chip: Chip, link: Link, dtype: str = "bf16") -> float | None:
    """C / W: FLOPs a chip does in the time it sends one byte over the axis's links."""
    peak = chip.peak_flops_for(dtype)
    if peak is None or not link.bandwidth:
        return None
    return peak / link.bandwidth


def judge(role: str | None, chip: Chip | None, link: Link | None, dtype: str, tokens: float | None,
          width: float | None, full_width: float | None, mixed_with_tp: bool) -> AxisVerdict:
    """The book's verdict for one axis of the given role."""
    if role is None:
        return AxisVerdict(None, "none", reason="no role: the axis's collectives match no strategy's pattern")
    if role not in ("data", "fsdp", "tensor"):
        return AxisVerdict(None, role, reason=f"{role}: its structure (loop, attention, router) was not read")
    ratio, how, why = _ratio_and_how(chip, link, dtype)
    if ratio is None:
        return AxisVerdict(None, _rule(role, mixed_with_tp), reason=why)
    if role == "tensor":
        value, what, threshold = width, "per-shard width F/Y (contracting extent of the TP matmul)", ratio
    elif mixed_with_tp and full_width:
        value, what = tokens, "per-chip batch (tokens)"
        threshold = 2 * ratio ** 2 / full_width
        how = f"2 (C/W)^2 / F, {how}, F = {full_width:g}"
    else:
        value, what, threshold = tokens, "per-chip batch (tokens)", ratio
    if value is None:
        return AxisVerdict(None, _rule(role, mixed_with_tp), None, what, threshold, how,
                           reason="the value could not be read from the dot shapes")
    return _decide(role, _rule(role, mixed_with_tp), value, what, threshold, how)


def _ratio_and_how(chip: Chip | None, link: Link | None, dtype: str) -> tuple[float | None, str, str]:
    """(C/W, how it was found, why not) for a rule."""
    if chip is None or link is None:
        return None, "", "no target chip: give --target"
    ratio = critical_ratio(chip, link, dtype)
    if ratio is None:
        return None, "", f"{chip.name}: no {dtype} peak or no {link.kind} bandwidth"
    return ratio, f"C/W = {fmt_si(chip.peak_flops_for(dtype), 'FLOP/s')} / {fmt_si(link.bandwidth, 'B/s')} " \
        f"({link.kind}: {link.how})", ""


def _decide(role: str, rule: str, value: float, what: str, threshold: float, how: str) -> AxisVerdict:
    verdict = "compute-bound" if value > threshold else "communication-bound"
    tips = SUGGESTIONS.get(role, []) if verdict == "communication-bound" else []
    return AxisVerdict(verdict, rule, value, what, threshold, how, tips)


CONTEXT_RULE = "context parallel (ring): s > (C/W) b H_kv / (2 H)"
EXPERT_RULE = "expert parallel: F > (C/W) b / n"
PIPELINE_RULE = "pipeline: bubble (p-1)/(m+p-1) <= (p-1)/(5p-1), i.e. m >= 4p"


def judge_context(chip: Chip | None, link: Link | None, dtype: str, found: ContextFinding) -> AxisVerdict:
    """Ring attention: one block's attention (4 B H s^2 d FLOPs) against one K/V block (2 B s H_kv d b bytes)."""
    ratio, how, why = _ratio_and_how(chip, link, dtype)
    what, seq = "per-chip sequence length s (tokens)", found.attention.seq_per_chip
    if ratio is None:
        return AxisVerdict(None, CONTEXT_RULE, seq, what, reason=why)
    heads = found.attention.heads_per_kv_head
    if not heads:
        return AxisVerdict(None, CONTEXT_RULE, seq, what, reason="the query heads per K/V head are not read")
    threshold = ratio * found.element_bytes / (2 * heads)
    how = f"(C/W) b H_kv / (2 H), {how}, b = {found.element_bytes:g} bytes, H/H_kv = {heads:g}"
    return _decide("context", CONTEXT_RULE, float(seq), what, threshold, how)


def judge_expert(chip: Chip | None, link: Link | None, dtype: str, found: ExpertFinding,
                 matmuls: int = EXPERT_MATMULS) -> AxisVerdict:
    """An expert layer: dispatch + combine (2 D b bytes per slot) against n matmuls (2 n D F FLOPs per slot)."""
    what = "expert MLP width F"
    if not found.routing.experts or not found.routing.top_k:
        return AxisVerdict(None, EXPERT_RULE, None, what, reason=f"E and k not read: {found.routing.how}")
    ratio, how, why = _ratio_and_how(chip, link, dtype)
    if ratio is None:
        return AxisVerdict(None, EXPERT_RULE, found.ffn, what, reason=why)
    if not found.ffn:
        return AxisVerdict(None, EXPERT_RULE, None, what, reason="no dot reads the dispatched tokens: F unknown")
    threshold = ratio * found.element_bytes / matmuls
    how = f"(C/W) b / n, {how}, b = {found.element_bytes:g} bytes, n = {matmuls} matmuls per expert"
    return _decide("expert", EXPERT_RULE, float(found.ffn), what, threshold, how)


def judge_pipeline(found: PipelineFinding) -> AxisVerdict:
    """The bubble against GPipe's m >= 4p (a rule of the schedule, not of the chip)."""
    what = "bubble fraction (p-1)/(m+p-1)" if found.schedule is None else \
        "measured bubble fraction (each stage's idle waiting on its neighbours / step span)"
    if found.bubble_fraction is None:
        return AxisVerdict(None, PIPELINE_RULE, None, what, reason=found.how)
    p, bubble = found.stages, found.bubble_fraction
    threshold = (p - 1) / ((MICROBATCHES_PER_STAGE + 1) * p - 1)
    how = f"(p-1)/(5p-1) with p = {p}: the bubble at m = 4p microbatches (GPipe)"
    if bubble <= threshold:
        return AxisVerdict("compute-bound", PIPELINE_RULE, bubble, what, threshold, how)
    return AxisVerdict("bubble-bound", PIPELINE_RULE, bubble, what, threshold, how, SUGGESTIONS["pipeline"])


def _rule(role: str, mixed: bool) -> str:
    if role == "tensor":
        return "tensor parallel: F/Y > C/W"
    if mixed:
        return f"{'FSDP' if role == 'fsdp' else 'data parallel'} with TP: B/N > 2 (C/W)^2 / F"
    return f"{'FSDP' if role == 'fsdp' else 'data parallel'}: B/X > C/W"
