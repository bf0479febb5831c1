"""Devices are named from what their planes state: the model, else the vendor's architecture name."""

from __future__ import annotations

from traceview.hardware.detect import device_model_name
from traceview.parsers.profile import Device


def test_amd_plane_without_a_name_gets_its_gfx_family_and_cus():
    # the MI300X planes of the AMD TraceLens traces: vendor AMD, cc 9.4, 304 CUs, no device name
    dev = Device.from_plane_stats("h/GPU:0", "h", "GPU", {"device_vendor": "AMD", "compute_cap_major": 9,
                                                          "compute_cap_minor": 4, "core_count": 304,
                                                          "memory_size": 206141652992})
    assert device_model_name(dev) == "AMD gfx94x, 304 CUs, 191.98 GiB"   # memory sizes binary (206e9 B)


def test_stated_names_win_and_nvidia_gets_sm():
    named = Device.from_plane_stats("h/GPU:0", "h", "GPU", {"device_name": "NVIDIA H100 80GB HBM3",
                                                            "compute_cap_major": 9, "compute_cap_minor": 0})
    assert device_model_name(named) == "NVIDIA H100 80GB HBM3"
    v100 = Device.from_plane_stats("h/GPU:1", "h", "GPU", {"compute_cap_major": 7, "compute_cap_minor": 0,
                                                           "core_count": 80})
    assert device_model_name(v100) == "sm_70, 80 SMs"
    assert device_model_name(Device.from_plane_stats("h/GPU:2", "h", "GPU", {})) == "-"
    tpu = Device.from_plane_stats("h/TPU:0", "h", "TPU", {"device_type_string": "TPU v6 Lite"})
    assert device_model_name(tpu) == "TPU v6 Lite"


def test_amd_trace_table_names_the_gfx_family(shared_traces):
    import contextlib
    import io

    from traceview.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["analyze", str(shared_traces / "AMD-AGI-TraceLens" / "jax08_gemm")]) == 0
    assert "AMD gfx94x, 304 CUs" in out.getvalue()
