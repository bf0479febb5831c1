"""--hardware-file: misspelt keys refused with one line; figures the user gives are not "assumed"."""

from __future__ import annotations

import json

import pytest

from traceview.errors import UserError
from traceview.hardware.database import get_chip, load_hardware
from traceview.hardware.detect import assumed_figures, detect_target
from traceview.parsers.profile import Device


def _write(tmp_path, obj, name="hw.json"):
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return path


@pytest.mark.parametrize("entry, bad", [
    ({"name": "cpu", "hbm_bandwith": 9e10}, "hbm_bandwith"),
    ({"name": "cpu", "peak_flops": {"fp32": {"valeu": 1e12}}}, "valeu"),
    ({"name": "x", "kind": "GPU", "interconnect": {"topology": "switch", "device_bw": 1e11}}, "device_bw"),
    ({"name": "x", "kind": "GPU", "identify": {"model_pattern": ["X"]}}, "model_pattern"),
])
def test_unknown_keys_are_refused_with_one_line(tmp_path, entry, bad):
    with pytest.raises(UserError) as err:
        load_hardware(_write(tmp_path, entry))
    message = str(err.value)
    assert bad in message and "\n" not in message and str(tmp_path / "hw.json") in message


def test_documented_example_loads(tmp_path):
    doc = (__import__("pathlib").Path(__file__).resolve().parents[2] / "docs" / "hardware.md").read_text()
    example = doc.split("```json", 1)[1].split("```", 1)[0]
    db = load_hardware(_write(tmp_path, json.loads(example)))
    chip = get_chip("my-acc", db)
    assert chip.peak_flops["bf16"] == 4.0e14 and chip.hbm_bandwidth == 2.0e12
    assert get_chip("cpu", db).peak_flops["fp32"] == 1.2e12


def test_cpu_figures_given_by_the_user_are_not_called_assumed(tmp_path):
    cpu = Device.from_plane_stats("h/CPU:0", "h", "CPU", {})
    builtin = load_hardware()
    assert assumed_figures(get_chip("cpu", builtin), ("peak_flops.fp32", "hbm_bandwidth")) == \
        ["peak_flops.fp32", "hbm_bandwidth"]
    _, warnings = detect_target([cpu], builtin)
    assert any("assumed figures" in w for w in warnings)
    mine = load_hardware(_write(tmp_path, {"name": "cpu", "peak_flops": {"fp32": 1.2e12}, "hbm_bandwidth": 9e10}))
    assert assumed_figures(get_chip("cpu", mine), ("peak_flops.fp32", "hbm_bandwidth")) == []
    chip, warnings = detect_target([cpu], mine)
    assert chip is not None and chip.hbm_bandwidth == 9e10
    assert not any("assumed" in w for w in warnings)
    # only the bandwidth given: the fp32 peak is still an assumption, and said so
    half = load_hardware(_write(tmp_path, {"name": "cpu", "hbm_bandwidth": 9e10}, "half.json"))
    assert assumed_figures(get_chip("cpu", half), ("peak_flops.fp32", "hbm_bandwidth")) == ["peak_flops.fp32"]
