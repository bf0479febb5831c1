"""``traceview.chips()``: the hardware database as a DataFrame."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from traceview.config.values import optional_path
from traceview.hardware.chips import DTYPE_CLASSES, Chip, ridge_point_of
from traceview.hardware.database import load_hardware

__all__ = ["chips"]


def chips(hardware_file: str | Path | None = None) -> pd.DataFrame:
    """One row per chip of the database (the built-in table, plus ``hardware_file`` when given).

    Columns: name, kind (TPU/GPU/CPU), vendor, aliases (tuple of other names
    ``target=`` accepts), assumption (True: assumed figures, e.g. the generic
    cpu), ``peak_flops_<class>`` for every dtype class (FLOP/s per chip,
    dense; NaN when the chip has no figure), hbm_bandwidth (bytes/s),
    hbm_capacity (bytes), ridge_bf16 (FLOPs/byte where bf16 matmuls become
    compute-bound), interconnect (link type), interconnect_bandwidth (the
    scale-up figure the collective formulas use, bytes/s one way),
    pcie_bandwidth and dcn_bandwidth (bytes/s). Unknown figures are NaN.
    """
    db = load_hardware(optional_path(hardware_file, "hardware_file"))
    return pd.DataFrame([_row(chip) for chip in db.values()])


def _row(chip: Chip) -> dict:
    row: dict = {"name": chip.name, "kind": chip.kind, "vendor": chip.vendor, "aliases": tuple(chip.aliases),
                 "assumption": chip.assumption}
    row.update({f"peak_flops_{klass}": chip.peak_flops.get(klass) for klass in DTYPE_CLASSES})
    row.update({"hbm_bandwidth": chip.hbm_bandwidth, "hbm_capacity": chip.hbm_capacity,
                "ridge_bf16": ridge_point_of(chip, "bf16"),
                "interconnect": chip.interconnect.type if chip.interconnect else None,
                "interconnect_bandwidth": chip.interconnect_bandwidth,
                "pcie_bandwidth": chip.pcie_bandwidth, "dcn_bandwidth": chip.dcn_bandwidth})
    return {k: (float("nan") if v is None and k not in ("vendor", "interconnect") else v) for k, v in row.items()}
