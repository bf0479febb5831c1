"""The reader's compiled kernels as machine code kept on disk, loaded with llvmlite alone: no numba import.

numba's own cache (``cache=True``) stores a kernel's machine code too, but
using it means importing numba and its dispatcher (0.1 s) and loading each
kernel through it (0.09 s): a fifth of a cold read of a 2 M-event trace. Here
each kernel of :mod:`traceview.parsers.native.kernels` is compiled once as a C-callable function
(numba's ``cfunc``, arrays passed as pointer and dimensions), the object code
of all of them is written to one file beside numba's cache, and later
processes link that file into an LLVM engine of their own (llvmlite, which
numba brings, imports in 0.03 s) and call the kernels through ctypes, which
releases the GIL as numba's ``nogil`` does.

The file is named by what its code depends on (the kernels' source, the
wrappers' layout, llvmlite's and numba's versions, Python's, the CPU and its
features, numba's CPU settings): any change makes another name, and a new
one is built by the next process that has numba. Its content is checked (a
magic, a bounded header, a SHA-256 of the object code) before a byte of it
runs; anything amiss and numba's own path is taken.

The object code names a few functions it never calls on our kernels' paths:
numba's runtime (freeing arrays the kernels do not allocate) and its
exception reporting (the kernels do not raise: they return error codes).
They are mapped, in this engine only (nothing enters LLVM's process-wide
table, which numba shares), to a function that ends the process with exit
code 3 should one ever be called. Python's own C functions are taken from the
process. A symbol that is neither is not loaded (the kernels then run
through numba).

Linux on x86-64 or aarch64 only (the object file is ELF); elsewhere numba's
path is used as before.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import re
import struct
import sys
from collections.abc import Callable
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np

from traceview.cache_root import configured_cache_root, default_cache_root

# Each kernel: its arguments (an array as its numpy dtype and dimensions, "n": an int64) and what the
# Python call returns: "arg<k>" (its k-th argument), "int", "pair" (two ints), "bool" or "none".
# The C function takes each array as a pointer followed by its dimensions, each number as an int64,
# and a pointer to two int64 where it writes its result.
KERNELS: dict[str, tuple[tuple[str, ...], str]] = {
    "slice_hashes": (("u1:1", "i8:1", "i8:1", "u8:1"), "arg3"),
    "slices_equal": (("u1:1", "i8:1", "i8:1", "i8:1", "i8:1"), "bool"),
    "line_head": (("u1:1", "n", "i8:1"), "arg2"),
    "event_position": (("u1:1", "n", "n"), "int"),
    "decode_wide": (("u1:1", "n", "n", "n", "i8:1", "i8:1", "i8:1", "i8:1", "i1:2", "u8:2", "u4:2"), "pair"),
    "nested_children": (("i8:1",) * 5, "none"),
    "self_times_in_order": (("i8:1",) * 5, "bool"),
    "space_outline": (("u1:1", "n", "i8:2"), "pair"),
}
# Called only where a kernel raises or frees a runtime-allocated array: ours do neither.
_NEVER_CALLED = frozenset({"NRT_Free", "NRT_MemInfo_call_dtor", "numba_do_raise", "numba_gil_ensure",
                           "numba_gil_release", "numba_runtime_build_excinfo_struct", "numba_unpickle"})
_MAGIC = b"TVKERNELS1\n"
_MAX_HEADER = 1 << 16
_MAX_OBJECT = 64 << 20
_SOURCE = Path(__file__).with_name("kernels.py")
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]{0,200}")


class NativeKernels:
    """The kernels as attributes, called as the numba kernels are (same arguments, same results)."""

    def __init__(self, addresses: dict[str, int], keep: tuple[Any, ...] = ()) -> None:
        self._keep = keep  # the engine (or numba's compiled functions) and the stub: alive as long as the kernels
        for name, (args, returns) in KERNELS.items():
            setattr(self, name, _caller(name, addresses[name], args, returns))


def load() -> NativeKernels | None:
    """The kernels from the first valid file of :func:`_folders`, or None (no file for this setting, or
    unusable: then numba compiles or loads them, and :func:`build` writes the file)."""
    if not supported():
        return None
    try:
        name = _file_name()
    except ImportError:  # no llvmlite (numba absent)
        return None
    for folder in _folders():
        try:
            data = (folder / name).read_bytes()
        except OSError:
            continue
        parsed = _parse(data)
        if parsed is not None:
            return _link(*parsed)
    return None


def build(kernels: Any) -> NativeKernels | None:
    """Compile each kernel of the numba module `kernels` as a C function, write their object code for
    the next processes (first writable folder of :func:`_folders`) and return them; None where that cannot
    be done (the caller then uses numba's dispatchers)."""
    if not supported() or _writable_folder() is None:  # nowhere to keep it: compiling it each time would not pay
        return None
    try:
        compiled = {name: _compile(kernels, name, args, returns) for name, (args, returns) in KERNELS.items()}
        obj = _object_code(compiled)
        undefined = undefined_symbols(obj)
    except Exception:  # noqa: BLE001 - a numba or llvmlite we do not know: its own dispatchers still work
        return None
    if not _resolvable(undefined):
        return None
    header = {"symbols": {name: f.native_name for name, f in compiled.items()},
              "sha256": hashlib.sha256(obj).hexdigest()}
    _save(_MAGIC + _encode(header) + obj)
    return NativeKernels({name: f.address for name, f in compiled.items()}, keep=tuple(compiled.values()))


# ------------------------------------------------------------------ calling


def _caller(name: str, address: int, args: tuple[str, ...], returns: str) -> Callable[..., Any]:
    """A Python function calling the C function at `address` with numpy arrays and ints."""
    arrays = [None if a == "n" else (np.dtype(a.split(":")[0]), int(a.split(":")[1])) for a in args]
    c_args = [t for a in arrays for t in ((ctypes.c_int64,) if a is None else
                                          (ctypes.c_void_p,) + (ctypes.c_int64,) * a[1])]
    function = ctypes.CFUNCTYPE(None, *c_args, ctypes.c_void_p)(address)  # releases the GIL while it runs
    finish = _FINISH[returns] if returns in _FINISH else (lambda values, _, k=int(returns[3:]): values[k])

    def call(*values: Any) -> Any:
        flat: list[int] = []
        for value, array in zip(values, arrays, strict=True):
            if array is None:
                flat.append(int(value))
                continue
            if not (isinstance(value, np.ndarray) and value.dtype == array[0] and value.ndim == array[1]
                    and value.flags.c_contiguous):
                raise TypeError(f"{name}: expected a C-contiguous {array[0]} array of {array[1]} dimension(s)")
            flat.append(value.__array_interface__["data"][0])
            flat.extend(value.shape)
        result = (ctypes.c_int64 * 2)()
        function(*flat, ctypes.addressof(result))
        return finish(values, result)

    call.__name__ = name
    return call


# What a call returns, from its arguments and the two numbers the C function wrote ("arg<k>": its k-th argument).
_FINISH: dict[str, Callable[[tuple, Any], Any]] = {
    "pair": lambda _, r: (int(r[0]), int(r[1])), "int": lambda _, r: int(r[0]),
    "bool": lambda _, r: bool(r[0]), "none": lambda _, r: None}


# ------------------------------------------------------------------ building (needs numba)


def _compile(kernels: Any, name: str, args: tuple[str, ...], returns: str) -> Any:
    """numba's cfunc of a wrapper that views the pointers as arrays and calls kernels.<name>."""
    from numba import carray, cfunc, types

    scalar = {"u1": types.uint8, "i1": types.int8, "u4": types.uint32, "i8": types.int64, "u8": types.uint64}
    params: list[str] = []
    c_types: list[Any] = []
    call_args: list[str] = []
    for k, a in enumerate(args):
        if a == "n":
            params.append(f"x{k}")
            c_types.append(types.int64)
            call_args.append(f"x{k}")
            continue
        dtype, ndim = a.split(":")
        dims = [f"x{k}_{d}" for d in range(int(ndim))]
        params += [f"x{k}", *dims]
        c_types += [types.CPointer(scalar[dtype]), *([types.int64] * len(dims))]
        call_args.append(f"carray(x{k}, ({', '.join(dims)},))")
    store = {"pair": "out[0] = r[0]\n    out[1] = r[1]", "int": "out[0] = r",
             "bool": "out[0] = 1 if r else 0"}.get(returns, "pass")
    source = (f"def {name}({', '.join(params)}, result):\n"
              f"    r = kernel({', '.join(call_args)})\n"
              f"    out = carray(result, (2,))\n"
              f"    {store}\n")
    namespace: dict[str, Any] = {"kernel": getattr(kernels, name), "carray": carray}
    exec(compile(source, f"<traceview native {name}>", "exec"), namespace)  # noqa: S102 - our own text
    return cfunc(types.void(*c_types, types.CPointer(types.int64)))(namespace[name])


def _object_code(compiled: dict[str, Any]) -> bytes:
    """One object file holding every wrapper and what it calls: the wrappers' modules linked (numba's
    linkable copies, where a function defined in several is kept once), each wrapper external."""
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        module = None
        for f in compiled.values():
            part = f._library._get_module_for_linking().clone()
            part.get_function(f.native_name).linkage = "external"  # linking drops unused linkonce functions
            if module is None:
                module = part
            else:
                module.link_in(part)
        machine = next(iter(compiled.values()))._library._codegen._tm
        return bytes(machine.emit_object(module))


# ------------------------------------------------------------------ linking (llvmlite only)


def _link(header: dict[str, Any], obj: bytes) -> NativeKernels | None:
    """The object code linked into an engine of its own; None when a symbol it needs cannot be given (LLVM
    would end the process on it), read from the object itself."""
    import llvmlite.binding as llvm

    try:
        undefined = undefined_symbols(obj)
    except ValueError:
        return None
    if not all(_SYMBOL.fullmatch(s) for s in undefined) or not _resolvable(undefined):
        return None
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    # Each outside symbol declared in the engine's own module and mapped there: nothing is added to
    # LLVM's process-wide symbol table (numba's compiles use it), and no symbol is left to a search that
    # ends the process when it fails.
    module = llvm.parse_assembly("\n".join(f'@"{s}" = external global i8' for s in undefined))
    engine = llvm.create_mcjit_compiler(module, llvm.Target.from_default_triple().create_target_machine())
    for symbol in undefined:
        target = _STUB if symbol in _NEVER_CALLED else getattr(_process(), symbol)
        engine.add_global_mapping(module.get_global_variable(symbol), ctypes.cast(target, ctypes.c_void_p).value)
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    addresses = {name: engine.get_function_address(header["symbols"][name]) for name in KERNELS}
    if not all(addresses.values()):
        return None
    return NativeKernels(addresses, keep=(engine, module))


def _never_called() -> None:
    os.write(2, b"traceview: internal error: a compiled kernel called numba's runtime (it raised or freed memory)\n")
    os._exit(3)


_STUB = ctypes.CFUNCTYPE(None)(_never_called)


@lru_cache(maxsize=1)
def _process() -> ctypes.CDLL:
    """This process's own symbols (Python's C API, libc)."""
    return ctypes.CDLL(None)


def _resolvable(undefined: list[str]) -> bool:
    """Every symbol either stubbed or found in this process."""
    return all(s in _NEVER_CALLED or hasattr(_process(), s) for s in undefined)


def undefined_symbols(obj: bytes) -> list[str]:
    """The symbols an ELF64 little-endian object file uses without defining them (sorted); ValueError
    for anything else or anything out of bounds."""
    if len(obj) < 64 or obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF object")
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    if shentsize < 64 or shoff + shnum * shentsize > len(obj):
        raise ValueError("section table out of bounds")
    # (type, offset, size, link, entry size) of each section
    sections = [struct.unpack_from("<4xI16xQQI12xQ", obj, shoff + i * shentsize) for i in range(shnum)]
    names: set[str] = set()
    for kind, offset, size, link, entsize in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        if entsize < 24 or link >= shnum or offset + size > len(obj):
            raise ValueError("symbol table out of bounds")
        _, str_offset, str_size, _, _ = sections[link]
        if str_offset + str_size > len(obj):
            raise ValueError("string table out of bounds")
        strings = obj[str_offset:str_offset + str_size]
        for at in range(offset, offset + size - entsize + 1, entsize):
            name_at, _, _, section_index = struct.unpack_from("<IBBH", obj, at)
            if section_index == 0 and name_at:  # SHN_UNDEF, named
                end = strings.find(b"\0", name_at)
                if end < 0:
                    raise ValueError("symbol name out of bounds")
                names.add(strings[name_at:end].decode("ascii"))
    return sorted(names)


# ------------------------------------------------------------------ the file


def supported() -> bool:
    """Whether this platform's object files can be read here (and TRACEVIEW_NO_NATIVE is not set)."""
    return (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64")
            and not os.environ.get("TRACEVIEW_NO_NATIVE"))


def _folders() -> list[Path]:
    """Where the file is looked for, and written to the first that takes it: numba's cache folder where one
    is set (numba then keeps its own cache there only); else the ``kernels`` folder of the cache root that
    ``TRACEVIEW_CACHE_DIR`` names (:mod:`traceview.cache_root`), when it is set, then beside the kernels'
    source (as numba's own cache is) and the user's cache, where a process given a fresh cache root still
    finds the file an earlier one built: the kernels depend on the install, not on what the cache holds."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return [Path(os.environ["NUMBA_CACHE_DIR"])]
    install = [_SOURCE.parent / "__pycache__", default_cache_root() / "kernels"]
    configured = configured_cache_root()
    return install if configured is None else [configured / "kernels", *install]


def _file_name() -> str:
    """kernels.<digest>.native: the digest of everything the machine code depends on."""
    import llvmlite
    import llvmlite.binding as llvm

    parts = [_SOURCE.read_bytes(), repr(sorted(KERNELS.items())).encode(), llvmlite.__version__.encode(),
             _numba_version(), sys.version.encode(), platform.machine().encode(),
             llvm.get_host_cpu_name().encode(), llvm.get_host_cpu_features().flatten().encode()]
    parts += [f"{k}={os.environ.get(k, '')}".encode() for k in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_OPT")]
    digest = hashlib.sha256(b"\0".join(parts)).hexdigest()[:24]
    return f"kernels.{digest}.native"


def _numba_version() -> bytes:
    """numba's version file as it is (read, not imported: importing numba is what this module avoids)."""
    spec = find_spec("numba")
    if spec is None or not spec.submodule_search_locations:
        return b""
    try:
        return (Path(next(iter(spec.submodule_search_locations))) / "_version.py").read_bytes()
    except OSError:
        return b""


def _encode(header: dict[str, Any]) -> bytes:
    text = json.dumps(header, sort_keys=True).encode()
    return struct.pack("<I", len(text)) + text


def _parse(data: bytes) -> tuple[dict[str, Any], bytes] | None:
    """(header, object code) of a file's bytes, or None where anything is off."""
    start = len(_MAGIC) + 4
    if len(data) < start or not data.startswith(_MAGIC):
        return None
    size, = struct.unpack_from("<I", data, len(_MAGIC))
    if size > _MAX_HEADER or start + size > len(data) or len(data) - start - size > _MAX_OBJECT:
        return None
    try:
        header = json.loads(data[start:start + size])
    except ValueError:
        return None
    obj = data[start + size:]
    if not (isinstance(header, dict) and isinstance(header.get("symbols"), dict)
            and set(header["symbols"]) == set(KERNELS) and all(isinstance(v, str) for v in header["symbols"].values())
            and header.get("sha256") == hashlib.sha256(obj).hexdigest()):
        return None
    return header, obj


def _writable_folder() -> Path | None:
    for folder in _folders():
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return folder
    return None


def _save(data: bytes) -> None:
    """Write the file into the first folder that takes it (atomically: a reader never sees half of it)."""
    name = _file_name()
    for folder in _folders():
        temporary = folder / f".{name}.{os.getpid()}.tmp"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            temporary.write_bytes(data)
            os.replace(temporary, folder / name)
            return
        except OSError:
            try:
                temporary.unlink(missing_ok=True)
            except OSError:
                pass
