"""The text-format GPU target config reader (hardware/dump_target.py): fields, bounds, hostile files."""

from __future__ import annotations

import lzma
from pathlib import Path

import pytest

import traceview.hardware.dump_target as dump_target_module
from traceview.errors import UserError
from traceview.hardware.database import load_hardware
from traceview.hardware.dump_target import device_from_config, dump_target, find_target_config, read_target_config

ROCM = """gpu_device_info {
  core_count: 304
  clock_rate_ghz: 2.1
  memory_bandwidth: 5300000000000
  device_memory_size: 206141652992
  rocm_compute_capability {
    gcn_arch_name: "gfx942:sramecc+:xnack-"
  }
}
platform_name: "ROCM"
device_description_str: "AMD Instinct MI300X"
"""


def test_rocm_config_selects_the_mi300x(tmp_path: Path) -> None:
    (tmp_path / "module_0001.jit_f.gpu_target_config.pbtxt").write_text(ROCM)
    fields = read_target_config(find_target_config(tmp_path))
    assert fields["gpu_device_info.rocm_compute_capability.gcn_arch_name"] == "gfx942:sramecc+:xnack-"
    device = device_from_config(fields)
    assert (device.vendor, device.compute_capability, device.core_count, device.clock_hz) == \
        ("AMD", "9.4", 304, pytest.approx(2.1e9))
    found = dump_target(tmp_path / "module_0001.jit_f.after_optimizations.txt", load_hardware())
    assert found.chip.name == "mi300x"


def test_no_config_is_no_target(tmp_path: Path) -> None:
    assert dump_target(tmp_path, load_hardware()) is None
    assert dump_target(None, load_hardware()) is None


@pytest.mark.parametrize("text, words", [
    ("a {\n" * 40, "nested deeper"),
    ("}\n", "closes nothing"),
    ("gpu_device_info {\n  core_count 12\n}\n", "not a text-format target config line"),
])
def test_unreadable_configs_are_a_warning_not_the_end(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "m.gpu_target_config.pbtxt"
    path.write_text(text)
    with pytest.raises(UserError, match=words):
        read_target_config(path)
    found = dump_target(tmp_path, load_hardware())
    assert found.chip is None and words in found.warnings[0] and str(path) in found.warnings[0]


def test_config_bomb_stops_at_the_bound(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(dump_target_module, "CONFIG_LIMIT", 1 << 16)
    path = tmp_path / "m.gpu_target_config.pbtxt.xz"
    path.write_bytes(lzma.compress(b"x: 1\n" * (1 << 20)))
    found = dump_target(tmp_path, load_hardware())
    assert found.chip is None and "larger than" in found.warnings[0]


def test_unknown_gpu_says_so(tmp_path: Path) -> None:
    (tmp_path / "m.gpu_target_config.pbtxt").write_text('platform_name: "CUDA"\ndevice_description_str: "X1 \\x1b[2J"\n'
                                                       "gpu_device_info {\n  core_count: -3\n"
                                                       "  clock_rate_ghz: nan\n}\n")
    found = dump_target(tmp_path, load_hardware())
    assert found.chip is None and "matches no chip" in found.warnings[0]
    assert found.device.core_count is None and found.device.clock_hz is None
