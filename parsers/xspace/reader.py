"""Read one profiler XSpace file (``*.xplane.pb``, optionally gzipped) into traceview's tables.

What comes out (see :mod:`traceview.parsers.profile` for the columns):

* device op table: one row per op execution, counted as XProf's HLO op stats
  count occurrences (TPU: each event on the ``XLA Ops`` line; GPU: each kernel
  or memcpy on a ``Stream #N`` line, so an HLO op run as several kernels has
  several rows; CPU-only traces: each host event carrying an ``hlo_op`` stat);
* host event table: everything on host threads that is not an op row;
* steps, devices, environment strings (jax / jaxlib versions, profile times);
* the HloProto bytes of ``/host:metadata``, keyed as that plane names them:
  ``"<module>(<program id>)"``, e.g. ``"jit_train_step(17)"`` (the program id
  in decimal, as uint64).

Events are decoded line by line (:mod:`traceview.parsers.xspace.events`);
names and per-op stats are resolved once per event *metadata* and spread with
index arrays; per-event stats are read only on the lines that need them
(:mod:`traceview.parsers.xspace.lines`), always by name through the plane's
stat metadata. The tables themselves are built as the trace JSON reader builds
them (:class:`traceview.parsers.tables.builder.TableBuilder`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from traceview.errors import TraceError
from traceview.parsers.layout import host_of
from traceview.parsers.profile import Device
from traceview.parsers.tables.builder import TableBuilder
from traceview.parsers.tables.columns import spread
from traceview.parsers.tables.conventions import (
    DEVICE_PLANE,
    GPU_STREAM_PREFIX,
    HOST_PLANE,
    INT32_MAX,
    METADATA_PLANE,
    STEPS_LINE,
    TASK_ENV_PLANE,
    TPU_MODULES_LINE,
    TPU_OPS_LINE,
    device_order,
    to_int,
)
from traceview.parsers.tables.gpu_kernels import CUDA_GRAPH_STAT
from traceview.parsers.tables.steps import step_block
from traceview.parsers.tables.trace_data import TraceData
from traceview.parsers.xspace.events import LineEvents
from traceview.parsers.xspace.file import load_xspace
from traceview.parsers.xspace.lines import (
    GRAPH_STATS,
    OP_STATS,
    async_op_ends,
    extension_to_end_marker,
    stat_rows,
    tpu_modules,
    tpu_ops,
)
from traceview.parsers.xspace.plane import PlaneView, device_of

_HLO_PROTO_STAT = ("Hlo Proto", "hlo_proto")


def read_xplane(path: str | Path, host: str | None = None, fast: bool | None = None) -> TraceData:
    """Read one XSpace file into a TraceData (tables for one host)."""
    path = Path(path)
    host = host or host_of(path)
    space = load_xspace(path, fast=fast)
    try:
        return XSpaceReader(space, host, str(path)).read()
    finally:
        close = getattr(space, "close", None)  # a mapped file (parsers/xspace/mapped.py): unmapped now
        if close is not None:
            close()


class XSpaceReader(TableBuilder):
    """The tables of one XSpace: device planes (TPU ops, GPU kernels, steps), the host plane (host events,
    CPU ops when no device has any, step annotations), the metadata planes (HLO protos, environment)."""

    def __init__(self, space, host: str, path: str) -> None:
        super().__init__(host, path, [f"{path}: trace error: {e}" for e in space.errors]
                         + [f"{path}: trace warning: {w}" for w in space.warnings])
        self.space = space

    def read(self) -> TraceData:
        planes = list(self.space.planes)
        events_per_plane = {p.name: sum(len(line.events) for line in p.lines) for p in planes}
        if not any(events_per_plane.values()):
            raise TraceError(f"{self.path}: the trace holds no events (empty profile)")
        device_planes = [(p, m) for p in planes if (m := DEVICE_PLANE.match(p.name))]
        hlo_protos, environment = self._metadata(planes)
        self.kernels.hlo_protos = hlo_protos
        for plane, m in sorted(device_planes, key=lambda pm: (pm[1][1], int(pm[1][2]))):
            self._device_plane(plane, m[1], m[2])
        self.warnings += self.kernels.notes()
        device_has_ops = bool(self.chunks)
        host_plane = next((p for p in planes if p.name == HOST_PLANE), None)
        annotations = None
        if host_plane is not None:
            annotations = self._host_plane(host_plane, cpu_ops=not device_has_ops)
        # The raw events are no longer needed: drop them before the tables are built (peak memory).
        device_names = [(p.name, m[1], m[2]) for p, m in device_planes if m]
        self.space = plane = None
        del planes, host_plane, device_planes
        ops = self.ops_frame()
        ops, steps = self.assign_steps(ops, annotations)
        if self.dropped["events"]:
            self.warnings.append(f"{self.path}: dropped {self.dropped['events']} event(s) with negative or "
                                 "overflowing times (corrupt trace?)")
        if self.dropped["device_times"]:
            self.warnings.append(f"{self.path}: ignored {self.dropped['device_times']} negative or overflowing "
                                 "device-clock time(s); those ops are timed by their event")
        if ops.empty:
            self.warnings.append(f"{self.path}: no device op events in this trace")
        idle = [f"{self.host}/{kind}:{ordinal}" for name, kind, ordinal in device_names if not events_per_plane[name]]
        if idle:
            self.warnings.append(f"{self.path}: no events on {len(idle)} device(s): {', '.join(idle)}")
        skipped = {name for name, _, _ in device_names} | {HOST_PLANE, METADATA_PLANE, TASK_ENV_PLANE}
        unknown_planes = sorted(n for n, count in events_per_plane.items() if count and n not in skipped)
        if unknown_planes:
            self.warnings.append(f"{self.path}: planes not analyzed: {', '.join(unknown_planes)}")
        return TraceData(host=self.host, ops=ops, host_events=self.host_frame(), steps=steps,
                         devices=self.devices, hlo_protos=hlo_protos, environment=environment,
                         warnings=self.warnings)

    # --- device planes

    def _device_plane(self, plane, kind: str, ordinal: str) -> None:
        view = PlaneView(plane)
        dev = device_of(view, self.host, kind, ordinal)
        self.devices.append(dev)
        lines = {line.name: line for line in plane.lines if len(line.events)}
        if kind == "TPU":
            modules: dict[int, str] = {}
            mod_exec = None
            if TPU_MODULES_LINE in lines:
                modules, mod_exec = tpu_modules(view, self._events(view, lines[TPU_MODULES_LINE]))
                self.module_execs[dev.id] = mod_exec
            if TPU_OPS_LINE in lines:
                ev = self._events(view, lines[TPU_OPS_LINE], ("device_offset_ps", "device_duration_ps"))
                self.chunks.append(tpu_ops(view, dev.id, ev, TPU_OPS_LINE, modules, mod_exec))
        else:
            stats = OP_STATS + (GRAPH_STATS if CUDA_GRAPH_STAT in view.stat_ids else ())
            kernel_names = [m.name for m in view.md_list]
            for name, line in lines.items():
                if name.startswith(GPU_STREAM_PREFIX):
                    chunk = stat_rows(view, dev.id, name, self._events(view, line, stats), last_use=True,
                                       kernels=True)
                    self.kernels.add(chunk, kernel_names, view.md_index)
                    self.chunks.append(chunk)
        if STEPS_LINE in lines:
            ev = self._events(view, lines[STEPS_LINE])
            numbers = []  # each metadata name's step number (-1: none), then -1 for unknown metadata
            for m in view.md_list:
                number = to_int(m.name)
                numbers.append(number if number is not None and 0 <= number < INT32_MAX else -1)  # int32 column
            step = np.array(numbers + [-1], dtype=np.int64)[view.md_index(ev.mid)]
            unnamed = step < 0
            step[unnamed] = np.flatnonzero(unnamed)  # no number: the event's position on the line
            self.step_rows.append(step_block(dev.id, step, ev.start, ev.duration, "steps_line"))

    def _events(self, view: PlaneView, line, stats: tuple[str, ...] = ()) -> LineEvents:
        """A line's events, decoding only the named per-event stats."""
        return LineEvents(view, line, self.path, stats, self.dropped)

    # --- host plane

    def _host_plane(self, plane, cpu_ops: bool):
        """Host events; on a CPU-only trace, events with an hlo_op stat become op rows.

        Returns the step annotations found (StepTraceAnnotation events: a
        ``step_num`` stat) as (start, end, step) arrays, or None.
        """
        view = PlaneView(plane)
        ann: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        cpu_device = f"{self.host}/CPU"
        cpu_devices: set[str] = set()
        md_names = [m.name for m in view.md_list]
        stats = OP_STATS + ("step_num", "device_ordinal", "_p", "_c")
        lines = [(line, self._events(view, line, stats)) for line in plane.lines if len(line.events)]
        op_ends = async_op_ends(view, md_names, [ev for _, ev in lines]) if cpu_ops else None
        for line, ev in lines:
            keep_host = np.ones(len(ev), dtype=bool)
            if cpu_ops and "hlo_op" in view.stat_ids:
                is_op = ev.text_codes("hlo_op")[0] >= 0
                if is_op.any():
                    # With --xla_force_host_platform_device_count each thunk names
                    # the simulated device it ran for: one device per ordinal.
                    ordinal, has_ordinal = ev.ints("device_ordinal")
                    extension = extension_to_end_marker(ev, op_ends)
                    groups = [(f"{cpu_device}:{k}", is_op & has_ordinal & (ordinal == k))
                              for k in np.unique(ordinal[is_op & has_ordinal])]
                    if (is_op & ~has_ordinal).any():
                        groups.append((cpu_device, is_op & ~has_ordinal))
                    for device, rows in groups:
                        chunk = stat_rows(view, device, line.name, ev, keep=rows)
                        chunk.duration = chunk.duration + extension[rows]
                        chunk.self_ps = chunk.self_ps + extension[rows]
                        self.chunks.append(chunk)
                        cpu_devices.add(device)
                    keep_host = ~is_op
            step_num, has_step = ev.ints("step_num")
            has_step &= (step_num >= 0) & (step_num < INT32_MAX)  # the step column is int32
            if has_step.any():
                ann.append((ev.start[has_step], ev.start[has_step] + ev.duration[has_step], step_num[has_step]))
            self.host_chunks.append(dict(
                thread=line.name, start=ev.start[keep_host], duration=ev.duration[keep_host],
                name=spread(md_names, view.md_index(ev.mid[keep_host]), ""),
            ))
        plane_stats = view.plane_stats()
        for device in sorted(cpu_devices, key=device_order):
            self.devices.append(Device(id=device, host=self.host, kind="CPU", stats=plane_stats))
        if not ann:
            return None
        a_start, a_end, a_step = (np.concatenate(x) for x in zip(*ann))
        order = np.argsort(a_start, kind="stable")
        return a_start[order], a_end[order], a_step[order]

    # --- metadata planes

    def _metadata(self, planes) -> tuple[dict[str, bytes], dict[str, str]]:
        protos: dict[str, bytes] = {}
        env: dict[str, str] = {}
        for plane in planes:
            if plane.name not in (METADATA_PLANE, TASK_ENV_PLANE):
                continue
            view = PlaneView(plane)
            for name, value in view.plane_stats().items():
                if not isinstance(value, (bytes, bytearray)):
                    env[name] = str(value)
            if plane.name != METADATA_PLANE:
                continue
            for md in view.md_list:
                for s in md.stats:
                    if view.stat_names.get(s.metadata_id) in _HLO_PROTO_STAT and s.WhichOneof("value") == "bytes_value":
                        protos[md.name] = bytes(s.bytes_value)
        return protos, env
