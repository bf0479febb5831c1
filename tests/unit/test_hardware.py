"""The hardware database and chip detection, checked against published figures and real traces.

References are independent of traceview: the published chip figures in
../shared/hardware_reference.md (vendor datasheets, Google Cloud docs, "How to
Scale Your Model"), the device planes of the real traces as XProf's own
reader (xprof.profile_data) sees them, the XLA GPU target configs of the
NVIDIA dumps, and XProf's roofline_model tool.
"""

from __future__ import annotations

import json
import lzma
import re
from importlib import resources
from pathlib import Path

import pytest

from traceview.analysis.roofline import ridge_point
from traceview.errors import UserError
from traceview.hardware.chips import Chip, dtype_class
from traceview.hardware.database import get_chip, load_hardware
from traceview.hardware.detect import detect_chip, detect_target
from traceview.parsers.profile import Device
from traceview.render.hardware import format_hardware_table, hardware_json

REQUIRED = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x", "v100", "a100-40gb", "a100-80gb",
            "h100-sxm", "h100-pcie", "h200", "b200", "gb200", "mi300x", "mi325x", "mi355x", "cpu"]


@pytest.fixture(scope="module")
def db() -> dict[str, Chip]:
    return load_hardware()


def _raw_table() -> dict:
    return json.loads(resources.files("traceview").joinpath("data/hardware.json").read_text("utf-8"))


# ---------------------------------------------------------------- the table itself

def test_every_required_chip_is_present(db):
    assert [name for name in REQUIRED if name not in db] == []


def test_every_figure_has_a_source():
    raw = _raw_table()
    sources = raw["sources"]
    assert all(("http" in text) or text.startswith("traceview default") for text in sources.values())
    problems = []

    def walk(node, path, chip):
        if isinstance(node, dict):
            if "value" in node:
                if node.get("source") not in sources:
                    problems.append(f"{chip}: {path} has source {node.get('source')!r}")
                return
            if path.endswith("identify"):
                if node.get("source") not in sources:
                    problems.append(f"{chip}: identify hints have no source")
                return
            for key, value in node.items():
                walk(value, f"{path}.{key}", chip)
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            problems.append(f"{chip}: bare number at {path}")

    for chip in raw["chips"]:
        walk({k: v for k, v in chip.items() if k not in ("name", "aliases", "vendor", "kind")}, "", chip["name"])
    assert problems == []


def test_loaded_chips_carry_a_source_for_each_figure(db):
    for chip in db.values():
        figures = [f"peak_flops.{k}" for k in chip.peak_flops]
        figures += [k for k in ("hbm_bandwidth", "hbm_capacity", "pcie_bandwidth", "dcn_bandwidth")
                    if getattr(chip, k) is not None]
        assert [f for f in figures if not chip.sources.get(f)] == [], chip.name


def _reference_rows(path: Path) -> dict[str, list[str]]:
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) > 4 and not set(cells[0]) <= set("-: "):
            rows[cells[0]] = cells[1:]
    return rows


def _numbers(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?e\d+", cell)]


def _rounding(cell: str) -> float:
    """Relative half-unit of the last digit the reference prints ("1.6e12" -> 0.05 / 1.6)."""
    found = re.search(r"(\d+)(?:\.(\d+))?e\d+", cell)
    if not found:
        return 0.0
    mantissa = float(found.group(0).split("e")[0])
    return 0.5 * 10 ** -len(found.group(2) or "") / mantissa


REFERENCE_NAMES = {
    "TPU v4p": "tpu-v4", "TPU v5p": "tpu-v5p", "TPU v5e": "tpu-v5e", "TPU v6e": "tpu-v6e",
    "A100 SXM 40 GB": "a100-40gb", "A100 SXM 80 GB": "a100-80gb", "H100 SXM": "h100-sxm",
    "H100 PCIe": "h100-pcie", "H200 SXM": "h200", "B200": "b200", "V100 SXM2 16 GB": "v100",
    "AMD MI300X": "mi300x", "AMD MI325X": "mi325x", "AMD MI355X": "mi355x",
}


def _close(ours: float | None, published: list[float], rel: float) -> bool:
    if ours is None or not published:
        return ours is None and not published
    if len(published) == 2 and published[0] < published[1]:   # "7.7e12 to 8e12"
        return published[0] * (1 - rel) <= ours <= published[1] * (1 + rel)
    return abs(ours / published[0] - 1) <= rel


def test_figures_agree_with_published_reference(db, shared_traces):
    path = shared_traces.parent / "hardware_reference.md"
    if not path.is_file():
        pytest.skip(f"{path} not available")
    rows = _reference_rows(path)
    checked = []
    for ref_name, name in REFERENCE_NAMES.items():
        cells, chip = rows[ref_name], db[name]
        if chip.kind == "TPU":
            bf16, int8, _cap, hbm, ici = cells[:5]
            assert _close(chip.peak_flops.get("bf16"), _numbers(bf16), 0.01), name
            assert _close(chip.peak_flops.get("int8"), _numbers(int8), 0.01), name
            assert _close(chip.hbm_bandwidth, _numbers(hbm), max(0.01, _rounding(hbm))), name
            assert chip.interconnect.link_bandwidth == _numbers(ici)[0], name
        else:
            bf16, fp8, _cap, hbm, link = cells[:5]
            peak = chip.peak_flops.get("fp16" if "fp16" in bf16 else "bf16")
            assert _close(peak, _numbers(bf16), 0.01), name
            if _numbers(fp8):
                assert _close(chip.peak_flops.get("fp8"), _numbers(fp8), 0.01), name
            assert _close(chip.hbm_bandwidth, _numbers(hbm), 0.01), name
            if "links x" in link:      # Infinity Fabric: "7 links x 6.4e10"
                assert chip.interconnect.link_bandwidth == _numbers(link)[0]
                assert chip.interconnect.links == int(re.search(r"(\d+) links", link).group(1))
            elif _numbers(link):       # NVLink one way per GPU
                assert chip.interconnect.egress_bandwidth == _numbers(link)[0], name
        checked.append(name)
    assert len(checked) == len(REFERENCE_NAMES)


def test_worked_book_figures(db):
    # Figures quoted in the brief from the book and the datasheets.
    assert db["tpu-v5e"].peak_flops["bf16"] == 1.97e14 and db["tpu-v5e"].hbm_bandwidth == 8.1e11
    assert db["h100-sxm"].peak_flops["bf16"] == 9.89e14 and db["h100-sxm"].hbm_bandwidth == 3.35e12


# ---------------------------------------------------------------- peaks by dtype

def test_dtype_classes():
    assert [dtype_class(d) for d in ("bf16", "f32", "f16", "f8e4m3fn", "f8e5m2", "s8", "u8", "s32", "pred",
                                     "f64", "c64", "token", "", None)] == \
        ["bf16", "fp32", "fp16", "fp8", "fp8", "int8", "int8", "int32", "int32", "fp64", "fp32", None, None, None]


def test_peak_rules(db):
    v5e, h100, v100, a100 = db["tpu-v5e"], db["h100-sxm"], db["v100"], db["a100-40gb"]
    assert v5e.peak_flops_for("f8e4m3fn") is None                 # no fp8 on v5e: no guess
    rate, note = v5e.peak_flops_rule("f32")
    assert rate == v5e.peak_flops["bf16"] and "bf16" in note      # MXU bf16 passes, said so
    assert h100.peak_flops_rule("f32") == (6.7e13, None)          # CUDA-core fp32, no fallback
    assert h100.peak_flops_for("f8e5m2") == 1.979e15
    rate, note = v100.peak_flops_rule("bf16")
    assert rate == v100.peak_flops["fp32"] and "Volta" in note
    assert a100.peak_flops_for("f8e4m3fn") is None
    assert v5e.peak_flops_for("token") is None


# ---------------------------------------------------------------- lookup and user files

def test_get_chip_by_name_and_alias(db):
    assert get_chip("H100", db).name == "h100-sxm"
    assert get_chip("TPU_v6e", db).name == "tpu-v6e"
    assert get_chip("Trillium", db).name == "tpu-v6e"
    assert get_chip("ironwood", db).name == "tpu-v7x"


def test_unknown_target_lists_known_names(db):
    with pytest.raises(UserError) as info:
        get_chip("tpu-v9000", db)
    message = str(info.value)
    assert "tpu-v9000" in message and "tpu-v6e" in message and "h100-sxm" in message
    assert "\n" not in message


def test_user_file_overrides_and_adds(tmp_path):
    path = tmp_path / "hw.json"
    path.write_text(json.dumps({"chips": [
        {"name": "H100", "hbm_bandwidth": 3.0e12, "peak_flops": {"f8e4m3fn": 1.5e15}},
        {"name": "my-npu", "kind": "gpu", "peak_flops": {"bf16": {"value": 1e15, "source": "lab sheet"}},
         "hbm_bandwidth": 2e12},
        {"name": "cpu", "peak_flops": {"fp32": 2e12}, "hbm_bandwidth": 2e11},
    ]}))
    db = load_hardware(path)
    h100 = db["h100-sxm"]
    assert h100.hbm_bandwidth == 3.0e12 and h100.peak_flops["fp8"] == 1.5e15
    assert h100.peak_flops["bf16"] == 9.89e14                       # untouched figures stay
    assert str(path) in h100.sources["hbm_bandwidth"]
    assert db["my-npu"].peak_flops["bf16"] == 1e15 and db["my-npu"].sources["peak_flops.bf16"] == "lab sheet"
    assert db["cpu"].peak_flops["fp32"] == 2e12 and db["cpu"].hbm_bandwidth == 2e11
    assert load_hardware()["h100-sxm"].hbm_bandwidth == 3.35e12     # the built-in table is not mutated


def test_user_file_toml(tmp_path):
    path = tmp_path / "hw.toml"
    path.write_text('[[chips]]\nname = "cpu"\nhbm_bandwidth = 1.0e11\n[chips.peak_flops]\nfp32 = 3.0e12\n')
    db = load_hardware(path)
    assert db["cpu"].peak_flops["fp32"] == 3.0e12 and db["cpu"].hbm_bandwidth == 1.0e11


@pytest.mark.parametrize("content, words", [
    ("{not json", ["not valid JSON"]),
    ('{"chips": [{"name": "x", "kind": "GPU", "hbm_bandwidth": -1}]}', ["hbm_bandwidth", "positive"]),
    ('{"chips": [{"name": "x", "kind": "GPU", "peak_flops": {"f17": 1e12}}]}', ["f17"]),
    ('{"chips": [{"name": "x", "kind": "FPGA"}]}', ["kind"]),
    ('[1, 2]', ["name"]),
    ('{"name": "x", "kind": "GPU", "peak_flops": [1e12]}', ["peak_flops", "object"]),
    ('{"name": "x", "kind": "GPU", "interconnect": {"topology": "ring"}}', ["topology", "ring"]),
])
def test_bad_user_file_is_a_user_error(tmp_path, content, words):
    path = tmp_path / "hw.json"
    path.write_text(content)
    with pytest.raises(UserError) as info:
        load_hardware(path)
    assert str(path) in str(info.value) and all(w in str(info.value) for w in words)


def test_missing_user_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no such hardware file"):
        load_hardware(tmp_path / "absent.json")


def test_listing(db):
    text = format_hardware_table(db)
    assert all(name in text for name in REQUIRED)
    data = json.loads(json.dumps(hardware_json(db)))
    v6e = next(c for c in data["chips"] if c["name"] == "tpu-v6e")
    assert v6e["peak_flops"]["bf16"] == 9.18e14 and "cloud.google.com" in v6e["sources"]["peak_flops.bf16"]


# ---------------------------------------------------------------- detection from real traces

def _first_device_plane(path: Path):
    """The first /device: plane's stats, read by XProf's own reader (not traceview's parser)."""
    profile_data = pytest.importorskip("xprof.profile_data")
    data = profile_data.ProfileData.from_file(str(path))
    for plane in data.planes:
        if plane.name.startswith("/device:") and "CUSTOM" not in plane.name:
            return plane.name, {k: v for k, v in plane.stats}
    pytest.fail(f"{path}: no device plane")


def _device_from_stats(path: Path) -> Device:
    name, stats = _first_device_plane(path)
    kind = "TPU" if "TPU" in name else "GPU"
    return Device.from_plane_stats(f"{path.stem}{name}", path.stem, kind, stats)


def test_detect_tpu_v6e_uses_the_traces_own_peaks(db, shared_traces):
    path = shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb"
    device = _device_from_stats(path)
    chip, _warnings = detect_chip(device, db)
    assert chip.name == "tpu-v6e"
    assert chip.peak_flops["bf16"] == pytest.approx(float(device.stats["peak_teraflops_per_second"]) * 1e12)
    assert chip.hbm_bandwidth == pytest.approx(float(device.stats["peak_hbm_bw_gigabytes_per_second"]) * 1e9)
    assert chip.sources["peak_flops.bf16"].startswith("trace:")
    assert db["tpu-v6e"].hbm_bandwidth == 1.638e12                    # the table itself is untouched


def test_detected_v6e_ridge_point_matches_xprof(db, shared_traces, tmp_path):
    """XProf's roofline_model tool computes the HBM ridge point of the same device."""
    raw_to_tool_data = pytest.importorskip("xprof.convert.raw_to_tool_data")
    src = shared_traces / "openxla-xprof" / "tpu_inference_2.xplane.pb"
    copy = tmp_path / src.name
    copy.write_bytes(src.read_bytes())        # XProf writes caches beside the file
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "roofline_model", {})
    props = json.loads(data)[0]["p"]
    chip, _ = detect_chip(_device_from_stats(src), db)
    # XProf prints 6 digits (560.442): the trace-based 560.4418 matches, the table-based 560.4396 would not
    assert ridge_point(chip, "bf16") == pytest.approx(float(props["hbm_ridge_point"]), abs=6e-4)
    assert chip.peak_flops["bf16"] == pytest.approx(float(props["peak_flop_rate"]) * 1e9, rel=1e-6)
    assert chip.hbm_bandwidth == pytest.approx(float(props["peak_hbm_bw"]) * 2**30, rel=1e-4)  # GiB/s


@pytest.mark.parametrize("relative, expected", [
    ("AMD-AGI-TraceLens/jax08_gemm/tw003.xplane.pb", "mi300x"),
    ("AMD-AGI-TraceLens/jax_conv_minimal_legacy/chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb", "mi300x"),
    ("AMD-AGI-TraceLens/te_fused_attn/934987a2fc2f.xplane.pb", "mi355x"),
    ("tensorflow-profiler/GPU-multi-worker/34.83.195.179_6003.xplane.pb", "v100"),
])
def test_detect_gpus_from_trace_stats(db, shared_traces, relative, expected):
    device = _device_from_stats(shared_traces / relative)
    chip, warnings = detect_chip(device, db)
    assert chip is not None and chip.name == expected, warnings
    if expected.startswith("mi"):
        # ROCm states half the datasheet HBM bandwidth: the datasheet wins, and we say so.
        assert chip.hbm_bandwidth == db[expected].hbm_bandwidth
        assert any("memory bandwidth" in w for w in warnings)


def test_detect_gpu_from_parsed_fields(db):
    # The same facts as a parser fills them (no raw stats): MI300X cc 9.4, 304 CUs, 192 GiB.
    device = Device(id="h/GPU:0", host="h", kind="GPU", vendor="AMD", compute_capability="9.4",
                    core_count=304, memory_bytes=206141652992)
    assert detect_chip(device, db)[0].name == "mi300x"
    device = Device(id="h/GPU:0", host="h", kind="GPU", vendor="AMD", compute_capability="9.4",
                    core_count=304, memory_bytes=274877906944)   # 256 GiB: MI325X
    assert detect_chip(device, db)[0].name == "mi325x"


def _gpu_target_config(path: Path) -> dict:
    text = lzma.decompress(path.read_bytes()).decode()
    cc = re.search(r"cuda_compute_capability\s*\{\s*major:\s*(\d+)(?:\s*minor:\s*(\d+))?", text)
    return {"model": re.search(r'device_description_str:\s*"([^"]+)"', text).group(1),
            "cc": f"{cc.group(1)}.{cc.group(2) or 0}",
            "cores": int(re.search(r"core_count:\s*(\d+)", text).group(1)),
            "memory": int(re.search(r"device_memory_size:\s*(\d+)", text).group(1))}


@pytest.mark.parametrize("relative, expected", [
    ("maxtext_fsdp4_h100/dump/module_0016.jit_train_step.gpu_target_config.pbtxt.xz", "h100-sxm"),
    ("pax_fsdp4_a100_proc0/dump/module_0040.pjit__wrapped_step_fn.gpu_target_config.pbtxt.xz", "a100-40gb"),
])
@pytest.mark.parametrize("with_model", [True, False])
def test_detect_nvidia_from_xla_target_config(db, shared_traces, relative, expected, with_model):
    facts = _gpu_target_config(shared_traces / "NVIDIA-JAX-Toolbox" / relative)
    device = Device(id="h/GPU:0", host="h", kind="GPU", model=facts["model"] if with_model else None,
                    compute_capability=facts["cc"], core_count=facts["cores"], memory_bytes=facts["memory"])
    chip, warnings = detect_chip(device, db)
    assert chip is not None and chip.name == expected, warnings


def test_detect_cpu_and_unknown(db):
    chip, warnings = detect_chip(Device(id="h/CPU", host="h", kind="CPU"), db)
    assert chip.name == "cpu" and chip.assumption and "assumed" in warnings[0]
    chip, warnings = detect_chip(Device(id="h/GPU:0", host="h", kind="GPU", compute_capability="12.7",
                                        core_count=3), db)
    assert chip is None and "12.7" in warnings[0]
    chip, warnings = detect_chip(Device(id="h/TPU:0", host="h", kind="TPU", model="TPU v99",
                                        peak_flops=1e15, hbm_bandwidth=1e12), db)
    assert chip.peak_flops["bf16"] == 1e15 and "not in the hardware table" in warnings[0]


def test_tpu_trace_peaks_for_one_tensorcore_scale_other_dtypes(db):
    # A v5p plane describing one of the chip's two TensorCores: half the chip's rates.
    device = Device(id="h/TPU:0", host="h", kind="TPU", model="TPU v5", peak_flops=2.295e14,
                    hbm_bandwidth=1.3825e12)
    chip, warnings = detect_chip(device, db)
    assert chip.name == "tpu-v5p" and chip.peak_flops["bf16"] == 2.295e14
    assert chip.peak_flops["int8"] == pytest.approx(db["tpu-v5p"].peak_flops["int8"] / 2)
    assert any("scaled" in w for w in warnings)


def test_detect_target_for_a_whole_trace(db, shared_traces):
    """MI355X trace: GPU:0 states its identity, GPU:1-7 carry no stats; one target, merged warnings."""
    profile_data = pytest.importorskip("xprof.profile_data")
    path = shared_traces / "AMD-AGI-TraceLens" / "te_fused_attn" / "934987a2fc2f.xplane.pb"
    planes = [p for p in profile_data.ProfileData.from_file(str(path)).planes if p.name.startswith("/device:GPU")]
    devices = [Device.from_plane_stats(p.name, "h", "GPU", dict(p.stats)) for p in planes]
    assert len(devices) == 8
    chip, warnings = detect_target(devices, db)
    assert chip.name == "mi355x"
    assert any("7 device planes state no model" in w for w in warnings)
    assert sum("memory bandwidth" in w for w in warnings) == 1


def test_detect_target_on_a_pod_detects_each_set_of_facts_once(db):
    """Devices stating the same facts share one detection; the chip kept is the first device's (its
    sources name it), the counts and merged messages are those of detecting each device."""
    pod = [Device(id=f"host{h}/TPU:{d}", host=f"host{h}", kind="TPU", model="TPU v6 Lite", peak_flops=9.0e14)
           for h in range(3) for d in range(2)]
    odd = Device(id="host9/TPU:0", host="host9", kind="TPU", model="TPU v5p")
    chip, warnings = detect_target([*pod, odd], db)
    assert chip.name == "tpu-v6e" and "host0/TPU:0" in chip.sources["peak_flops.bf16"]
    assert any("6 devices" in w and "tpu-v5p (1 devices)" in w for w in warnings)
    # the peak stated differs from the table: one message, merged over the six devices
    stated = [w for w in warnings if "bf16 peak" in w]
    assert len(stated) == 1 and stated[0].startswith("host0/TPU:0 and 5 more devices")


def test_detect_target_mixed_and_empty(db):
    h100 = Device(id="a/GPU:0", host="a", kind="GPU", compute_capability="9.0", core_count=132,
                  memory_bytes=85e9)
    a100 = Device(id="b/GPU:0", host="b", kind="GPU", compute_capability="8.0", core_count=108,
                  memory_bytes=42e9)
    cpu = Device(id="a/CPU", host="a", kind="CPU")
    chip, warnings = detect_target([h100, a100, h100, cpu], db)
    assert chip.name == "h100-sxm" and any("mixes chips" in w for w in warnings)
    assert detect_target([cpu], db)[0].name == "cpu"
    chip, warnings = detect_target([], db)
    assert chip is None and "--target" in warnings[0]
