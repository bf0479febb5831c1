"""The chip an XLA dump was compiled for, from the target config XLA writes beside the modules.

XLA:GPU dumps ``module_NNNN.<name>.gpu_target_config.pbtxt`` (a text-format
``GpuTargetConfigProto``, often ``.xz``-compressed by whoever shares the dump):
the device description (``device_description_str: "NVIDIA H100 80GB HBM3"``),
``platform_name`` ("CUDA", "ROCM"), and ``gpu_device_info`` with the SM/CU
count (``core_count``), ``clock_rate_ghz``, ``memory_bandwidth`` (B/s),
``device_memory_size`` and the compute capability. These become a GPU
:class:`~traceview.parsers.profile.Device`, matched against the hardware table
exactly as a trace's GPU plane is (:func:`traceview.hardware.detect.detect_chip`).

Only scalar fields are read (``name: value`` lines, nesting tracked by braces);
the file is bounded (:data:`CONFIG_LIMIT` bytes decompressed, :data:`MAX_DEPTH`
levels), and a file that cannot be read is a warning, never the end of a command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from traceview.errors import UserError
from traceview.hardware.chips import Chip
from traceview.hardware.detect import detect_chip
from traceview.parsers.profile import Device

CONFIG_SUFFIXES = (".gpu_target_config.pbtxt", ".gpu_target_config.pbtxt.xz", ".gpu_target_config.pbtxt.gz")
CONFIG_LIMIT = 1 << 20      # a real one is about 1 KB
MAX_DEPTH = 16
_FIELD = re.compile(r"^\s*([A-Za-z_][\w]*)\s*:\s*(.*?)\s*$")
_OPEN = re.compile(r"^\s*([A-Za-z_][\w]*)\s*:?\s*\{\s*$")
_VENDORS = {"CUDA": "NVIDIA", "ROCM": "AMD"}


@dataclass
class DumpTarget:
    """The chip a dump names: ``chip`` (None when the config matches no chip), ``source`` (the file), and
    what the user should be told."""

    chip: Chip | None
    source: str
    device: Device
    warnings: list[str] = field(default_factory=list)


def find_target_config(path: str | Path) -> Path | None:
    """The target config of a dump folder (or beside an HLO file of one); None when there is none.

    A dump of several modules has one per module: they name the same device (one process compiles for
    one kind of device), so the first by name is read.
    """
    p = Path(path)
    folder = p if p.is_dir() else p.parent
    try:
        found = sorted(f for f in folder.iterdir() if f.name.endswith(CONFIG_SUFFIXES) and f.is_file())
    except OSError:
        return None
    return found[0] if found else None


def read_target_config(path: str | Path) -> dict[str, str]:
    """The scalar fields of a text-format target config, by dotted path (``gpu_device_info.core_count``);
    strings unquoted. Raises UserError (one line naming the file) when it cannot be read."""
    from traceview.parsers.compressed import read_limited

    data = read_limited(path, limit=CONFIG_LIMIT, what="GPU target config")
    text = data.decode("utf-8", errors="replace")
    fields: dict[str, str] = {}
    stack: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if (m := _OPEN.match(line)) is not None:
            stack.append(m[1])
            if len(stack) > MAX_DEPTH:
                raise UserError(f"{path}:{number}: nested deeper than {MAX_DEPTH} levels")
            continue
        if line.strip() == "}":
            if not stack:
                raise UserError(f"{path}:{number}: '}}' closes nothing")
            stack.pop()
            continue
        if (m := _FIELD.match(line)) is not None:
            fields.setdefault(".".join([*stack, m[1]]), _unquote(m[2]))
            continue
        raise UserError(f"{path}:{number}: not a text-format target config line")
    return fields


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1].replace('\\"', '"').replace("\\'", "'").replace("\\\\", "\\")
    return value


def device_from_config(fields: dict[str, str], name: str = "dump") -> Device:
    """The GPU the config describes, as a trace's device plane would (unknown figures None)."""
    info = "gpu_device_info."
    vendor = _VENDORS.get(fields.get("platform_name", "").upper())
    cuda = info + "cuda_compute_capability."
    capability = None
    if any(k.startswith(cuda) for k in fields) or fields.get("platform_name", "").upper() == "CUDA":
        capability = f"{_int(fields.get(cuda + 'major')) or 0}.{_int(fields.get(cuda + 'minor')) or 0}"
    rocm = fields.get(info + "rocm_compute_capability.gcn_arch_name")
    if rocm and (m := re.match(r"gfx(\d+)([0-9a-f])([0-9a-f])(?![0-9a-f])", rocm)):
        capability = f"{int(m[1])}.{int(m[2], 16)}"  # gfx<major><minor><stepping>: gfx942 is 9.4
    clock = _positive(fields.get(info + "clock_rate_ghz"))
    cores = _int(fields.get(info + "core_count"))
    memory = _int(fields.get(info + "device_memory_size"))
    return Device(id=name, host="", kind="GPU", model=fields.get("device_description_str") or None, vendor=vendor,
                  hbm_bandwidth=_positive(fields.get(info + "memory_bandwidth")),
                  memory_bytes=memory if memory and memory > 0 else None,
                  clock_hz=clock * 1e9 if clock else None,
                  core_count=cores if cores and cores > 0 else None, compute_capability=capability)


def _positive(value: str | None) -> float | None:
    try:
        out = float(value) if value is not None else None
    except ValueError:
        return None
    return out if out is not None and 0 < out < float("inf") else None


def _int(value: str | None) -> int | None:
    if value is None or len(value) > 20:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def dump_target(path: str | Path | None, db: dict[str, Chip]) -> DumpTarget | None:
    """The chip the dump at `path` (a folder, or an HLO file in one) was compiled for; None when the dump
    has no target config. An unreadable config or one that matches no chip comes back with chip None and
    a warning saying why."""
    if path is None:
        return None
    config = find_target_config(path)
    if config is None:
        return None
    source = f"dump: {config}"
    try:
        fields = read_target_config(config)
    except UserError as exc:
        return DumpTarget(None, source, Device(id=str(config), host="", kind="GPU"),
                          [f"ignored the dump's target config: {exc}"])
    device = device_from_config(fields, name=str(config))
    chip, messages = detect_chip(device, db)
    if chip is not None:
        chip.notes = chip.notes + [f"chosen from the dump's target config {config}"]
    return DumpTarget(chip, source, device, messages)
