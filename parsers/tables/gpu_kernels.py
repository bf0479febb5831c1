"""GPU kernel rows as HLO op executions: kernels inside command buffers named after their instruction, and
which kernels of an op form one execution.

On a GPU one HLO op may launch several kernels (a cuBLAS call: a memset node
and the GEMM; cuDNN attention: five kernels forward), and a command buffer
(CUDA graph) launches a whole program's kernels under one pseudo-op. The op
table keeps one row per kernel, so times stay exactly XProf's, and marks in
``executions`` the row that starts an execution of its op (1) or continues one
(0): an op's occurrences are its executions, its kernels a count of their own,
and its FLOPs and bytes are charged once per execution.

Works on one stream's rows as numpy columns (codes into name lists); the
placement itself is :mod:`traceview.parsers.hlo.command_buffers`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from traceview.parsers.hlo.command_buffers import KernelSchedule, place_kernels

# A kernel replayed from a CUDA graph (an XLA command buffer) carries the graph's id; the graph launch it
# belongs to, the launch's correlation id.
CUDA_GRAPH_STAT = "cuda_graph_id"
GRAPH_LAUNCH_STAT = "correlation_id"


def execution_starts(op: np.ndarray, kernel: np.ndarray, stream: np.ndarray | None = None) -> np.ndarray:
    """Per row (one stream, or ``stream``'s streams one after another, each in time order), 1 where an
    execution of its op starts, else 0.

    Consecutive kernels of the same op are one execution, until the run repeats: a kernel equal to the
    one before it, or to the first kernel of the run, starts the next execution (a loop of one op).
    ``op`` and ``kernel``: integer codes per row (op name, kernel name); ``stream``: per row, its stream.
    """
    n = op.size
    starts = np.ones(n, dtype=np.int8)
    if n < 2:
        return starts
    same = np.empty(n, dtype=bool)
    same[0] = False
    np.equal(op[1:], op[:-1], out=same[1:])
    if stream is not None:
        same[1:] &= stream[1:] == stream[:-1]
    if not same.any():
        return starts
    position = np.arange(n)
    run_start = np.maximum.accumulate(np.where(same, 0, position))   # each row's run's first row
    repeat = np.zeros(n, dtype=bool)
    np.equal(kernel[1:], kernel[:-1], out=repeat[1:])
    repeat |= (kernel == kernel[run_start]) & (run_start != position)
    starts[same & ~repeat] = 0
    return starts


@dataclass
class CommandBufferRows:
    """What was found for the command-buffer kernels of one stream: the new op code per row (-1: not an
    attributable row or not placed), the names those codes index, and the counts for the report."""

    op: np.ndarray
    names: list[str]
    by_name: int = 0          # kernels placed by their XLA name
    by_order: int = 0         # library kernels placed by their place in the sequence
    unplaced: int = 0         # kernels of a command buffer left on the command buffer's name
    unplaced_ps: int = 0
    no_hlo: int = 0           # kernels of a command buffer whose module's HLO the trace does not hold


def attribute_command_buffers(rows: np.ndarray, op_names: list[str], op: np.ndarray, kernel: np.ndarray,
                              kernel_names: list[str], execution: np.ndarray, duration: np.ndarray,
                              schedule_of: Callable[[int], KernelSchedule | None], module_key: np.ndarray,
                              ) -> CommandBufferRows:
    """Place the kernels of command buffer executions on HLO instructions.

    ``rows``: the rows (in time order) that ran inside a CUDA graph; ``op``/``kernel``: codes per row into
    ``op_names``/``kernel_names``; ``execution``: per row, which graph launch it belongs to (the launch's
    correlation id); ``module_key``: per row, a code whose ``schedule_of`` gives its module's kernel
    schedule (None: no HLO). Only rows whose op is no instruction of its module are placed.
    """
    out = CommandBufferRows(op=np.full(op.size, -1, dtype=np.int64), names=[])
    if rows.size == 0:
        return out
    name_code: dict[str, int] = {}
    cache: dict[tuple, tuple[list[int], int, int]] = {}
    sub_exec, sub_mod, sub_op = execution[rows], module_key[rows], op[rows]
    cut = np.flatnonzero((sub_exec[1:] != sub_exec[:-1]) | (sub_mod[1:] != sub_mod[:-1]) |
                         (sub_op[1:] != sub_op[:-1])) + 1
    for lo, hi in zip(np.concatenate(([0], cut)), np.concatenate((cut, [rows.size]))):
        part = rows[lo:hi]
        schedule = schedule_of(int(sub_mod[lo]))
        if schedule is None:
            out.no_hlo += part.size
            continue
        if op_names[int(sub_op[lo])] in schedule.instructions:
            continue                                   # a real instruction (a graph of one op): nothing to place
        sequence = tuple(kernel[part].tolist())
        key = (int(sub_mod[lo]), sequence)
        placed = cache.get(key)
        if placed is None:
            placement = place_kernels([kernel_names[k] for k in sequence], schedule)
            codes = [-1 if name is None else name_code.setdefault(name, len(name_code)) for name in placement.ops]
            placed = cache[key] = (codes, placement.how.count("name"), placement.how.count("order"))
        codes, by_name, by_order = placed
        code_array = np.asarray(codes, dtype=np.int64)
        out.op[part] = code_array
        out.by_name += by_name
        out.by_order += by_order
        missing = part[code_array < 0]
        out.unplaced += missing.size
        out.unplaced_ps += int(duration[missing].sum())
    out.names = list(name_code)
    return out


class GpuKernelRows:
    """One trace file's GPU stream rows made op executions, line by line as the reader builds them.

    ``hlo_protos``: the trace's HLO (``"<module>(<program id>)"`` -> HloProto bytes), set before the first
    line; each module's kernel schedule is parsed only when a command buffer of it needs placing.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.hlo_protos: dict[str, bytes] = {}
        self._schedules: dict[tuple[str, int], KernelSchedule | None] = {}
        self._errors: list[str] = []
        self.found = CommandBufferRows(op=np.zeros(0, dtype=np.int64), names=[])
        self.graph_kernels = 0
        self.graph_launches: set[int] = set()

    def add(self, chunk, kernel_names: list[str], md_index: Callable[[np.ndarray], np.ndarray],
            stream: np.ndarray | None = None) -> None:
        """Rename one stream's command-buffer kernels after their instructions and mark its executions
        (``chunk``: the reader's rows of one line: start, duration, op/module categoricals, program_id and
        ``extra["kernel"]`` (metadata ids), ``extra["graph_launch"]``; changed in place). ``kernel_names``:
        the plane's event metadata names; ``md_index``: metadata ids -> positions in that list. ``stream``:
        per row, its stream's code, where one chunk holds several streams."""
        kernel = chunk.extra.pop("kernel", None)
        launch = chunk.extra.pop("graph_launch", None)
        if kernel is None or chunk.start.size == 0:
            return
        start = chunk.start
        order: np.ndarray | None
        if stream is not None:
            order = np.lexsort((start, stream))
        else:
            order = None if bool((start[1:] >= start[:-1]).all()) else np.argsort(start, kind="stable")

        def ordered(a: np.ndarray) -> np.ndarray:
            return a if order is None else a[order]

        op_codes = ordered(chunk.op.codes)
        kernel = ordered(kernel)
        if launch is not None and (launch >= 0).any():
            if "run_id" not in chunk.extra:   # a graph launch is one execution of its program (steps without annotations)
                chunk.extra["run_id"] = np.where(launch >= 0, launch + 1, 0)
            launch = ordered(launch)
            in_graph = np.flatnonzero(launch >= 0)
            names = np.full(kernel.size, -1, dtype=np.int64)          # names looked up for graph kernels only
            names[in_graph] = md_index(kernel[in_graph])
            op_codes = self._place(chunk, op_codes.astype(np.int64), names, launch, ordered(chunk.duration), order,
                                   kernel_names)
        starts = execution_starts(op_codes, kernel, None if stream is None else ordered(stream))
        if order is not None:
            unsorted = np.empty_like(starts)
            unsorted[order] = starts
            starts = unsorted
        chunk.extra["executions"] = starts

    def _place(self, chunk, op_codes: np.ndarray, kernel: np.ndarray, launch: np.ndarray, duration: np.ndarray,
               order: np.ndarray | None, kernel_names: list[str]) -> np.ndarray:
        """The chunk's op codes (time order) with command-buffer kernels renamed; the chunk's op column too."""
        import pandas as pd

        rows = np.flatnonzero(launch >= 0)
        self.graph_kernels += rows.size
        self.graph_launches.update(np.unique(launch[rows]).tolist())
        module_names = [str(m) for m in chunk.module.categories]
        module_codes = np.asarray(chunk.module.codes, dtype=np.int64)
        pids = chunk.program_id
        key_codes, keys = pd.factorize(pd.MultiIndex.from_arrays([
            module_codes if order is None else module_codes[order], pids if order is None else pids[order]]))
        keys_list = [(module_names[m] if m >= 0 else "", int(p)) for m, p in keys]
        found = attribute_command_buffers(
            rows, [str(o) for o in chunk.op.categories], op_codes, kernel, kernel_names, launch, duration,
            lambda k: self._schedule(*keys_list[k]), np.asarray(key_codes, dtype=np.int64))
        self._count(found)
        if not found.names:
            return op_codes
        categories = list(chunk.op.categories)
        known = {name: i for i, name in enumerate(categories)}
        remap = np.array([known.setdefault(name, len(known)) for name in found.names], dtype=np.int64)
        categories += [name for name in found.names if known[name] >= len(chunk.op.categories)]
        placed = found.op >= 0
        op_codes = op_codes.copy()
        op_codes[placed] = remap[found.op[placed]]
        unsorted = op_codes
        if order is not None:
            unsorted = np.empty_like(op_codes)
            unsorted[order] = op_codes
        chunk.op = pd.Categorical.from_codes(unsorted, categories=categories)  # codes narrowed by pandas
        return op_codes

    def _schedule(self, module: str, program_id: int) -> KernelSchedule | None:
        key = (module, program_id)
        if key not in self._schedules:
            self._schedules[key] = self._parse(module, program_id)
        return self._schedules[key]

    def _parse(self, module: str, program_id: int) -> KernelSchedule | None:
        """The module's kernel schedule from the HLO the trace holds, else from an XLA dump beside the trace
        (``hlo/``, ``xla_dump/``: parsers.layout.find_dump_dir); None when neither has it."""
        from traceview.errors import UserError
        from traceview.parsers.hlo.proto import parse_hlo_proto, proto_key

        wanted = program_id + (1 << 64) if program_id < -1 else program_id
        data = next((b for k, b in self.hlo_protos.items() if proto_key(k) == (module, wanted)), None)
        if data is None:
            data = next((b for k, b in self.hlo_protos.items() if proto_key(k)[0] == module), None)
        try:
            if data is not None:
                return KernelSchedule.of(parse_hlo_proto(data, f"{self.path}: HLO of {module}"))
            return self._from_dump(module, wanted)
        except UserError as exc:
            self._errors.append(str(exc))
            return None

    def _from_dump(self, module: str, program_id: int) -> KernelSchedule | None:
        from traceview.parsers.hlo.dump import load_hlo_modules
        from traceview.parsers.layout import find_dump_dir

        dump = find_dump_dir(self.path)
        if dump is None:
            return None
        modules, _ = load_hlo_modules(dump, "after", wanted=lambda name: name == module)
        chosen = next((m for m in modules if m.program_id == program_id), modules[0] if modules else None)
        return KernelSchedule.of(chosen) if chosen is not None else None

    def _count(self, found: CommandBufferRows) -> None:
        total = self.found
        total.by_name += found.by_name
        total.by_order += found.by_order
        total.unplaced += found.unplaced
        total.unplaced_ps += found.unplaced_ps
        total.no_hlo += found.no_hlo

    def notes(self) -> list[str]:
        """What the report says about command buffers (nothing when the trace ran none)."""
        if not self.graph_kernels:
            return []
        f = self.found
        notes = [f"{self.path}: this trace ran XLA command buffers (CUDA graphs): {self.graph_kernels} kernel(s) "
                 f"in {len(self.graph_launches)} graph launch(es); {f.by_name} placed on their HLO op by kernel "
                 f"name, {f.by_order} library kernel(s) by their order in the program"]
        if f.unplaced:
            notes.append(f"{self.path}: {f.unplaced} kernel(s) inside command buffers ({f.unplaced_ps / 1e6:.2f} us)"
                         " could not be placed on an HLO instruction (no library call left between the "
                         "instructions around them): they keep the command buffer's name and no cost")
        if f.no_hlo:
            notes.append(f"{self.path}: {f.no_hlo} kernel(s) inside command buffers of modules whose HLO the "
                         "trace does not hold keep the command buffer's name (give --hlo DIR)")
        notes += [f"{self.path}: {e}" for e in self._errors]
        return notes

