"""Which chip a trace was captured on, from what its device planes state.

TPUs are matched on the model string the trace states ("TPU v6 Lite" is a
v6e) and keep the trace's own peak figures where it states them; GPUs on
vendor, compute capability, core count and memory size (traces carry no peak
FLOP/s for GPUs). One target is chosen for the whole trace.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from traceview.hardware.chips import Chip
from traceview.parsers.profile import Device
from traceview.units import fmt_bytes, fmt_si


def _float(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out > 0 and math.isfinite(out) else None


def _norm_model(text: str) -> str:
    return re.sub(r"[\s_-]+", " ", text.strip().lower())


def detect_chip(device: Device, db: dict[str, Chip]) -> tuple[Chip | None, list[str]]:
    """The chip a device plane describes, and what the caller should be told (see :func:`_detect`)."""
    chip, messages = _detect(device, db)
    return chip, [f"{device.id}: {m}" for m in messages]


def _identity_stated(device: Device) -> bool:
    """Whether the plane says anything that identifies the chip (some planes carry no stats)."""
    if (device.kind or "").upper() == "CPU":
        return True
    facts = [device.model, device.peak_flops, device.compute_capability, device.core_count, device.memory_bytes]
    return any(f is not None for f in facts)


def detect_target(devices: list[Device], db: dict[str, Chip]) -> tuple[Chip | None, list[str]]:
    """One target for a whole trace: the chip most accelerator devices are detected as.

    CPU planes count only when the trace has no TPU/GPU. Planes that state
    nothing about themselves are assumed to be their siblings' chip. Mixed
    chips give a warning; identical messages from many devices are merged.
    """
    accel = [d for d in devices if (d.kind or "").upper() in ("TPU", "GPU")]
    pool = accel or [d for d in devices if (d.kind or "").upper() == "CPU"]
    if not pool:
        return None, ["the trace has no device planes to detect a chip from; give --target"]
    silent = [d for d in pool if not _identity_stated(d)]
    stated = [d for d in pool if _identity_stated(d)] or pool
    by_message: dict[str, list[str]] = {}
    found: dict[str, tuple[Chip, int]] = {}
    seen: dict[tuple, tuple[Chip | None, list[str]]] = {}
    for device in stated:
        # A pod's devices state the same facts: each set is detected once (the chip kept for a name is the
        # first device's, whose id its sources name; messages never name the device).
        facts = _facts(device)
        if facts not in seen:
            seen[facts] = _detect(device, db)
        chip, messages = seen[facts]
        for message in messages:
            by_message.setdefault(message, []).append(device.id)
        if chip is not None:
            first, count = found.get(chip.name, (chip, 0))
            found[chip.name] = (first, count + 1)
    warnings = [f"{ids[0]}{f' and {len(ids) - 1} more devices' if len(ids) > 1 else ''}: {message}"
                for message, ids in by_message.items()]
    if not found:
        return None, warnings
    name, (chip, _count) = max(found.items(), key=lambda item: item[1][1])
    if len(found) > 1:
        mix = ", ".join(f"{n} ({c} devices)" for n, (_, c) in found.items())
        warnings.append(f"the trace mixes chips: {mix}; judging every op against {name} (give --target to choose)")
    if silent and stated is not pool:
        warnings.append(f"{len(silent)} device planes state no model or peaks (e.g. {silent[0].id}); "
                        f"assumed to be {name} like the others")
    return chip, warnings


def _facts(device: Device) -> tuple:
    """What detection reads of a device (its id too where it may name an ad-hoc chip: no model stated)."""
    return (device.kind, device.model, device.vendor, device.peak_flops, device.hbm_bandwidth, device.memory_bytes,
            device.clock_hz, device.core_count, device.compute_capability, None if device.model else device.id)


def _detect(device: Device, db: dict[str, Chip]) -> tuple[Chip | None, list[str]]:
    """Detection without the device prefix on messages.

    TPUs match on the model string the trace states ("TPU v6 Lite" is
    tpu-v6e); a TPU trace's own peak FLOP/s and HBM bandwidth win over the
    table (the copy's ``sources`` say so; other dtypes keep their ratio to
    bf16, e.g. halved when a plane is one TensorCore of a two-core chip). GPUs match on vendor, model name,
    compute capability, SM/CU count and memory size; their trace bandwidth
    (memory clock x bus width) is only compared with the table, because ROCm
    reports half the datasheet figure. CPUs get the ``cpu`` entry, whose
    figures are assumptions.
    """
    kind = (device.kind or "").upper()
    if kind == "TPU":
        return _detect_tpu(device, db)
    if kind == "GPU":
        return _detect_gpu(device, db)
    if kind == "CPU":
        chip = db.get("cpu")
        if chip is None:
            return None, ["no 'cpu' entry in the hardware table; give --target"]
        assumed = assumed_figures(chip, ("peak_flops.fp32", "hbm_bandwidth"))
        if not assumed:   # the user gave real figures: nothing to warn about
            return chip, []
        return chip, [f"host CPU judged against the 'cpu' entry (assumed figures: "
                      f"fp32 {fmt_si(chip.peak_flops.get('fp32'), 'FLOP/s')}, memory "
                      f"{fmt_si(chip.hbm_bandwidth, 'B/s')}); give real figures with --hardware-file "
                      "(format: docs/hardware.md)"]
    return None, [f"device kind {device.kind!r} is not TPU, GPU or CPU; give --target"]


def _detect_tpu(device: Device, db: dict[str, Chip]) -> tuple[Chip | None, list[str]]:
    model = device.model
    peak, hbm = _float(device.peak_flops), _float(device.hbm_bandwidth)
    found = None
    if model:
        wanted = _norm_model(str(model))
        for chip in db.values():
            strings = chip.identify.get("model_strings", []) if chip.kind == "TPU" else []
            if wanted in (_norm_model(s) for s in strings):
                found = chip
                break
    source = f"trace: {device.id} plane stats"
    if found is None:
        if peak is None:
            if not model:  # e.g. trace-event JSON: its processes name no model
                return None, ["the trace names no TPU model and states no peaks; give --target"]
            return None, [f"TPU model {model!r} is not in the hardware table and the trace "
                          "states no peaks; give --target"]
        adhoc = Chip(name=f"trace:{model or device.id}", kind="TPU", vendor="Google")
        adhoc = adhoc.with_figures(source, peak_flops={"bf16": peak}, hbm_bandwidth=hbm)
        return adhoc, [f"TPU model {model!r} is not in the hardware table; using the trace's "
                       f"own peaks (bf16 {fmt_si(peak, 'FLOP/s')}, HBM {fmt_si(hbm, 'B/s')}); interconnect unknown"]
    warnings: list[str] = []
    if peak is None and hbm is None:
        return found, warnings
    peaks = {}
    table_bf16 = found.peak_flops.get("bf16")
    if peak:
        # The trace's figure is bf16 for its device, which may be one TensorCore of a
        # two-core chip or a different clock: other dtypes keep their ratio to bf16.
        ratio = peak / table_bf16 if table_bf16 else 1.0
        peaks = {k: v * ratio for k, v in found.peak_flops.items()} if abs(ratio - 1) > 0.01 else {}
        peaks["bf16"] = peak
    chip = found.with_figures(source, peak_flops=peaks, hbm_bandwidth=hbm)
    chip.notes = chip.notes + [f"peaks stated by the trace ({device.id}) win over the table"]
    for label, old, new in (("bf16 peak", table_bf16, peak), ("HBM bandwidth", found.hbm_bandwidth, hbm)):
        if old and new and abs(new / old - 1) > 0.01:
            scaled = " (other dtypes scaled alike)" if label == "bf16 peak" and len(peaks) > 1 else ""
            unit = "FLOP/s" if label == "bf16 peak" else "B/s"
            warnings.append(f"the trace states {label} {fmt_si(new, unit)}, the table "
                            f"{fmt_si(old, unit)} for {found.name}; using the trace's figure{scaled}")
    return chip, warnings


def _gpu_facts(device: Device) -> dict[str, Any]:
    cores = device.core_count
    return {"vendor": device.vendor, "model": device.model, "cc": device.compute_capability,
            "memory": _float(device.memory_bytes), "cores": int(cores) if cores else None,
            "bandwidth": _float(device.hbm_bandwidth), "clock": device.clock_hz}


def _detect_gpu(device: Device, db: dict[str, Chip]) -> tuple[Chip | None, list[str]]:
    facts = _gpu_facts(device)
    described = (f"vendor {facts['vendor'] or '?'}, model {facts['model'] or '?'}, compute capability "
                 f"{facts['cc'] or '?'}, {facts['cores'] or '?'} cores, memory {fmt_bytes(facts['memory'])}")
    gpus = [c for c in db.values() if c.kind == "GPU"]
    if facts["vendor"]:
        vendor = str(facts["vendor"]).lower().replace("advanced micro devices", "amd")
        gpus = [c for c in gpus if str(c.identify.get("vendor", c.vendor or "")).lower() in vendor]
    candidates: list[Chip] = []
    if facts["model"]:
        model = _norm_model(facts["model"])
        candidates = [c for c in gpus if any(_norm_model(p) in model for p in c.identify.get("model_patterns", []))]
    if not candidates and facts["cc"]:
        same_cc = [c for c in gpus if str(c.identify.get("compute_capability")) == facts["cc"]]
        if facts["cores"]:
            exact = [c for c in same_cc if c.identify.get("core_count") == facts["cores"]]
            candidates = exact or [c for c in same_cc if c.identify.get("core_count") is None]
        else:
            candidates = same_cc
    if not candidates:
        return None, [f"GPU ({described}) matches no chip in the hardware table; give --target"]
    warnings: list[str] = []
    chip = _nearest_memory(candidates, facts["memory"], facts["clock"])
    if len(candidates) > 1:
        others = [c.name for c in candidates if c is not chip]
        if facts["memory"] is None:
            warnings.append(f"GPU ({described}) could be {chip.name} or {', '.join(others)}; "
                            f"picked {chip.name} (give --target to choose)")
    chip = copy.deepcopy(chip)
    chip.notes = chip.notes + [f"detected from {device.id}: {described}"]
    table_bw, trace_bw = chip.hbm_bandwidth, facts["bandwidth"]
    if trace_bw and table_bw and abs(trace_bw / table_bw - 1) > 0.10:
        warnings.append(f"the trace states memory bandwidth {fmt_si(trace_bw, 'B/s')}, the datasheet "
                        f"{fmt_si(table_bw, 'B/s')} for {chip.name}; using the datasheet (GPU runtimes derive "
                        "this figure from clock and bus width)")
    elif trace_bw and not table_bw:
        chip = chip.with_figures(f"trace: {device.id} memory_bandwidth", hbm_bandwidth=trace_bw)
    return chip, warnings


def _nearest_memory(chips: list[Chip], memory: float | None, clock: float | None) -> Chip:
    """The chip whose memory size (then clock) is closest to the device's, in ratio."""
    def distance(chip: Chip) -> tuple[float, float]:
        mem = chip.identify.get("memory_bytes")
        d_mem = abs(math.log(memory / mem)) if memory and mem else 0.0
        clk = chip.identify.get("clock_hz")
        d_clk = abs(math.log(clock / clk)) if clock and clk else 0.0
        return d_mem, d_clk
    return min(chips, key=distance)


def assumed_figures(chip: Chip, paths: tuple[str, ...]) -> list[str]:
    """Which of the figures at ``paths`` ("peak_flops.fp32", "hbm_bandwidth") are assumptions, not
    sourced figures (a figure the user gave in --hardware-file never is)."""
    return [p for p in paths if "ASSUMPTION" in chip.sources.get(p, "") or
            (chip.assumption and p not in chip.sources)]


def device_model_name(device: Device) -> str:
    """What a device is, in the words its plane gives: the stated model ("TPU v6 Lite",
    "NVIDIA H100 80GB HBM3"); else the vendor's architecture name built from the stated compute
    capability (AMD: the gfx target family, e.g. cc 9.4 is gfx94x, the MI300 series; NVIDIA: sm_90),
    with the core count and memory size; "-" when the plane states nothing."""
    if device.model:
        return str(device.model)
    vendor = str(device.vendor or "").strip()
    is_amd = vendor.lower().startswith(("amd", "advanced micro devices"))
    parts = []
    cc = device.compute_capability
    if cc:
        major, _, minor = str(cc).partition(".")
        if is_amd:
            # ROCm reports gfx<major><minor><stepping> as major.minor: the stepping is not in the trace.
            parts.append(f"gfx{major}{int(minor or 0):x}x" if minor.isdigit() else f"cc {cc}")
        elif vendor.lower().startswith("nvidia") or not vendor:
            parts.append(f"sm_{major}{minor or 0}")
    if device.core_count:
        parts.append(f"{device.core_count} {'CUs' if is_amd else 'SMs' if device.kind == 'GPU' else 'cores'}")
    if device.memory_bytes:
        parts.append(fmt_bytes(float(device.memory_bytes)))
    if not parts:
        return vendor or "-"
    head = f"{vendor} {parts[0]}" if vendor else parts[0]
    return ", ".join([head] + parts[1:])
