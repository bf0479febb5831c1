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
* Expert parallelism multiplies the batch condition by E/k (E experts, k
  chosen per token).
* Pipelines pay their bubbles more than bandwidth: not judged by C/W.

The book's decision table gives what to try when an axis is communication-
bound; :data:`SUGGESTIONS` states them as the book's, not as certainties.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traceview.hardware.chips import Chip

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
    "expert": ["the book: a larger batch per expert (per-chip batch above C/W x E/k), or fewer expert ways"],
}


@dataclass
class Link:
    kind: str                        # ICI, NVLink, Infinity Fabric, DCN, host shared memory
    bandwidth: float | None          # W in C/W, bytes/s
    how: str


@dataclass
class Verdict:
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
          width: float | None, full_width: float | None, mixed_with_tp: bool) -> Verdict:
    """The book's verdict for one axis of the given role."""
    if role is None:
        return Verdict(None, "none", reason="no role: the axis's collectives match no strategy's pattern")
    if role == "pipeline":
        return Verdict(None, "pipeline: bubbles, not bandwidth (the book's training chapter)",
                       reason="a pipeline pays its bubble more than bandwidth; judge it by the idle time")
    if chip is None or link is None:
        return Verdict(None, _rule(role, mixed_with_tp), reason="no target chip: give --target")
    ratio = critical_ratio(chip, link, dtype)
    if ratio is None:
        return Verdict(None, _rule(role, mixed_with_tp),
                       reason=f"{chip.name}: no {dtype} peak or no {link.kind} bandwidth")
    how = f"C/W = {chip.peak_flops_for(dtype):.3g} FLOP/s / {link.bandwidth:.3g} B/s ({link.kind}: {link.how})"
    if role == "tensor":
        value, what, threshold = width, "per-shard width F/Y (contracting extent of the TP matmul)", ratio
    elif role == "expert":
        return Verdict(None, _rule(role, False), tokens, "per-chip batch (tokens)", None,
                       how + " x E/k", SUGGESTIONS["expert"],
                       "E and k (experts, experts per token) are not read from the HLO")
    elif mixed_with_tp and full_width:
        value, what = tokens, "per-chip batch (tokens)"
        threshold = 2 * ratio ** 2 / full_width
        how = f"2 (C/W)^2 / F, {how}, F = {full_width:g}"
    else:
        value, what, threshold = tokens, "per-chip batch (tokens)", ratio
    if value is None:
        return Verdict(None, _rule(role, mixed_with_tp), None, what, threshold, how,
                       reason="the value could not be read from the dot shapes")
    verdict = "compute-bound" if value > threshold else "communication-bound"
    tips = SUGGESTIONS.get(role, []) if verdict == "communication-bound" else []
    return Verdict(verdict, _rule(role, mixed_with_tp), value, what, threshold, how, tips)


def _rule(role: str, mixed: bool) -> str:
    if role == "tensor":
        return "tensor parallel: F/Y > C/W"
    if role == "expert":
        return "expert parallel: B/X > (C/W) x E/k"
    if mixed:
        return f"{'FSDP' if role == 'fsdp' else 'data parallel'} with TP: B/N > 2 (C/W)^2 / F"
    return f"{'FSDP' if role == 'fsdp' else 'data parallel'}: B/X > C/W"
