"""The chip an XLA dump names (hardware/dump_target.py) on the real NVIDIA JAX-Toolbox dumps.

The references are the dumps' own target configs, read here with a plain
regular expression: the MaxText run was compiled for an "NVIDIA H100 80GB HBM3"
(132 SMs), the Pax run for an "NVIDIA A100-SXM4-40GB" (108 SMs).
"""

from __future__ import annotations

import json
import lzma
import re
import subprocess
import sys
from pathlib import Path

import pytest

from traceview.hardware.database import load_hardware
from traceview.hardware.dump_target import device_from_config, dump_target, read_target_config

DUMPS = {"maxtext_fsdp4_h100": ("h100-sxm", "NVIDIA H100 80GB HBM3", 132),
         "pax_fsdp4_a100_proc0": ("a100-40gb", "NVIDIA A100-SXM4-40GB", 108)}


def _dump(shared_traces: Path, name: str) -> Path:
    return shared_traces / "NVIDIA-JAX-Toolbox" / name / "dump"


def _cli(*argv: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "traceview", *argv, "--format", "json"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("name", sorted(DUMPS))
def test_the_dump_names_its_chip(shared_traces: Path, name: str) -> None:
    chip_name, description, sms = DUMPS[name]
    dump = _dump(shared_traces, name)
    (config,) = dump.glob("*.gpu_target_config.pbtxt.xz")
    text = lzma.decompress(config.read_bytes()).decode()
    assert re.search(r'device_description_str: "(.*)"', text)[1] == description
    assert int(re.search(r"core_count: (\d+)", text)[1]) == sms
    fields = read_target_config(config)
    device = device_from_config(fields)
    assert (device.model, device.core_count, device.vendor) == (description, sms, "NVIDIA")
    assert device.hbm_bandwidth == float(re.search(r"memory_bandwidth: (\d+)", text)[1])
    found = dump_target(dump, load_hardware())
    assert found is not None and found.chip is not None and found.chip.name == chip_name
    assert found.source == f"dump: {config}" and not found.warnings


def test_maxtext_h100_dump_is_judged_on_an_h100_without_target(shared_traces: Path) -> None:
    dump = _dump(shared_traces, "maxtext_fsdp4_h100")
    parallelism = _cli("parallelism", str(dump))
    assert parallelism["target"] == {"name": "h100-sxm", "source": f"dump: {next(dump.glob('*.gpu_target_config*'))}",
                                     "projected": False, "measured_on": None}
    assert any("chosen from the XLA dump's target config" in w for w in parallelism["warnings"])
    # The verdict's threshold is the H100's C/W: its bf16 peak over its NVLink egress.
    memory = _cli("memory", str(dump))
    assert memory["target"]["name"] == "h100-sxm" and memory["target"]["source"].startswith("dump: ")
    assert memory["target"]["hbm_capacity_bytes"] == load_hardware()["h100-sxm"].hbm_capacity
    hlo = _cli("hlo", str(dump))
    assert hlo["target"] == {"name": "h100-sxm", "source": memory["target"]["source"]}
    # --target wins over the dump.
    assert _cli("parallelism", str(dump), "--target", "a100-80gb")["target"] == {
        "name": "a100-80gb", "source": "--target", "projected": False, "measured_on": None}   # a dump: nothing measured
    assert _cli("memory", str(dump), "--target", "a100-80gb")["target"]["source"] == "--target"


def test_pax_a100_dump_is_judged_on_an_a100(shared_traces: Path) -> None:
    dump = _dump(shared_traces, "pax_fsdp4_a100_proc0")
    assert _cli("parallelism", str(dump))["target"]["name"] == "a100-40gb"
    assert _cli("memory", str(dump))["target"]["name"] == "a100-40gb"


def test_analyze_takes_the_dumps_chip_when_the_trace_names_none(shared_traces: Path, tmp_path: Path) -> None:
    """A trace-event JSON trace states no chip; the run's dump (hlo/ beside plugins/) does."""
    run = tmp_path / "logs" / "plugins" / "profile" / "r"
    run.mkdir(parents=True)
    events = {"traceEvents": [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "pid": 1, "tid": 7, "name": "thread_name", "args": {"name": "Stream #7(Compute)"}},
        {"ph": "X", "pid": 1, "tid": 7, "ts": 10, "dur": 5, "name": "gemm_kernel",
         "args": {"hlo_op": "fusion.1", "hlo_module": "jit_f", "program_id": "3"}}]}
    (run / "worker0.trace.json").write_text(json.dumps(events))
    dump = _dump(shared_traces, "maxtext_fsdp4_h100")
    (tmp_path / "logs" / "hlo").symlink_to(dump, target_is_directory=True)  # the dump beside the log dir
    record = _cli("analyze", str(tmp_path / "logs"), "--no-cache")
    assert record["target"]["name"] == "h100-sxm"
    config = next(dump.glob("*.gpu_target_config.pbtxt.xz")).name
    assert record["target"]["source"] == f"dump: {tmp_path / 'logs' / 'hlo' / config}"
    assert record["target"]["detected"] is True
    given = _cli("analyze", str(tmp_path / "logs"), "--no-cache", "--target", "a100-40gb")
    assert given["target"]["source"] == "--target"
