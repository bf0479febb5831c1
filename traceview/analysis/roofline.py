"""Roofline of every op against one chip: which resource bounds it, and how far it is from that bound.

For each op (row) the model time is

    T = max(T_compute, T_memory, T_communication)
    T_compute       = flops / peak FLOP/s for the op's dtype   (Chip.peak_flops_for)
    T_memory        = bytes_accessed / HBM bandwidth
    T_communication = collective bytes moved / link bandwidth   (collective_time_ps)

as in "How to Scale Your Model" (Austin et al. 2025), parts 1 (rooflines),
3 (collectives on TPUs) and 12 (collectives on GPUs). The bound is the term
that wins. An op whose cost is missing, or whose dtype / link has no figure
on the chip, is "unknown" with a warning, never a silent zero.

All arithmetic is columnar (numpy over whole columns); the only Python loops
run over distinct dtypes and collective kinds, never over rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceview.hardware.chips import DTYPE_CLASSES, Chip, dtype_class, ridge_point_of
from traceview.units import PS_PER_S
from traceview.vocabulary import (
    BOUNDS,
    COLLECTIVE_PATTERNS,
    NOT_COLLECTIVE,
    PATTERN_CATEGORIES,
    UNMODELLED,
    collective_pattern,
)

OUTPUT_COLUMNS = ("t_compute_ps", "t_memory_ps", "t_comm_ps", "roofline_time_ps", "bound",
                  "unknown_reason", "achieved_flops", "achieved_bandwidth", "intensity",
                  "efficiency", "gap_ps", "gain_ps", "above_roofline_reason")

GAIN_DEFINITION = ("gain = device time saved if the op ran at its roofline: its time minus its roofline "
                   "time; for communication and async work, at most the time the device waited on it "
                   "(its exposed time), so a fully hidden copy gains nothing")
EFFICIENCY_DEFINITION = ("program-level roofline efficiency, as XProf's roofline tool defines it for the "
                         "program: the larger of the program's summed compute time (FLOPs / peak) and memory "
                         "time (bytes / HBM bandwidth), over ops with a known bound, divided by the devices' "
                         "time (span x active devices); at most 100%. Link time is left out: transfers "
                         "overlap each other and compute, so their sum bounds nothing")

# A measured time this much below the model counts as "faster than the roofline".
FASTER_TOLERANCE = 1.05


def ridge_point(chip: Chip, dtype: object = "bf16") -> float | None:
    """FLOPs per byte at which T_compute = T_memory: peak FLOP/s of ``dtype`` / HBM bytes/s."""
    return ridge_point_of(chip, dtype)


def _column(frame: pd.DataFrame, name: str, default: float = np.nan) -> np.ndarray:
    if name not in frame.columns:
        return np.full(len(frame), default, dtype="float64")
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype="float64", na_value=np.nan, copy=True)


def _flag(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    return frame[name].fillna(False).astype(bool).to_numpy()


def _per_value(frame: pd.DataFrame, column: str, fn: Any, dtype: str) -> np.ndarray:
    """``fn`` evaluated once per distinct value of ``frame[column]`` (None for missing), spread to rows."""
    if column not in frame.columns:
        return np.full(len(frame), fn(None), dtype=dtype)
    cat = pd.Categorical(frame[column])
    table = np.array([fn(v) for v in cat.categories] + [fn(None)], dtype=dtype)
    return table[cat.codes]                      # code -1 (missing) takes the last entry


def _term(amount: np.ndarray, rate: np.ndarray | float | None) -> np.ndarray:
    """amount / rate in picoseconds: 0 when amount is 0, NaN when amount or a needed rate is missing."""
    rate = np.nan if rate is None else rate
    with np.errstate(divide="ignore", invalid="ignore"):
        time = amount / rate * PS_PER_S
    return np.where(amount == 0, 0.0, time)


# Why a row's bound is unknown: index into REASONS ("{chip}" is filled in).
REASONS = ("", "cost model marks the op unknown", "no FLOPs/bytes for the op",
           "no peak FLOP/s on {chip} for the op's dtype", "no HBM bandwidth for {chip}",
           "collective kind not modelled", "collective group size unknown", "collective payload unknown",
           "no DCN bandwidth for {chip}", "no interconnect figure for {chip}", "zero modelled cost")
(_OK, _FLAGGED, _NO_COST, _NO_PEAK, _NO_HBM, _BAD_KIND, _NO_GROUP, _NO_PAYLOAD, _NO_DCN, _NO_LINK,
 _ZERO) = range(len(REASONS))


def collective_patterns(frame: pd.DataFrame) -> pd.Categorical:
    """Each row's :func:`collective_pattern` of its ``collective_kind`` (none without the column), as a
    categorical over PATTERN_CATEGORIES: compared by name, never by position."""
    where = _per_value(frame, "collective_kind", lambda v: PATTERN_CATEGORIES.index(collective_pattern(v)), "int8")
    return pd.Categorical.from_codes(where, categories=PATTERN_CATEGORIES)


def collective_time_ps(pattern: pd.Categorical | np.ndarray, payload: np.ndarray, group: np.ndarray,
                       crosses_dcn: np.ndarray, chip: Chip,
                       ring_directions: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Bandwidth time of collectives in ps, and a per-row REASONS index when it cannot be computed.

    ``pattern`` names each row's pattern (:func:`collective_patterns`: a name
    of COLLECTIVE_PATTERNS, NOT_COLLECTIVE or UNMODELLED). ``payload`` V is the bytes of the array each device holds in
    full: the result of an all-gather, the operand of a reduce-scatter,
    all-reduce, all-to-all or permute (totals over executions are fine: every
    formula is linear in V). N = group size; a group of one moves nothing.
    With f = (N-1)/N:

    TPU ICI (2D/3D torus), one bidirectional ring along one axis, W = link
    bandwidth one way (book part 3: T = V / W_bidi, W_bidi = 2W):
      all-gather, reduce-scatter  V·f / (2W)
      all-reduce                  2·V·f / (2W)      (reduce-scatter + all-gather)
      all-to-all                  (V/N)·m(m+1)/2 / W, m = floor(N/2): each
                                  chunk travels the shorter way round; tends
                                  to V·N/(8W) = the book's AllGather/4 on the
                                  global array N·V
      permute (one hop)           V / W
    A group spanning several torus axes is faster (bandwidth x axes) and a
    slice without wraparound up to 2x slower; neither is knowable from the
    group size alone, so one full ring is assumed. Where XLA's backend_config
    says it chose a unidirectional ring (``ring_directions`` 1, e.g.
    UniDirection1DRingStrategy), 2W becomes W.

    GPU NVLink through NVSwitch, E = per-GPU egress one way (book part 12):
      all-gather, reduce-scatter  V·f / E          all-reduce  2·V·f / E
      all-to-all                  V·f / E          permute     V / E
    (in-network reduction, NVLS, can halve an all-reduce; not modelled.)

    AMD Infinity Fabric full mesh, W per link, L links: as NVLink with
    E = min(N-1, L)·W, and permute = V / W (one direct link).

    Groups that cross slices or nodes (``crosses_dcn``) use the chip's DCN /
    scale-out bandwidth per chip as E in the switch formulas.

    Host transfers (copies between device memory and host memory, e.g. TPU
    host offload to memory space S(5)) move V bytes over the host link:
    V / PCIe bandwidth, whatever the group.
    """
    n = len(payload)
    t = np.zeros(n, dtype="float64")
    reason = np.zeros(n, dtype="int8")
    is_coll = np.asarray(pattern != NOT_COLLECTIVE)
    if not is_coll.any():
        return t, reason

    V, N = payload, group
    with np.errstate(divide="ignore", invalid="ignore"):
        f = (N - 1) / N
        m = np.floor(N / 2)
        ic = chip.interconnect

        def ring(ag: np.ndarray, all_to_all: np.ndarray, permute: np.ndarray) -> dict[str, np.ndarray]:
            """The time of each pattern from an all-gather's, an all-to-all's and a one-hop permute's."""
            return {"all-gather": ag, "reduce-scatter": ag, "all-reduce": 2 * ag, "all-to-all": all_to_all,
                    "permute": permute}

        def switch_like(E: float | None) -> dict[str, np.ndarray]:
            E = np.nan if E is None else E
            ag = V * f / E
            return ring(ag, ag, V / E)

        if ic is None:
            unknown = np.full(n, np.nan)
            local = ring(unknown, unknown, unknown)
        elif ic.topology.endswith("torus"):
            W = np.nan if ic.link_bandwidth is None else ic.link_bandwidth
            directions = np.full(n, 2.0) if ring_directions is None else np.where(
                np.isnan(ring_directions), 2.0, ring_directions)
            ag = V * f / (directions * W)
            local = ring(ag, (V / N) * m * (m + 1) / 2 / W, V / W)
        elif ic.topology == "full_mesh":
            W = np.nan if ic.link_bandwidth is None else ic.link_bandwidth
            L = np.nan if ic.links is None else ic.links
            ag = V * f / (np.minimum(N - 1, L) * W)
            local = ring(ag, ag, V / W)
        else:
            local = switch_like(ic.egress_bandwidth)
        dcn = switch_like(chip.dcn_bandwidth)
        local["host-transfer"] = dcn["host-transfer"] = V / (np.nan if chip.pcie_bandwidth is None
                                                             else chip.pcie_bandwidth)

    for name in COLLECTIVE_PATTERNS:
        rows = np.asarray(pattern == name)
        if rows.any():
            t[rows] = np.where(crosses_dcn, dcn[name], local[name])[rows]
    t *= PS_PER_S
    bad_kind = np.asarray(pattern == UNMODELLED)
    host_kind = np.asarray(pattern == "host-transfer")
    t[is_coll & (((N <= 1) & ~host_kind) | (V == 0)) & ~bad_kind] = 0.0
    t[bad_kind] = np.nan

    modelled = is_coll & ~bad_kind
    reason[bad_kind] = _BAD_KIND
    reason[modelled & np.isnan(N) & ~host_kind] = _NO_GROUP
    reason[modelled & np.isnan(V)] = _NO_PAYLOAD
    missing_bw = modelled & (reason == _OK) & np.isnan(t)
    reason[missing_bw & crosses_dcn] = _NO_DCN
    reason[missing_bw & ~crosses_dcn] = _NO_LINK
    return t, reason


def roofline(ops: pd.DataFrame, chip: Chip, time_column: str = "time_ps") -> tuple[pd.DataFrame, list[str]]:
    """The ops frame plus roofline columns, and the warnings to show.

    Reads ``flops``, ``bytes_accessed``, ``dtype``, ``collective_kind``,
    ``payload_bytes``, ``group_size``, ``crosses_dcn``, ``unknown`` and the
    measured ``time_column`` (ps; costs and time may be per execution or
    totals over executions, as long as they cover the same executions).
    Missing optional columns mean "no collective" / "not flagged".

    A collective row whose modelled cost is zero (the ``-done`` half of an
    async pair, which the cost model gives payload 0; a group of one) is
    "communication" with roofline time 0: its measured time is waiting on
    the network. ``group_size`` NaN (or not positive) means unknown.

    Adds (times in ps, rates per second):
    ``t_compute_ps, t_memory_ps, t_comm_ps``; ``roofline_time_ps`` = their max
    (NaN when unknown); ``bound`` ("compute", "memory", "communication" or
    "unknown"; ties go to the earlier of that list) and ``unknown_reason``;
    ``achieved_flops`` = flops / time; ``achieved_bandwidth`` = bytes / time;
    ``intensity`` = flops / byte; ``efficiency`` = roofline / measured;
    ``gap_ps`` = measured - roofline. The gap keeps its sign: a negative gap
    (the op ran faster than the model allows) means a peak or a cost is
    wrong, and is warned about rather than clipped.
    """
    for name in ("flops", "bytes_accessed", time_column):
        if name not in ops.columns:
            raise ValueError(f"roofline needs column {name!r}; got {list(ops.columns)}")
    out = ops.copy()
    flops = _column(out, "flops")
    nbytes = _column(out, "bytes_accessed")
    time = _column(out, time_column)

    classes = DTYPE_CLASSES + ("missing",)
    klass = _per_value(out, "dtype", lambda v: classes.index(dtype_class(v) or "missing"), "int8")
    peak = _per_value(out, "dtype", lambda v: chip.peak_flops_for(v) or np.nan, "float64")
    tf32 = _tf32_rows(out, klass, classes.index("fp32"), chip)
    peak[tf32] = chip.peak_flops.get("tf32", np.nan)
    t_compute = _term(flops, peak)
    t_memory = _term(nbytes, chip.hbm_bandwidth)
    patterns = collective_patterns(out)
    collective = np.asarray(patterns != NOT_COLLECTIVE)
    priced = collective & np.asarray(patterns != UNMODELLED)     # a collective whose pattern is modelled
    group = _column(out, "group_size")
    group[group <= 0] = np.nan                   # not positive: unknown, as NaN is
    t_comm, comm_reason = collective_time_ps(patterns, _column(out, "payload_bytes"), group,
                                             _flag(out, "crosses_dcn"), chip, _column(out, "ring_directions"))

    # A kernel costed by its shapes alone (cost_lower_bound) has bytes but no FLOP figure: its
    # t_compute stays unknown (NaN) and its roofline time is the memory time, a lower bound.
    flops_unknown = _flag(out, "cost_lower_bound") & np.isnan(flops) & ~np.isnan(nbytes)
    terms = np.vstack([t_compute, t_memory, t_comm])
    terms[0, flops_unknown] = -np.inf        # never the max: the bound is memory
    roof = terms.max(axis=0)  # NaN if any term is NaN
    terms[0, flops_unknown] = np.nan
    no_cost = (np.isnan(flops) & ~flops_unknown) | np.isnan(nbytes)
    reason = np.select(
        [_flag(out, "unknown"), no_cost, np.isnan(t_compute) & ~flops_unknown, np.isnan(t_memory),
         comm_reason != _OK,
         (roof == 0) & ~collective],
        [_FLAGGED, _NO_COST, _NO_PEAK, _NO_HBM, comm_reason, _ZERO], default=_OK).astype("int8")
    unknown = reason != _OK
    winner = np.argmax(np.nan_to_num(terms, nan=-1.0), axis=0).astype("int8")
    # A collective whose link time ties its memory time is still communication.
    winner[priced & (t_comm >= terms.max(axis=0))] = BOUNDS.index("communication")
    # A collective with nothing left to model (the "-done" half of an async pair, a group of
    # one) is time spent on communication: its whole measured time is the gap.
    winner[(roof == 0) & priced] = BOUNDS.index("communication")
    roof[unknown] = np.nan

    seconds = np.where(time > 0, time / PS_PER_S, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["t_compute_ps"] = t_compute
        out["t_memory_ps"] = t_memory
        out["t_comm_ps"] = t_comm
        out["roofline_time_ps"] = roof
        out["bound"] = pd.Categorical.from_codes(np.where(unknown, 3, winner), categories=list(BOUNDS))
        out["unknown_reason"] = pd.Categorical.from_codes(reason, categories=[r.format(chip=chip.name)
                                                                              for r in REASONS])
        out["achieved_flops"] = flops / seconds
        out["achieved_bandwidth"] = nbytes / seconds
        out["intensity"] = np.where(nbytes > 0, flops / nbytes, np.nan)
        out["efficiency"] = roof / np.where(time > 0, time, np.nan)
        out["gap_ps"] = time - roof
        out["gain_ps"] = gain_ps(out["gap_ps"].to_numpy(dtype="float64"), _column(out, "exposed_time_ps"))

    on_matrix_units = _flag(out, "contraction") if "contraction" in out.columns else np.ones(len(out), bool)
    warnings = _fallback_warnings(chip, np.where((flops > 0) & on_matrix_units, klass, -1), classes, time)
    warnings += _unknown_warnings(out, reason, time, klass, classes, chip)
    warnings += _faster_warning(out)
    out["above_roofline_reason"] = _above_roofline_reasons(out)
    if tf32.any():
        warnings.append(f"{int(tf32.sum())} f32 matrix op(s) at XLA's default precision are judged against the TF32 "
                        f"tensor-core peak of {chip.name} ({chip.peak_flops['tf32'] / 1e12:.1f} TFLOP/s), as the "
                        "GPU runs them; precision=HIGHEST ones against its fp32 peak")
    return out, warnings


ABOVE_ROOFLINE_GENERIC = ("measured faster than the roofline allows: data served from the L2 cache or on-chip "
                          "memory rather than HBM, or FLOPs or bytes the cost model overcounts for this op")


def _above_roofline_reasons(out: pd.DataFrame) -> np.ndarray:
    """Per op, why it could run faster than its roofline (None where it did not): the cost table's reason
    for this op (an in-place update, a partial read) where it has one, else the generic causes."""
    efficiency = out["efficiency"].to_numpy(dtype="float64", na_value=np.nan) if "efficiency" in out.columns \
        else np.full(len(out), np.nan)
    faster = efficiency > 1.0                   # every op above its roofline says why, within the tolerance too
    reasons = np.full(len(out), None, dtype=object)
    if faster.any():
        own = out["partial_access"].fillna("").astype(str).to_numpy() if "partial_access" in out.columns \
            else np.full(len(out), "", dtype=object)
        reasons[faster] = np.where(own[faster] != "", own[faster], ABOVE_ROOFLINE_GENERIC)
    return reasons


def _tf32_rows(out: pd.DataFrame, klass: np.ndarray, fp32: int, chip: Chip) -> np.ndarray:
    """The f32 contractions a chip with TF32 tensor cores runs as TF32: XLA's DEFAULT and HIGH precision
    (precision=HIGHEST, or a F32_F32_F32 algorithm, keeps full f32)."""
    if "tf32" not in chip.peak_flops or "contraction" not in out.columns:
        return np.zeros(len(out), dtype=bool)
    highest = out["precision"].astype(str).eq("highest").to_numpy() if "precision" in out.columns else False
    return _flag(out, "contraction") & (klass == fp32) & ~highest


def gain_ps(gap: np.ndarray, exposed: np.ndarray) -> np.ndarray:
    """Time the device would save if each op ran at its roofline (see GAIN_DEFINITION).

    ``gap`` = time - roofline time (NaN when unknown; negative when the op beat the model, which
    saves nothing); ``exposed`` = the time the device waited on the op (NaN for synchronous,
    non-collective work, whose whole gap is on the device's timeline).
    """
    gain = np.maximum(gap, 0.0)
    return np.where(np.isnan(exposed), gain, np.minimum(gain, np.maximum(exposed, 0.0)))


def _fallback_warnings(chip: Chip, klass: np.ndarray, classes: tuple[str, ...], time: np.ndarray) -> list[str]:
    """One warning per dtype class whose FLOPs used another class's peak (klass -1: no FLOPs, or FLOPs a
    precision rule does not concern, e.g. f32 elementwise work that never runs on a TPU's MXU)."""
    warnings = []
    for index in np.unique(klass[klass >= 0]):
        name = classes[index]
        if name in chip.peak_flops or name == "missing":
            continue
        _, note = chip.peak_flops_rule(name)
        if note:
            warnings.append(f"{note} ({_count(klass == index, time)})")
    return warnings


def _count(rows: np.ndarray, time: np.ndarray) -> str:
    total = np.nansum(time)
    share = 100 * np.nansum(time[rows]) / total if total > 0 else 0.0
    return f"{int(rows.sum())} ops, {share:.1f}% of measured time"


def _names(out: pd.DataFrame, rows: np.ndarray, limit: int = 3) -> str:
    for column in ("op", "name"):
        if column in out.columns:
            return ", ".join(str(v) for v in out.loc[rows, column].head(limit))
    return ""


def _unknown_warnings(out: pd.DataFrame, reason: np.ndarray, time: np.ndarray, klass: np.ndarray,
                      classes: tuple[str, ...], chip: Chip) -> list[str]:
    warnings = []
    # Ops with no HLO instruction at all were already named, with their share of time, where the
    # join found no cost for them: one warning per op and cause, so they are not listed again here.
    no_hlo = ~_flag(out, "has_cost") if "has_cost" in out.columns else np.zeros(len(out), dtype=bool)
    for code in np.unique(reason[reason != _OK]):
        rows = reason == code
        if code == _NO_COST:
            rows = rows & ~no_hlo
            if not rows.any():
                continue
        detail = REASONS[code].format(chip=chip.name)
        if code == _NO_PEAK:
            detail += " (" + ", ".join(classes[i] for i in np.unique(klass[rows])) + ")"
        names = _names(out, rows)
        warnings.append(f"bound unknown for {_count(rows, time)}: {detail}" + (f" (e.g. {names})" if names else ""))
    return warnings


def _faster_warning(out: pd.DataFrame) -> list[str]:
    efficiency = out["efficiency"].to_numpy(dtype="float64", na_value=np.nan)
    rows = efficiency > FASTER_TOLERANCE
    if not rows.any():
        return []
    worst = float(np.nanmax(efficiency[rows]))
    mask = np.zeros(len(out), dtype=bool)
    mask[np.argsort(-np.nan_to_num(efficiency, nan=0.0))[: min(int(rows.sum()), 3)]] = True
    names = _names(out, mask)
    return [f"{int(rows.sum())} ops ran faster than the roofline allows on the chip they were measured on "
            f"(up to {worst:.2f}x the model" + (f"; {names}" if names else "") + "): likely causes are FLOPs or "
            "bytes the cost model overcounts for the op (an operand read once but counted per use), a peak or "
            "bandwidth in the hardware table below the chip's real figure, or data served from on-chip memory "
            "or caches rather than HBM"]


def summarize(ops_frame: pd.DataFrame, chip: Chip, total_time_ps: float, idle_ps: float = 0.0,
              time_column: str = "time_ps", by_bound_ps: dict[str, float] | None = None) -> dict[str, Any]:
    """Step or run summary of roofline-labelled ops (runs :func:`roofline` first if needed).

    ``total_time_ps`` is the devices' time (span x active devices). ``by_bound_ps``, when given,
    is the devices' busy time split by bound (traceview.timeline.devices: the parts add up to the
    busy time); otherwise each op's measured time goes to its bound (its exposed time where the
    ``exposed_time_ps`` column has one). ``idle`` is ``idle_ps``.

    FLOPs count only ops with a cost (an op the cost model could not cost is unknown, not zero).
    MFU = those FLOPs / (total_time_ps x peak), the peak being the one the chip's rule gives the
    dtype class carrying the most FLOPs of matrix work (``mfu_dtype``; ``mfu_peak_dtype`` names
    the class whose figure was used). ``efficiency`` is defined in EFFICIENCY_DEFINITION. When no
    op behind a figure has a cost, the figure is None and ``<figure>_reason`` says why; never 0.
    """
    warnings: list[str] = []
    frame = ops_frame
    if "bound" not in frame.columns or "gap_ps" not in frame.columns:
        frame, warnings = roofline(frame, chip, time_column=time_column)
    measured = _column(frame, time_column, 0.0)
    bound = pd.Categorical(frame["bound"], categories=list(BOUNDS)).codes   # index into BOUNDS
    by_bound = _time_by_bound(frame, measured, bound, by_bound_ps)
    by_bound["idle"] = float(idle_ps)
    flops = _flops_and_mfu(frame, chip, total_time_ps, warnings)
    roof_program, efficiency, efficiency_reason = _program_efficiency(frame, measured, bound, total_time_ps,
                                                                      warnings)
    nbytes = _column(frame, "bytes_accessed")
    has_bytes = ~np.isnan(nbytes) & ~_flag(frame, "unknown")
    seconds = total_time_ps / PS_PER_S if total_time_ps and total_time_ps > 0 else None
    total_flops = flops["flops"]
    return {
        "target": chip.name,
        "device_time_ps": float(total_time_ps),
        "time_by_bound_ps": by_bound,
        "flops": total_flops,
        "flops_reason": flops["flops_reason"],
        "achieved_flops": total_flops / seconds if total_flops is not None and seconds else None,
        "bytes_accessed": float(np.sum(nbytes[has_bytes])) if has_bytes.any() else None,
        "mfu": flops["mfu"], "mfu_reason": flops["mfu_reason"], "mfu_dtype": flops["mfu_dtype"],
        "mfu_peak_dtype": flops["mfu_peak_dtype"], "mfu_peak_flops": flops["mfu_peak_flops"],
        "roofline_time_ps": roof_program,
        "efficiency": efficiency, "efficiency_reason": efficiency_reason,
        "efficiency_definition": EFFICIENCY_DEFINITION,
        "seen_flops": _seen_ceiling(frame, measured, "compute", "achieved_flops", chip, flops["mfu_peak_dtype"]),
        "seen_bandwidth": _seen_ceiling(frame, measured, "memory", "achieved_bandwidth", chip, None),
        "warnings": warnings,
    }


SEEN_MIN_SHARE = 0.005     # an op below this share of the op time is too short to say what the chip reaches


def _seen_ceiling(frame: pd.DataFrame, measured: np.ndarray, bound: str, rate: str, chip: Chip,
                  dtype: str | None) -> dict[str, Any] | None:
    """What the chip was seen to reach in this trace, beside the datasheet figure the roofline keeps: the
    highest FLOP/s (or HBM bytes/s) of an op bound by it, of at least ``SEEN_MIN_SHARE`` of the op time and
    not above its roofline (an overcounted cost would read as a faster chip). None when no op qualifies."""
    if rate not in frame.columns or "bound" not in frame.columns:
        return None
    values = _column(frame, rate)
    total = float(np.nansum(measured))
    ok = (frame["bound"].astype(str).to_numpy() == bound) & ~np.isnan(values) & (values > 0)
    ok &= measured >= SEEN_MIN_SHARE * total if total > 0 else False
    if "above_roofline_reason" in frame.columns:
        ok &= frame["above_roofline_reason"].isna().to_numpy()
    if not ok.any():
        return None
    best = int(np.flatnonzero(ok)[np.argmax(values[ok])])
    peak = (chip.peak_flops_for(dtype) if dtype else None) if bound == "compute" else chip.hbm_bandwidth
    op = str(frame["op"].iloc[best]) if "op" in frame.columns else ""
    return {"value": float(values[best]), "op": op, "share_of_peak": float(values[best] / peak) if peak else None,
            "peak_dtype": dtype if bound == "compute" else None}


def _time_by_bound(frame: pd.DataFrame, measured: np.ndarray, bound: np.ndarray,
                   by_bound_ps: dict[str, float] | None) -> dict[str, float]:
    """Device time per bound: the busy time split given, else each op's exposed (or measured) time."""
    if by_bound_ps is not None:
        return {b: float(by_bound_ps.get(b, 0.0)) for b in BOUNDS}
    time = measured
    if "exposed_time_ps" in frame.columns:
        exposed = _column(frame, "exposed_time_ps")
        time = np.where(~np.isnan(exposed), exposed, measured)
    return {b: float(np.nansum(time[bound == i])) for i, b in enumerate(BOUNDS)}


def _flops_and_mfu(frame: pd.DataFrame, chip: Chip, total_time_ps: float, warnings: list[str]) -> dict[str, Any]:
    """The costed FLOPs and the MFU, each with its reason when unknown (warnings appended to ``warnings``)."""
    flops = _column(frame, "flops")
    # FLOPs are known only where the cost model costed the op (a kernel costed by its shapes alone,
    # cost_lower_bound, has bytes but no FLOP count: unknown, not zero)
    costed = ~np.isnan(flops) & ~_flag(frame, "unknown") & ~_flag(frame, "cost_lower_bound")
    if "has_cost" in frame.columns:
        costed &= _flag(frame, "has_cost")
    total_flops = float(np.sum(flops[costed])) if costed.any() else None
    kernels = _flops_unknown_kernels(frame)
    mfu, mfu_reason, mfu_dtype, mfu_peak_dtype, mfu_peak = _mfu(frame, chip, flops, costed, total_flops,
                                                                total_time_ps)
    flops_reason = None if total_flops is not None else "no op has a cost (no HLO instruction matched, or " \
                                                        "the cost model could not cost them)"
    if kernels:
        listed = _some(kernels)
        if total_flops is None:
            flops_reason = mfu_reason = (f"no op has a FLOP count: the {len(kernels)} custom kernels behind it "
                                         f"have no cost estimate ({listed}): bytes but no FLOP figure")
        else:
            warnings.append(f"FLOPs, FLOP/s and MFU leave out {len(kernels)} custom kernels with no FLOP figure "
                            f"(no cost estimate; their FLOPs are unknown, not 0): {listed}")
    if mfu_reason:
        warnings.append(f"MFU unknown: {mfu_reason}")
    elif mfu_dtype and mfu_peak_dtype and mfu_dtype != mfu_peak_dtype:
        warnings.append(_mfu_fallback_warning(frame, chip, mfu_dtype, mfu_peak_dtype, costed))
    return {"flops": total_flops, "flops_reason": flops_reason, "mfu": mfu, "mfu_reason": mfu_reason,
            "mfu_dtype": mfu_dtype, "mfu_peak_dtype": mfu_peak_dtype, "mfu_peak_flops": mfu_peak}


def _mfu_fallback_warning(frame: pd.DataFrame, chip: Chip, mfu_dtype: str, peak_dtype: str,
                          costed: np.ndarray) -> str:
    """Why MFU divides by another dtype's peak."""
    _, note = chip.peak_flops_rule(mfu_dtype)
    matrix = "contraction" not in frame.columns or bool((_flag(frame, "contraction") & costed).any())
    if note and matrix:
        return f"MFU uses the {peak_dtype} peak for {mfu_dtype} FLOPs: {note}"
    return (f"MFU uses the {peak_dtype} peak of {chip.name} for {mfu_dtype} FLOPs: {chip.name} has "
            f"no {mfu_dtype} figure" + ("" if matrix else " (the program has no matrix work)"))


def _program_efficiency(frame: pd.DataFrame, measured: np.ndarray, bound: np.ndarray, total_time_ps: float,
                        warnings: list[str]) -> tuple[float | None, float | None, str | None]:
    """(the program's roofline time, its efficiency (EFFICIENCY_DEFINITION), the reason when unknown)."""
    known = (bound != BOUNDS.index("unknown")) & ~np.isnan(measured)
    terms = [float(np.nansum(_column(frame, c)[known])) for c in ("t_compute_ps", "t_memory_ps")]
    roof_program = max(terms) if known.any() else None
    if roof_program is None:
        return None, None, "no op has a known bound (no cost, or no figure on the chip)"
    if not total_time_ps or total_time_ps <= 0:
        return roof_program, None, "no measured device time"
    efficiency = roof_program / total_time_ps
    if efficiency > 1:
        warnings.append(f"the program's roofline time ({roof_program / 1e6:.3f} us) exceeds the devices' time "
                        f"({total_time_ps / 1e6:.3f} us): the cost model overcounts or a chip figure is too "
                        "low; overall efficiency shown as 100%")
        efficiency = 1.0
    return roof_program, efficiency, None


def _flops_unknown_kernels(frame: pd.DataFrame) -> list[str]:
    """Names of the ops costed by their shapes alone (custom kernels with no cost estimate)."""
    if "cost_lower_bound" not in frame.columns:
        return []
    mask = _flag(frame, "cost_lower_bound")
    name = "op" if "op" in frame.columns else "name" if "name" in frame.columns else None
    if name is None:
        return [f"row {i}" for i in np.flatnonzero(mask)]
    return list(dict.fromkeys(str(v) for v in frame.loc[mask, name]))


def _some(names: list[str], limit: int = 10) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _mfu(frame: pd.DataFrame, chip: Chip, flops: np.ndarray, costed: np.ndarray, total_flops: float | None,
         total_time_ps: float) -> tuple[float | None, str | None, str | None, str | None, float | None]:
    """(mfu, reason when None, dtype class of the FLOPs, class whose peak was used, that peak)."""
    if total_flops is None:
        return None, "no op has a FLOP count (no HLO instruction matched the trace's ops, or none could be costed)", \
            None, None, None
    if not total_time_ps or total_time_ps <= 0:
        return None, "no measured device time", None, None, None
    classes = DTYPE_CLASSES + ("missing",)
    klass = _per_value(frame, "dtype", lambda v: classes.index(dtype_class(v) or "missing"), "int8")
    weights = np.where(costed, np.nan_to_num(flops), 0.0)
    if "contraction" in frame.columns and (weights * _flag(frame, "contraction")).sum() > 0:
        weights = weights * _flag(frame, "contraction")        # matrix work sets the peak
    per_class = np.bincount(klass, weights=weights, minlength=len(classes))[:-1]
    dtype = classes[int(per_class.argmax())] if per_class.max() > 0 else None
    if total_flops == 0:
        return 0.0, None, dtype, None, None
    peak, peak_class = None, None
    if dtype is not None:
        peak, _ = chip.peak_flops_rule(dtype)
        if peak is not None:
            peak_class = dtype if dtype in chip.peak_flops else chip.dtype_fallbacks.get(dtype, (dtype, ""))[0]
    if peak is None and chip.peak_flops_for("bf16") is not None:
        peak, peak_class = chip.peak_flops_for("bf16"), "bf16"
    if peak is None:
        return None, f"{chip.name} has no peak FLOP/s for {dtype or 'the FLOPs'} dtype", dtype, None, None
    return total_flops / (total_time_ps / PS_PER_S * peak), None, dtype, peak_class, peak
