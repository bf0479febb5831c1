"""XLA's buffer assignment as text: the ``*-buffer-assignment.txt`` file an XLA dump writes.

It lists the allocations (size and flags) and the values assigned to each,
but not the heap simulator trace, so a peak from it is the allocations'
total (the temporaries' allocation is the packed heap: at least its peak).
Lines look like::

    allocation 1: size 1048576, maybe-live-out:
     value: <19 ynn_fusion.1 @0> (size=1048576,offset=0): f32[256,1024]{1,0}
    allocation 2: size 524288, parameter 0, shape |f32[256,512]| at ShapeIndex {}:
"""

from __future__ import annotations

import re
from pathlib import Path

from traceview.errors import HloError
from traceview.parsers.hlo.buffer_assignment import BufferAllocation, BufferAssignment, LogicalBuffer

_ALLOCATION = re.compile(r"^allocation (?P<index>\d+): size (?P<size>\d+)(?P<flags>.*?):?\s*$")
_VALUE = re.compile(r"^\s*value: <(?P<id>\d+) (?P<name>[^\s{@]+)(?:\{(?P<index>[\d,]*)\})? @\d+> "
                    r"\(size=(?P<size>\d+),offset=(?P<offset>\d+)\)")
_PARAMETER = re.compile(r"parameter (\d+)")
_COLOR = re.compile(r"color (\d+)")
MAX_LINES = 20_000_000


def companion_file(hlo_text: Path) -> Path | None:
    """``<module>.<platform>_after_optimizations-buffer-assignment.txt`` beside an after-optimizations HLO text."""
    name = hlo_text.name
    for suffix in (".txt.gz", ".txt.xz", ".txt"):
        if name.endswith(suffix):
            candidate = hlo_text.with_name(name[: -len(suffix)] + "-buffer-assignment.txt")
            return candidate if candidate.is_file() else None
    return None


def parse_buffer_assignment_text(text: str, where: str = "<buffer assignment>") -> BufferAssignment:
    """Allocations and logical buffers of a buffer-assignment text dump (no heap simulator trace)."""
    out = BufferAssignment()
    current: dict | None = None

    def close() -> None:
        if current is not None:
            out.allocations.append(BufferAllocation(**current))

    seen_any = False
    for n, line in enumerate(text.splitlines(), start=1):
        if n > MAX_LINES:
            raise HloError(f"{where}: more than {MAX_LINES} lines")
        m = _ALLOCATION.match(line)
        if m:
            close()
            seen_any = True
            flags = m.group("flags")
            param = _PARAMETER.search(flags.split("shape |")[0])
            color = _COLOR.search(flags)
            current = dict(index=int(m.group("index")), size=int(m.group("size")),
                           color=int(color.group(1)) if color else 0,
                           is_thread_local="thread-local" in flags, is_entry_parameter=param is not None,
                           is_constant=", constant" in flags, maybe_live_out="maybe-live-out" in flags,
                           is_tuple=False, parameter_number=int(param.group(1)) if param else 0, assigned=())
            continue
        m = _VALUE.match(line)
        if m and current is not None:
            lb_id, size = int(m.group("id")), int(m.group("size"))
            index = tuple(int(i) for i in m.group("index").split(",") if i) if m.group("index") else ()
            out.logical_buffers[lb_id] = LogicalBuffer(id=lb_id, size=size, instruction_id=None,
                                                       instruction_name=m.group("name"), shape_index=index,
                                                       color=current["color"])
            current["assigned"] = current["assigned"] + ((lb_id, int(m.group("offset")), size),)
            continue
        if line.strip() and not line.startswith((" ", "\t")) and current is not None:
            close()   # the allocation list ended (a stats or "Used values" section follows)
            current = None
    close()
    if not seen_any:
        raise HloError(f"{where}: no 'allocation N: size S' lines: not an XLA buffer-assignment dump")
    return out


def read_buffer_assignment_text(path: str | Path) -> BufferAssignment:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise HloError(f"{p}: cannot read ({exc.strerror or exc})") from None
    return parse_buffer_assignment_text(text, str(p))
