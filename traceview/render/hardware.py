"""The chip database as a terminal table and as JSON (``traceview hardware``)."""

from __future__ import annotations

from typing import Any

from traceview.hardware.chips import Chip, ridge_point_of


def _cell(value: float | None, scale: float) -> str:
    return "-" if value is None else f"{value / scale:.4g}"


def format_hardware_table(db: dict[str, Chip]) -> str:
    """A plain-text table of every chip (``traceview hardware``)."""
    header = ["chip", "kind", "bf16 TFLOP/s", "fp8 TFLOP/s", "fp32 TFLOP/s", "HBM GB/s", "HBM GiB",
              "ridge bf16", "link GB/s", "egress GB/s", "aliases"]
    rows = []
    for chip in db.values():
        ic = chip.interconnect
        ridge = ridge_point_of(chip, "bf16")
        rows.append([
            chip.name + (" *" if chip.assumption else ""), chip.kind,
            _cell(chip.peak_flops.get("bf16"), 1e12), _cell(chip.peak_flops.get("fp8"), 1e12),
            _cell(chip.peak_flops.get("fp32"), 1e12), _cell(chip.hbm_bandwidth, 1e9),
            _cell(chip.hbm_capacity, 2**30), "-" if ridge is None else f"{ridge:.0f}",
            _cell(ic.link_bandwidth if ic else None, 1e9), _cell(ic.egress_bandwidth if ic else None, 1e9),
            ", ".join(chip.aliases),
        ])
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("Rates dense, per chip; bandwidths one way. * = assumed figures (override with --hardware-file). "
                 "`traceview hardware --format json` gives every figure's source.")
    return "\n".join(lines)


def hardware_json(db: dict[str, Chip]) -> dict[str, Any]:
    """Every chip with its figures and sources (``traceview hardware --format json``)."""
    return {"chips": [chip.to_dict() for chip in db.values()]}
