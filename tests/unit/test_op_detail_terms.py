"""Op detail's roofline arithmetic: a 0-FLOP op names no peak and no precision rule; the peak named is
the one used; the precision note only for matrix work."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")

from traceview.dashboards.op_detail import arithmetic  # noqa: E402
from traceview.hardware.database import get_chip, load_hardware  # noqa: E402


def _terms(record):
    chip = get_chip("tpu-v6e", load_hardware())
    frame = arithmetic(record, chip)
    return dict(zip(frame["term"], frame["formula"]))


def test_copy_without_flops_names_no_peak_and_no_rule():
    terms = _terms({"flops": 0, "dtype": "f32", "bytes_accessed": 2.0e9, "bound": "memory"})
    assert terms["T_compute"] == "0 FLOP: no compute"


def test_elementwise_f32_names_the_bf16_peak_without_the_mxu_note():
    terms = _terms({"flops": 1e9, "dtype": "f32", "bytes_accessed": 1e9, "bound": "memory", "contraction": False})
    assert "bf16 peak for f32" in terms["T_compute"] and "MXU" not in terms["T_compute"]
    matmul = _terms({"flops": 1e12, "dtype": "f32", "bytes_accessed": 1e9, "bound": "compute", "contraction": True})
    assert "MXU" in matmul["T_compute"]
