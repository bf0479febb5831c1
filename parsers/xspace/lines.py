"""The op rows of each kind of XSpace line: TPU ``XLA Ops`` (named by their event metadata, timed by the
device clock), GPU streams and CPU threads (named by per-event ``hlo_op`` stats), and the ``end:`` markers
that close asynchronous XLA:CPU ops."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.parsers.tables.builder import OpChunk
from traceview.parsers.tables.columns import Vocab, spread, unreported
from traceview.parsers.tables.conventions import END_MARKER_PREFIX, MAX_TIME_PS, MODULE_EVENT, program_id_of
from traceview.parsers.tables.gpu_kernels import CUDA_GRAPH_STAT, GRAPH_LAUNCH_STAT
from traceview.parsers.tables.nesting import self_times
from traceview.parsers.xspace.events import LineEvents
from traceview.parsers.xspace.plane import PlaneView


def _op_name_from_md(md) -> str:
    """HLO op name of a TPU event metadata: display_name, else the name before ' = '."""
    if md.display_name:
        return md.display_name
    name = md.name.split(" = ", 1)[0].strip()
    return name[1:] if name.startswith("%") else name


def tpu_modules(view: PlaneView, ev: LineEvents) -> tuple[dict[int, str], tuple]:
    """program id -> module name, and the module executions (start, end, names, pids) sorted by start."""
    idx = view.md_index(ev.mid)
    names, pids = [], []
    for m in view.md_list:
        match = MODULE_EVENT.match(m.name)
        names.append(match["name"] if match else m.name)
        pids.append(program_id_of(match["pid"]) if match else -1)
    by_pid = {p: n for p, n in zip(pids, names) if p != -1}
    names_arr = np.array(names + [""], dtype=object)
    pids_arr = np.array(pids + [-1], dtype=np.int64)
    order = np.argsort(ev.start, kind="stable")
    idx = idx[order]
    start = ev.start[order]
    return by_pid, (start, start + ev.duration[order], names_arr[idx], pids_arr[idx])


def tpu_ops(view: PlaneView, device: str, ev: LineEvents, line_name: str, modules: dict[int, str],
             mod_exec: tuple | None) -> OpChunk:
    # XProf times TPU ops by the device clock (device_duration_ps) when the event has it;
    # nesting is then judged on the device clock too.
    dev_dur, has_dur = ev.ints("device_duration_ps")
    dev_off, has_off = ev.ints("device_offset_ps")
    # Device-clock times that cannot be (negative, overflowing) are dropped: the event's own times count.
    bad_dur = has_dur & ((dev_dur < 0) | (dev_dur > MAX_TIME_PS))
    bad_off = has_off & ((dev_off < 0) | (dev_off > MAX_TIME_PS))
    ev.counter["device_times"] = ev.counter.get("device_times", 0) + int(bad_dur.sum() + bad_off.sum())
    has_dur &= ~bad_dur
    has_off &= ~bad_off
    duration = np.where(has_dur, dev_dur, ev.duration)
    nest_start = dev_off if has_off.all() else ev.start
    idx = view.md_index(ev.mid)
    md_stats = view.md_stats()
    md_pid = np.array([program_id_of(st.get("program_id")) for st in md_stats] + [-1], dtype=np.int64)
    pid = md_pid[idx]
    md_flops = np.array([_float(st.get("flops")) for st in md_stats] + [np.nan])
    md_bytes = np.array([_float(st.get("bytes_accessed")) for st in md_stats] + [np.nan])
    module = spread([modules.get(int(p), "") for p in md_pid[:-1]], idx, "")
    if mod_exec is not None and (pid == -1).any():
        # Ops whose metadata has no program id: the enclosing module execution says.
        m_start, m_end, m_names, m_pids = mod_exec
        k = np.searchsorted(m_start, ev.start, side="right") - 1
        inside = (k >= 0) & (ev.start < m_end[np.maximum(k, 0)])
        missing = (pid == -1) & inside
        pid = pid.copy()
        pid[missing] = m_pids[k[missing]]
        module = pd.Categorical(np.where(missing, m_names[np.maximum(k, 0)], np.asarray(module, dtype=object)))
    return OpChunk(
        device=device, line=line_name, start=ev.start, duration=duration,
        self_ps=self_times(nest_start, duration),
        op=spread([_op_name_from_md(m) for m in view.md_list], idx, ""),
        module=module,
        category=spread([str(st.get("hlo_category", "")) for st in md_stats], idx, ""),
        program_id=pid, flops=md_flops[idx], bytes_=md_bytes[idx],
    )


def _float(v) -> float:
    try:
        return float(v) if v is not None and not isinstance(v, (bytes, str)) else np.nan
    except (TypeError, ValueError):
        return np.nan


# Per-event stats that name an op on GPU streams and CPU threads.
OP_STATS = ("hlo_op", "hlo_module", "program_id", "level 0", "run_id")


# Read only on planes that have the graph stat (no cost for traces without CUDA graphs).
GRAPH_STATS = (CUDA_GRAPH_STAT, GRAPH_LAUNCH_STAT)


def stat_rows(view: PlaneView, device: str, line_name: str, ev: LineEvents, keep: np.ndarray | None = None,
               last_use: bool = False, kernels: bool = False) -> OpChunk:
    """Op rows for events named by per-event hlo_op / hlo_module / program_id stats (GPU kernels, CPU thunks).

    Events with no HLO op (memcpys, TensorFlow kernels) are named by their
    framework op (the ``level 0`` stat), else by the kernel name. ``kernels`` (GPU streams): keep each
    row's kernel (its metadata id, ``extra["kernel"]``) and, for kernels run inside a CUDA graph, the
    graph launch they belong to (``extra["graph_launch"]``, -1 outside graphs). ``keep``:
    the rows to take (all by default); ``last_use``: nothing reads ``ev``
    after this (its stat columns are dropped once read). Each column is
    freed once used and taken without a copy where it is the whole line:
    a line of millions of kernels is the peak of a GPU trace's read.
    """
    rows = None if keep is None else np.flatnonzero(keep)

    def sel(column: np.ndarray) -> np.ndarray:
        return column if rows is None else column[rows]

    start, dur = sel(ev.start), sel(ev.duration)
    # Text stats stay codes into distinct strings: no Python object per event.
    ops = Vocab()
    op = sel(ev.text_codes("hlo_op", ops)[0])
    unnamed = op < 0
    if unnamed.any():
        fw_codes, fw_strings = ev.text_codes("level 0")
        framework = ops.take(sel(fw_codes), [f.split("#", 1)[0] for f in fw_strings])
        md = view.md_index(sel(ev.mid))
        kernel_names = [m.name for m in view.md_list] + [""]
        kernel = ops.take(np.where(md >= 0, md, len(kernel_names) - 1), kernel_names)
        op = np.where(unnamed, np.where(framework >= 0, framework, kernel), op)
        del fw_codes, framework, md, kernel
    del unnamed
    op_names = ops.categorical(op)                      # small codes now, the int64 ones freed
    del op
    modules = Vocab()
    module = sel(ev.text_codes("hlo_module", modules)[0])
    module[module < 0] = modules.code("")
    module_names = modules.categorical(module)
    del module
    pid, has_pid = ev.ints("program_id")
    pid[~has_pid] = -1                                  # a column of its own: -1 where unknown, in place
    program_id = sel(pid)
    del pid, has_pid
    run_id = sel(ev.ints("run_id")[0]) if ev.has_stat("run_id") else None
    kernel_id = sel(ev.mid) if kernels else None   # the metadata id: a kernel's identity, no lookup
    graph_launch = None
    if kernels and ev.has_stat(CUDA_GRAPH_STAT):
        in_graph = sel(ev.ints(CUDA_GRAPH_STAT)[1])
        launch, has_launch = ev.ints(GRAPH_LAUNCH_STAT)
        graph_launch = np.where(in_graph, np.where(sel(has_launch), sel(launch), 0), -1)
    if last_use:
        ev.release()
    n = start.size
    chunk = OpChunk(
        # Kernels on a GPU stream never nest: one that starts before the previous ends (programmatic dependent
        # launch) overlaps it, and each keeps its whole time as its own, as XProf counts it.
        device=device, line=line_name, start=start, duration=dur,
        self_ps=dur.copy() if kernels else self_times(start, dur),
        op=op_names, module=module_names,
        category=pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), [""]),
        program_id=program_id, flops=unreported(n), bytes_=unreported(n),
    )
    if run_id is not None:
        chunk.extra["run_id"] = run_id
    if kernel_id is not None:
        chunk.extra["kernel"] = kernel_id
    if graph_launch is not None:
        chunk.extra["graph_launch"] = graph_launch
    return chunk


def async_op_ends(view: PlaneView, md_names: list[str], lines: list[LineEvents]) -> tuple[np.ndarray, np.ndarray]:
    """(flow id, end time) of every `end: <op>` marker, sorted by flow id.

    XLA:CPU hands much of an op's work (dots, partitioned loop fusions) to a
    thread pool: the op's event covers only the launch, and a marker event
    named `end: <op>` on whichever thread finished the work closes it. The op
    event's `_p` flow stat equals the marker's `_c`.
    """
    is_end = np.array([n.startswith(END_MARKER_PREFIX) for n in md_names] + [False], dtype=bool)
    ids, ends = [], []
    for ev in lines:
        marker = is_end[view.md_index(ev.mid)]
        if not marker.any():
            continue
        flow, has_flow = ev.ints("_c")
        rows = marker & has_flow
        ids.append(flow[rows])
        ends.append(ev.start[rows] + ev.duration[rows])
    if not ids:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    flow_ids, end_times = np.concatenate(ids), np.concatenate(ends)
    order = np.argsort(flow_ids, kind="stable")
    return flow_ids[order], end_times[order]


def extension_to_end_marker(ev: LineEvents, op_ends: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Per event, how far its `end:` marker lies past the event's own end (0 when none)."""
    extension = np.zeros(len(ev), dtype=np.int64)
    if op_ends is None or op_ends[0].size == 0:
        return extension
    flow_ids, end_times = op_ends
    parent, has_parent = ev.ints("_p")
    pos = np.minimum(np.searchsorted(flow_ids, parent), flow_ids.size - 1)
    found = has_parent & (flow_ids[pos] == parent)
    own_end = ev.start + ev.duration
    extension[found] = np.maximum(end_times[pos[found]] - own_end[found], 0)
    return extension
