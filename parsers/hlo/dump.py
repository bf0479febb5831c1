"""HLO dump folders and files -> modules.

``XLA_FLAGS=--xla_dump_to=DIR`` writes, per module, files named
``module_<id>.<name>.[<platform>_]{before,after}_optimizations.{txt,hlo.pb}``
plus many other artefacts (buffer assignments, LLVM IR, PTX, autotune results,
...). :func:`load_hlo_modules` picks one file per module and stage; the
profiler's ``<name>(<program_id>).hlo_proto.pb`` files are read too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from traceview.errors import HloError, UserError
from traceview.parsers.compressed import read_head
from traceview.parsers.hlo.files import read_bytes
from traceview.parsers.hlo.model import HloModule
from traceview.parsers.hlo.proto import parse_hlo_proto, proto_module_name
from traceview.parsers.hlo.stablehlo import LOWERED_STAGE, looks_like_mlir, mlir_to_hlo_text
from traceview.parsers.hlo.text import header_module_name, looks_like_hlo_text, parse_hlo_text

__all__ = ["check_stage", "load_hlo_modules", "read_hlo_file", "match_module", "classify_file", "DumpFile", "read_bytes"]

_COMPRESSED = (".xz", ".gz")
_SNIFF_BYTES = 4096  # enough for a licence or comment block before the module starts

# module_0016.jit_train_step.sm_9.0_gpu_after_optimizations.hlo.pb(.xz)
_DUMP_RE = re.compile(
    r"^module_(?P<id>\d+)\.(?P<name>.+?)\.(?:(?P<platform>[^.]*(?:\.[^.]*)*?)_)?"
    r"(?P<stage>before|after)_optimizations\.(?P<kind>txt|hlo\.pb|pb)$")
# jit__normal(11).hlo_proto.pb, written by the profiler beside the xplane
_PROFILER_RE = re.compile(r"^(?P<name>.+?)(?:\((?P<id>\d+)\))?\.hlo_proto\.pb$")
# Files an XLA dump or a profile folder holds that are not HLO modules.
_OTHER_RE = re.compile(
    r"(-buffer-assignment(-values)?\.txt|-memory-usage-report\.(txt|pb)|-live-range\.txt"
    r"|\.ll|\.o|\.ptx|\.cubin|\.hsaco|\.sass|\.s|\.mlir|\.html|\.dot|\.svg|\.url|\.json|\.csv"
    r"|\.debug_options|\.pbtxt|\.textproto|\.xplane\.pb|\.trace\.json\.gz|\.memory_profile\.json\.gz"
    r"|\.thunk_sequence\.txt|compile_options\.pb|topology\.pb|\.parquet|\.log)$")
_PASS_RE = re.compile(r"^module_\d+\..+\.\d{4}\..+\.(txt|hlo\.pb)$")  # --xla_dump_hlo_pass_re dumps


@dataclass(frozen=True)
class DumpFile:
    """What a file name says about an HLO module file."""

    path: Path
    kind: str              # "text" or "proto"
    name: str | None       # module name from the file name
    module_id: int | None  # module_0016 -> 16; name(11).hlo_proto.pb -> 11
    stage: str | None      # "before" / "after" / None (profiler protos: optimized)
    from_profiler: bool = False


def _strip_compression(name: str) -> str:
    for ext in _COMPRESSED:
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def classify_file(path: Path) -> DumpFile | None:
    """A :class:`DumpFile` for an HLO module file, None for anything else."""
    base = _strip_compression(path.name)
    m = _DUMP_RE.match(base)
    if m:
        return DumpFile(path, "text" if m.group("kind") == "txt" else "proto", m.group("name"),
                        int(m.group("id")), m.group("stage"))
    m = _PROFILER_RE.match(base)
    if m:
        return DumpFile(path, "proto", m.group("name"), int(m.group("id")) if m.group("id") else None,
                        "after", from_profiler=True)
    if base.endswith(".hlo.pb"):
        return DumpFile(path, "proto", None, None, None)
    if base.endswith((".hlo.txt", ".hlo")):
        return DumpFile(path, "text", None, None, None)
    return None


def read_hlo_file(path: str | Path, data: bytes | None = None) -> HloModule:
    """Read one HLO file, text or proto (optionally compressed), by its name or content; ``data``: its
    content, already read and decompressed."""
    p = Path(path)
    info = classify_file(p)
    if data is None:
        data = read_bytes(p)
    head = data[:_SNIFF_BYTES].decode("utf-8", errors="replace")
    if (info is None or info.kind == "text") and looks_like_mlir(head):
        module = _read_mlir(data, p)
    elif info is not None and info.kind == "proto":
        module = parse_hlo_proto(data, str(p))
    elif (info is not None and info.kind == "text") or looks_like_hlo_text(
            data[:_SNIFF_BYTES].decode("utf-8", errors="replace")):
        # XLA's parser takes comments and a module without its HloModule line; so does ours
        module = parse_hlo_text(data.decode("utf-8", errors="replace"), str(p))
    else:
        try:
            module = parse_hlo_proto(data, str(p))
        except HloError:
            raise HloError(f"{p}: neither HLO text (no 'HloModule' header) nor an HLO proto") from None
    module.file = str(p)
    if info is not None:
        if info.stage and module.stage is None:
            module.stage = info.stage
        if info.module_id is not None and module.module_id is None:
            module.module_id = info.module_id
        if info.from_profiler and info.module_id is not None:
            module.program_id = info.module_id
        if info.name and module.name == f"module_{module.entry}":  # text without its HloModule line
            module.name = info.name
    return module


def _read_mlir(data: bytes, path: Path) -> HloModule:
    """A StableHLO/MHLO module, converted to HLO by jaxlib (parsers/hlo/stablehlo.py): stage "lowered"."""
    module = parse_hlo_text(mlir_to_hlo_text(data.decode("utf-8", errors="replace"), str(path)), str(path))
    module.stage = LOWERED_STAGE
    module.warnings.append(f"{path}: StableHLO/MHLO text converted to HLO by jaxlib: the program as lowered, "
                           "before XLA's optimizations (no fusion, layouts or combined collectives); its costs "
                           "are the unoptimized program's")
    return module


def check_stage(stage: object) -> str:
    """``stage`` when it is "after" or "before" (optimizations), the two a dump holds; else a UserError.
    Checked before anything is read, so a wrong stage fails even where no dump is found to use it."""
    if not isinstance(stage, str) or stage not in ("after", "before"):
        raise UserError(f"stage must be 'after' or 'before', not {stage!r}")
    return stage


def load_hlo_modules(path: str | Path, stage: str = "after", wanted: Callable[[str], bool] | None = None,
                     converted: dict | None = None) -> tuple[list[HloModule], list[str]]:
    """Every HLO module under ``path`` (a dump folder, a text file or a proto file).

    Where a module was dumped both before and after optimizations, ``stage``
    ("after" or "before") picks one; where both text and proto forms exist,
    the proto is read. Files that are not HLO modules (buffer assignments,
    LLVM IR, PTX, autotune results, ...) are left alone. Returns the modules,
    sorted by module id then name, and warnings. ``wanted(name)``: a module of
    a folder is read only when this accepts its name (a full dump holds every
    module the program compiled); the name comes from the text form's
    ``HloModule`` header, else from the proto form, decoded but not converted.
    ``converted``: modules an earlier call read, by file; reused, and this call's reads added.
    """
    check_stage(stage)
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such file or folder")
    if p.is_file():
        module = read_hlo_file(p)
        return [module], list(module.warnings)
    warnings: list[str] = []
    candidates: dict[tuple, list[DumpFile]] = {}
    unknown: list[str] = []
    for f in sorted(x for x in p.rglob("*") if x.is_file()):
        info = classify_file(f)
        if info is None and _strip_compression(f.name).endswith(".txt") and _looks_like_hlo_text(f):
            info = DumpFile(f, "text", None, None, None)
        if info is None:
            base = _strip_compression(f.name)
            if not (_OTHER_RE.search(base) or _PASS_RE.match(base) or f.parent != p):
                unknown.append(f.name)
            continue
        key = (f.parent, info.module_id, info.name) if info.name else (f,)  # one module per folder, id, name
        candidates.setdefault(key, []).append(info)
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        warnings.append(f"{p}: skipped {len(unknown)} file(s) that are not HLO modules: {shown}")
    modules: list[HloModule] = []
    passed_over = 0
    for files in candidates.values():
        chosen = _choose(files, stage)
        content = None
        if wanted is not None:
            name, content = _module_name(files, chosen)
            if name is not None and not wanted(name):
                passed_over += 1
                continue
        if chosen.stage not in (None, stage):
            warnings.append(f"{chosen.path}: module {chosen.name} has no {stage}-optimizations dump; "
                            f"read its {chosen.stage}-optimizations one")
        module = converted.get(("file", str(chosen.path))) if converted is not None else None
        if module is None:
            module = _read_module(chosen, files, content, warnings)
            if module is None:
                continue
            if converted is not None:
                converted["file", str(chosen.path)] = module
        warnings.extend(module.warnings)
        modules.append(module)
    if not modules and not passed_over:
        skipped = [w for w in warnings if w.startswith("skipped: ")]
        raise UserError(f"{p}: no HLO modules found (expected *_optimizations.txt, *.hlo.pb or "
                        f"*.hlo_proto.pb files, as XLA_FLAGS=--xla_dump_to writes)"
                        + (f"; {len(skipped)} unreadable, e.g. {skipped[0][9:]}" if skipped else ""))
    modules.sort(key=lambda m: (m.module_id if m.module_id is not None else -1, m.name))
    return modules, warnings


def _read_module(chosen: DumpFile, files: list[DumpFile], content: bytes | None,
                 warnings: list[str]) -> HloModule | None:
    """The chosen file's module (from `content` when already read), else the same module's other form;
    None, with a warning, when neither reads: one bad file never aborts the dump."""
    try:
        return read_hlo_file(chosen.path, content)
    except HloError as exc:
        other = [f for f in files if f.stage == chosen.stage and f.path != chosen.path]
        if not other:
            warnings.append(f"skipped: {exc}")
            return None
        try:
            module = read_hlo_file(other[0].path)
        except HloError as exc2:
            warnings.append(f"skipped: {exc}; and {exc2}")
            return None
        warnings.append(f"{exc}; read {other[0].path.name} instead")
        return module


def _module_name(files: list[DumpFile], chosen: DumpFile) -> tuple[str | None, bytes | None]:
    """The name one module's files give it in the chosen file's stage, read the cheapest way first: a
    text form's ``HloModule`` header (its first 4 KB, decompressed if need be), else the chosen proto
    decoded by protobuf (its bytes come back too, so it is not read twice). None: no name found."""
    texts = [f for f in files if f.kind == "text" and f.stage == chosen.stage]
    for f in sorted(texts, key=lambda f: f.path.name.endswith(_COMPRESSED)):
        name = header_module_name(read_head(f.path, _SNIFF_BYTES).decode("utf-8", errors="replace"))
        if name is not None:
            return name, None
    if chosen.kind == "proto":
        try:
            data = read_bytes(chosen.path)
        except HloError:
            return None, None
        return proto_module_name(data), data
    return None, None


def _looks_like_hlo_text(path: Path) -> bool:
    if path.suffix in _COMPRESSED:
        return False  # not worth decompressing a whole unknown file to sniff it
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError:
        return False
    return looks_like_hlo_text(head.decode("utf-8", errors="replace"))


def _choose(files: list[DumpFile], stage: str) -> DumpFile:
    """The file to read for one module: the wanted stage first, then proto before text."""
    def rank(f: DumpFile) -> tuple[int, int]:
        return (0 if f.stage in (stage, None) else 1, 0 if f.kind == "proto" else 1)
    return min(files, key=rank)


def match_module(modules: list[HloModule], name: str | None = None,
                 program_id: int | None = None) -> HloModule | None:
    """The module a trace refers to: by program id when known, else by name.

    A name matches exactly, or after dropping the ``(N)`` suffix XProf adds
    (``jit_f(3)``). When several modules share a name (recompilations), the
    one whose id matches wins, else the last one.
    """
    if program_id is not None:
        for m in modules:
            same_id = m.program_id == program_id or (m.program_id is None and m.module_id == program_id)
            if same_id and (name is None or _base_name(m.name) == _base_name(name)):
                return m
    if name is None:
        return None
    same = [m for m in modules if m.name == name or _base_name(m.name) == _base_name(name)]
    return same[-1] if same else None


def _base_name(name: str) -> str:
    return re.sub(r"\(\d+\)$", "", name)
