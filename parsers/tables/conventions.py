"""What the profiler calls things, shared by the XSpace and the trace-event JSON reader.

A device is a plane (XSpace) or a process (JSON) named ``/device:TPU:0``;
its lines (threads) ``XLA Ops``, ``XLA Modules``, ``Steps`` or ``Stream #N``;
a module execution is named ``<module>(<program id>)``; an asynchronous
XLA:CPU op is closed by an ``end: <op>`` marker. Program ids are uint64 in
XLA; the int64 ``program_id`` column holds them bit for bit
(:func:`as_int64` / :func:`as_uint64`), -1 when unknown.
"""

from __future__ import annotations

import re

DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):(\d+)$")   # a device's plane (XSpace) or process (JSON)
MODULE_EVENT = re.compile(r"^(?P<name>.*)\((?P<pid>-?\d+)\)$")
# Lines of a device plane holding one event per executed op, and its steps.
TPU_OPS_LINE = "XLA Ops"
TPU_MODULES_LINE = "XLA Modules"
STEPS_LINE = "Steps"
GPU_STREAM_PREFIX = "Stream #"
HOST_PLANE = "/host:CPU"
METADATA_PLANE = "/host:metadata"
TASK_ENV_PLANE = "Task Environment"
END_MARKER_PREFIX = "end: "
# The step column is int32: step numbers outside [0, INT32_MAX) are none.
INT32_MAX = (1 << 31) - 1
_UINT64 = 1 << 64
_INT64_MAX = (1 << 63) - 1

# No time in a trace is this far from the session start (2^62 ps is 53 days): larger ones are corrupt,
# and keeping every start + duration below it means no sum of two times overflows int64.
MAX_TIME_PS = 1 << 62


def to_int(value) -> int | None:
    """Integer stats may be stored as int64, uint64, double or string."""
    if value is None or isinstance(value, (bytes, bytearray)):
        return None
    if isinstance(value, str) and len(value) > 40:  # no int64 is that long (and int() of 5000 digits is slow)
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def as_int64(value: int) -> int:
    """A uint64 program id as the int64 ``program_id`` column holds it (bit for bit).

    XLA program ids are uint64 (TPU ids are often above 2^63, e.g.
    ``jit_f(12190760917235803885)``); the op table keeps them in int64 by
    wrapping, so such ids are negative there. -1 means unknown.
    """
    return value - _UINT64 if value > _INT64_MAX else value


def program_id_of(value) -> int:
    """A program id stat as the int64 column holds it; -1 when absent or no uint64/int64."""
    v = to_int(value)
    return -1 if v is None or not -(1 << 63) <= v < _UINT64 else as_int64(v)


def as_uint64(program_id: int) -> int:
    """Undo the int64 wrap of a uint64 program id (-1 stays -1: unknown)."""
    return program_id + _UINT64 if program_id < -1 else program_id


def device_order(device: str) -> tuple[str, int]:
    """Sort "host/CPU:10" after "host/CPU:9"."""
    name, _, ordinal = device.rpartition(":")
    return (name, int(ordinal)) if ordinal.isdigit() else (device, -1)
