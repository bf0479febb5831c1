"""`traceview whatif` output: the JSON contract (docs/whatif.md), a terminal table and Markdown."""

from __future__ import annotations

from collections.abc import Iterable

from traceview.render.escape import markdown_text, terminal_text
from traceview.render.tables import markdown_table, text_table
from traceview.units import PS_PER_US, fmt_bytes, fmt_share, fmt_time_us, json_scalar
from traceview.whatif.book import Crossover
from traceview.whatif.report import Projection, Term, WhatIf

HEADERS = ["rank", "mesh", "batch", "chip", "step", "vs today", "tokens/s/chip", "MFU", "bound", "memory/chip",
           "fits", "crossovers", "dominant change"]
ALIGN = "rllrrrrrlrlll"


def _us(ps: float | None) -> float | None:
    return None if ps is None else json_scalar(ps / PS_PER_US)


def mesh_text(mesh: dict[str, int]) -> str:
    shown = {r: s for r, s in mesh.items() if s > 1}
    return " x ".join(f"{r} {s}" for r, s in shown.items()) if shown else "1 chip"


def _term(t: Term) -> dict:
    return {"what": t.what, "role": t.role, "time_us": _us(t.time_ps), "baseline_us": _us(t.baseline_ps),
            "formula": t.formula, "measured": t.measured}


def _crossover(c: Crossover) -> dict:
    return {"role": c.role, "rule": c.rule, "value": json_scalar(c.value), "threshold": json_scalar(c.threshold),
            "compute_bound": c.compute_bound, "how": c.how}


def config_record(p: Projection) -> dict:
    cfg = p.config
    return {
        "mesh": {r: s for r, s in cfg.mesh.items() if s > 1}, "batch": json_scalar(cfg.batch), "chips": cfg.chips,
        "target": cfg.chip.name if cfg.chip else None, "label": cfg.label,
        "step_time_us": _us(p.step_ps), "step_time_reason": p.step_reason or None,
        "tokens_per_s_per_chip": json_scalar(p.tokens_per_s_per_chip), "mfu": json_scalar(p.mfu),
        "bound": p.bound, "memory_per_chip_bytes": json_scalar(p.memory_per_chip_bytes),
        "memory_terms_bytes": {k: json_scalar(v) for k, v in p.memory_terms.items()},
        "memory_reason": p.memory_reason or None, "capacity_bytes": json_scalar(p.capacity_bytes),
        "fits": p.fits, "headroom_bytes": json_scalar(p.headroom_bytes),
        "dominant_change": p.dominant_change, "crossovers": [_crossover(c) for c in p.crossovers],
        "terms": [_term(t) for t in p.terms], "notes": p.notes,
    }


def whatif_json(report: WhatIf) -> dict:
    t = report.today
    return {
        "baseline": {"mesh": {r: s for r, s in t.mesh.items() if s > 1}, "batch": json_scalar(t.batch),
                     "batch_how": t.batch_how, "chips": t.chips, "target": t.chip,
                     "step_time_us": _us(t.step_ps), "mfu": json_scalar(t.mfu),
                     "memory_per_chip_bytes": json_scalar(t.memory_per_chip_bytes)},
        "configs": [config_record(p) for p in report.projections],
        "assumptions": report.assumptions,
        "warnings": report.warnings,
    }


def _crossover_cell(p: Projection) -> str:
    cells = []
    for c in p.crossovers:
        if c.value is None or c.threshold is None:
            cells.append(f"{c.role} ?")
        else:
            cells.append(f"{c.role} {c.value:.4g}{'>' if c.compute_bound else '<='}{c.threshold:.4g}")
    return ", ".join(cells) or "-"


def change_text(step: float | None, today: float | None) -> str:
    """A step against today's (both in one unit, any) as a signed percentage; "+0.0%" for no change (never
    "-0.0%"); "?" when either is unknown. The text table and the dashboard both write it so."""
    if step is None or not today:
        return "?"
    change = round(step / today - 1, 3)
    return f"{change + 0.0:+.1%}"          # + 0.0 turns a -0.0 into 0.0


def tokens_text(value: float | None) -> str:
    """Tokens per second in digits a person compares down a column: "12,170", "5,899", "0.25"."""
    if value is None:
        return "?"
    return f"{value:,.0f}" if abs(value) >= 10 else f"{value:.3g}"


def _rows(report: WhatIf) -> list[list[str]]:
    today = report.today.step_ps
    rows = []
    for i, p in enumerate(report.projections, 1):
        fits = "?" if p.fits is None else "yes" if p.fits else "NO"
        rows.append([str(i), mesh_text(p.config.mesh), f"{p.config.batch:.6g}",
                     p.config.chip.name if p.config.chip else "?",
                     fmt_time_us(_us(p.step_ps)) if p.step_ps is not None else f"? ({p.step_reason})",
                     change_text(p.step_ps, today), tokens_text(p.tokens_per_s_per_chip),
                     fmt_share(p.mfu), p.bound or "?", fmt_bytes(p.memory_per_chip_bytes), fits,
                     _crossover_cell(p), p.dominant_change or "-"])
    return rows


# Columns left out of the table when no config has a figure for them, with the reason said once below it.
UNKNOWN_COLUMNS = {"tokens/s/chip": "tokens/s/chip: unknown for every config (the batch in tokens was not read)",
                   "fits": "fits: unknown for every config (the chip's memory capacity is unknown)"}


def _table(report: WhatIf) -> tuple[list[str], list[list[str]], str, list[str]]:
    """The table's headers, rows and alignment without the columns no config knows, and a line for each."""
    rows = _rows(report)
    drop = [i for i, h in enumerate(HEADERS) if h in UNKNOWN_COLUMNS and rows and all(r[i] == "?" for r in rows)]
    keep = [i for i in range(len(HEADERS)) if i not in drop]
    return ([HEADERS[i] for i in keep], [[r[i] for i in keep] for r in rows], "".join(ALIGN[i] for i in keep),
            [UNKNOWN_COLUMNS[HEADERS[i]] for i in drop])


def _today_line(report: WhatIf) -> str:
    t = report.today
    batch = "unknown batch" if t.batch is None else f"batch {t.batch:.6g} tokens"
    chips = f"{t.chips} chip{'s' if t.chips != 1 else ''}"
    return (f"today: {mesh_text(t.mesh)} ({chips}, {t.chip or 'no chip'}), {batch}, step "
            f"{fmt_time_us(_us(t.step_ps))}, MFU {fmt_share(t.mfu)}, memory/chip {fmt_bytes(t.memory_per_chip_bytes)}")


def notes_by_rank(configs: Iterable[tuple[dict[str, int], list[str]]]) -> list[str]:
    """Each distinct note of the ranked configs (mesh, notes) once, in the order the notes first appear,
    prefixed with the rank and mesh of the config it belongs to, or with the ranks alone when several configs
    share it (the one-host note is every config's)."""
    ranks: dict[str, list[tuple[int, str]]] = {}
    for i, (mesh, notes) in enumerate(configs, 1):
        for note in dict.fromkeys(notes):
            ranks.setdefault(note, []).append((i, mesh_text(mesh)))
    out = []
    for note, who in ranks.items():
        named = f"#{who[0][0]} {who[0][1]}" if len(who) == 1 else ", ".join(f"#{i}" for i, _ in who)
        out.append(f"{named}: {note}")
    return out


def _notes(report: WhatIf) -> list[str]:
    """The assumptions, the configs' notes (:func:`notes_by_rank`) and the warnings, one line each."""
    out = [f"assumes: {a}" for a in report.assumptions]
    out += notes_by_rank((p.config.mesh, p.notes) for p in report.projections)
    return out + [f"warning: {w}" for w in report.warnings]


def whatif_text(report: WhatIf) -> str:
    headers, rows, align, unknown = _table(report)
    out = [terminal_text(_today_line(report)), "", text_table(headers, rows, align), *unknown, ""]
    out += [terminal_text(line) for line in _notes(report)]
    return "\n".join(out) + "\n"


def whatif_markdown(report: WhatIf) -> str:
    headers, rows, align, unknown = _table(report)
    out = ["## What if", "", markdown_text(_today_line(report)), "", markdown_table(headers, rows, align), ""]
    out += [f"_{markdown_text(line)}_" for line in unknown] + ([""] if unknown else [])
    out += [f"- {markdown_text(line)}" for line in _notes(report)]
    return "\n".join(out) + "\n"
