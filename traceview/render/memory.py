"""MemoryReport -> JSON (the contract in docs/architecture.md), terminal table, Markdown."""

from __future__ import annotations

from traceview.hostreduce.memory_peaks import HeldAtPeak
from traceview.memory.headroom import Headroom
from traceview.memory.static import StaticBuffer
from traceview.memory.view import MemoryReport
from traceview.render.escape import markdown_text, terminal_text
from traceview.render.tables import markdown_table, text_table
from traceview.units import PS_PER_US, fmt_bytes, fmt_time_us, json_scalar


def _us(ps: int | None, origin: int) -> float | None:
    return None if ps is None else (ps - origin) / PS_PER_US


def headroom_json(room: Headroom) -> dict:
    """A peak against the target's capacity (``utilization``: peak / capacity, None without a capacity)."""
    return {"target": room.target, "capacity_bytes": room.capacity_bytes,
            "capacity_source": room.capacity_source, "peak_bytes": room.peak_bytes, "fits": room.fits,
            "headroom_bytes": room.headroom_bytes,
            "utilization": None if not room.capacity_bytes else room.peak_bytes / room.capacity_bytes}


def buffer_json(buffer: StaticBuffer) -> dict:
    """One buffer live at a module's peak (buffer assignment)."""
    return {"instruction": buffer.instruction, "shape": buffer.shape, "size_bytes": buffer.size_bytes,
            "kind": buffer.kind, "source": buffer.source, "opcode": buffer.opcode, "op_name": buffer.op_name}


def held_json(held: HeldAtPeak, origin: int) -> dict:
    """One thing held at an allocator's peak (its time from the report's origin; no address)."""
    return {"size_bytes": held.size_bytes, "requested_bytes": held.requested_bytes, "shape": held.shape,
            "op": held.op, "region_type": held.region_type, "data_type": held.data_type, "step": held.step,
            "kind": held.kind, "time_us": _us(held.time_ps, origin)}


def memory_json(report: MemoryReport) -> dict:
    origin = report.origin_ps
    target = None
    if report.target is not None:
        target = {"name": report.target.name, "detected": report.target_detected, "source": report.target_source,
                  "hbm_capacity_bytes": json_scalar(report.target.hbm_capacity),
                  "hbm_capacity_source": report.target.sources.get("hbm_capacity")}
    memories = []
    for m in report.memories:
        room = report.memory_headroom(m)
        detail = m.unpacked()          # its timeline and rows, unpacked once
        memories.append({
            "device": m.device, "name": m.name, "host": m.host, "capacity_bytes": m.capacity_bytes,
            "peak_bytes": m.peak_bytes, "peak_time_us": _us(m.peak_time_ps, origin), "step": m.step,
            "stack_bytes": m.stack_bytes, "heap_bytes": m.heap_bytes, "free_bytes": m.free_bytes,
            "fragmentation": m.fragmentation, "lifetime_peak_bytes": m.lifetime_peak_bytes, "events": m.events,
            "timeline": [{"time_us": _us(int(t), origin), "stack_bytes": int(s), "heap_bytes": int(h),
                          "usage_bytes": int(s + h), "step": int(st)}
                         for t, s, h, st in detail.timeline[["time_ps", "stack_bytes", "heap_bytes", "step"]]
                         .itertuples(index=False)],
            "at_peak": [held_json(a, origin) for a in detail.at_peak],
            "headroom": headroom_json(room) if room else None,
        })
    modules = []
    for s in report.modules:
        room = report.module_headroom(s)
        modules.append({
            "program_id": s.program_id, "name": s.name, "peak_bytes": s.peak_bytes,
            "heap_peak_bytes": s.heap_peak_bytes, "indefinite_bytes": s.indefinite_bytes,
            "total_allocation_bytes": s.total_allocation_bytes, "peak_instruction": s.peak_instruction,
            "bytes_by_kind": s.bytes_by_kind, "buffers": [buffer_json(b) for b in s.buffers],
            "headroom": headroom_json(room) if room else None,
        })
    return {"source": report.source, "target": target, "memories": memories, "modules": modules,
            "warnings": list(report.warnings)}


def _room_cell(room: Headroom | None) -> str:
    if room is None or room.fits is None or room.headroom_bytes is None:
        return "-"
    if room.fits:
        return f"fits ({fmt_bytes(room.headroom_bytes)} free)"
    return f"MISSES by {fmt_bytes(-room.headroom_bytes)}"


HELD_HEADERS = ["size", "op", "shape", "region", "step"]


def _held_rows(held: list[HeldAtPeak], top: int) -> tuple[list[str], list[list[str]], str]:
    """The table of what an allocator held at its peak; the shape and region columns only where some row has
    one (a JAX GPU trace's allocator events name neither)."""
    rows = [[fmt_bytes(a.size_bytes), a.op or "-", a.shape or "-", a.region_type or "-",
             "-" if a.step is None else str(a.step)] for a in held[:top]]
    keep = [i for i, h in enumerate(HELD_HEADERS) if h not in ("shape", "region") or any(r[i] != "-" for r in rows)]
    return [HELD_HEADERS[i] for i in keep], [[r[i] for i in keep] for r in rows], "".join("rllll"[i] for i in keep)


def _more_line(line: str, markdown: bool) -> list[str]:
    """The "... and N more" under a table: in Markdown after a blank line, else it would read as a row."""
    return ["", line] if markdown else [line]


def memory_text(report: MemoryReport, top: int = 10, markdown: bool = False) -> str:
    # Table cells go in as they are (each table escapes its cells for its format); the other lines are escaped
    # here, once.
    table = markdown_table if markdown else text_table
    esc = markdown_text if markdown else terminal_text      # lines outside tables: a table escapes its cells
    head = (lambda s: f"## {s}") if markdown else (lambda s: s)
    origin = report.origin_ps
    out: list[str] = []
    if report.target is not None:
        source = report.target_source or ("trace" if report.target_detected else "--target")
        how = "detected" if source == "trace" else source
        memory = "memory" if report.target.kind == "CPU" else "HBM"
        out.append(esc(f"Target: {report.target.name} ({how}), {memory} {fmt_bytes(report.target.hbm_capacity)}"))
        out.append("")
    if report.memories:
        out.append(head("Runtime peak per memory (allocator events)"))
        out.append("")
        rows = []
        for m in report.memories:
            rows.append([m.device, fmt_bytes(m.peak_bytes), fmt_bytes(m.capacity_bytes),
                         fmt_bytes(m.stack_bytes), fmt_bytes(m.heap_bytes), f"{m.fragmentation:.1%}",
                         fmt_time_us(_us(m.peak_time_ps, origin)), str(m.step),
                         _room_cell(report.memory_headroom(m))])
        out.append(table(["memory", "peak", "capacity", "stack", "heap", "fragmentation", "at", "step",
                          "headroom on target"], rows, "lrrrrrrrl"))
        for m in report.memories:
            at_peak = m.at_peak    # unpacked once
            if not at_peak:
                continue
            out.append("")
            out.append(head(f"Held at the peak of {esc(m.device)}") if markdown
                       else f"Held at the peak of {esc(m.device)}:")
            if markdown:
                out.append("")
            out.append(table(*_held_rows(at_peak, top)))
            if len(at_peak) > top:
                out += _more_line(f"... and {len(at_peak) - top} more", markdown)
        out.append("")
    if report.modules:
        out.append(head("Static peak per HLO module (buffer assignment)"))
        out.append("")
        rows = [[s.name, "-" if s.program_id is None else str(s.program_id), fmt_bytes(s.peak_bytes),
                 fmt_bytes(s.heap_peak_bytes), fmt_bytes(s.indefinite_bytes), s.peak_instruction or "-",
                 _room_cell(report.module_headroom(s))] for s in report.modules[:max(top, 1) * 3]]
        out.append(table(["module", "program id", "peak", "temporaries", "params/outputs/consts",
                          "peak at", "headroom on target"], rows, "lrrrrll"))
        if len(report.modules) > max(top, 1) * 3:
            out += _more_line(f"... and {len(report.modules) - max(top, 1) * 3} more modules", markdown)
        biggest = report.modules[0]
        out.append("")
        out.append(head(f"Buffers live at the peak of {esc(biggest.name)}") if markdown
                   else f"Buffers live at the peak of {esc(biggest.name)}:")
        if markdown:
            out.append("")
        rows = [[fmt_bytes(b.size_bytes), b.instruction, b.shape or "-", b.kind, b.source or "-"]
                for b in biggest.buffers[:top]]
        out.append(table(["size", "instruction", "shape", "kind", "source"], rows, "rllll"))
        if len(biggest.buffers) > top:
            out += _more_line(f"... and {len(biggest.buffers) - top} more buffers", markdown)
        out.append("")
    if not report.memories and not report.modules:
        out.append("No memory data: no allocator events and no buffer assignment found.")
        out.append("")
    if report.warnings:
        out.append(head("Warnings") if markdown else "Warnings:")
        if markdown:
            out.append("")
        out.extend(f"- {esc(w)}" for w in report.warnings)
        out.append("")
    return "\n".join(out)
