"""XLA's GPU rewrite of a loop's collective-permutes into send/recv, applied to the text of a CPU dump.

JAX on the CPU never emits send/recv: XLA's GPU pipeline does, for the permutes inside a loop (a pipeline's
stage transfer, a ring's hop), when pipelined point-to-point is on (MaxText's GPU pipeline recipes). This
module does to a compiled CPU module's text what those passes do, so the generated programs carry send/recv
exactly as a GPU dump prints them, on programs no one tuned the reader to:

* ``CollectivePermuteValidIterationAnnotator`` (only with ``annotate``, and only where the pairs number the
  devices 0 .. p − 1, as that pass assumes): the loop is marked ``is_pipelined_while_loop`` and each pair i
  gets ``_xla_send_recv_validation`` {i, i + n − p} for an n-iteration loop;
* ``CollectivePermuteCycleDecomposer``: a ring's pairs split into the back edges (target before source)
  and the rest, each its own transfer;
* ``CollectivePermuteDecomposer``: each transfer becomes ``after-all``, ``recv``, ``send`` (the pairs in
  ``_xla_send_recv_source_target_pairs``, printed unquoted as XLA prints them), ``recv-done``,
  ``send-done`` on one new channel, the data taken from the recv-done; the two halves of a ring are put
  back together with a ``select`` on the partition id, as the cycle decomposer does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_CP = re.compile(r"^(?P<indent>\s*)(?P<name>%?[\w.\-]+) = (?P<shape>[a-z]\w*\[(?P<dims>[\d,]*)\](?:\{[^}]*\})?) "
                 r"collective-permute\((?P<operand>[^)]*)\), (?P<attrs>.*)$")
_HEADER = re.compile(r"^(?:ENTRY )?(?P<name>%?[\w.\-]+) \(.*\{\s*$")
_WHILE = re.compile(r"\bwhile\(.*body=(?P<body>%?[\w.\-]+)")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_PAIRS = re.compile(r"source_target_pairs=(\{(?:\{\d+,\d+\},?)*\})")
_METADATA = re.compile(r"metadata=\{[^}]*\}")


@dataclass
class Rewritten:
    text: str
    transfers: int = 0                               # permutes rewritten
    annotated: bool = False
    bodies: list[str] = field(default_factory=list)  # loop bodies whose permutes were rewritten


def _pairs_text(pairs: list[tuple[int, int]]) -> str:
    return "{" + ",".join(f"{{{a},{b}}}" for a, b in pairs) + "}"


def decompose(text: str, annotate: bool) -> Rewritten:
    """``text`` with every collective-permute inside a while body rewritten into send/recv."""
    lines = text.splitlines()
    trips: dict[str, int] = {}
    for line in lines:
        m = _WHILE.search(line)
        if m:
            t = _TRIPS.search(line)
            trips[m.group("body").lstrip("%")] = int(t.group(1)) if t else 0
    channel = max([int(c) for c in re.findall(r"channel_id=(\d+)", text)] or [0])
    out: list[str] = []
    result = Rewritten("")
    current = None
    marked: set[str] = set()
    for line in lines:
        header = _HEADER.match(line)
        if header:
            current = header.group("name").lstrip("%")
        m = _CP.match(line)
        if m is None or current not in trips:
            out.append(line)
            continue
        pairs = [tuple(map(int, p)) for p in re.findall(r"\{(\d+),(\d+)\}", _PAIRS.search(line).group(1))]
        devices = max(max(p) for p in pairs) + 1
        bounds = None
        if annotate and trips[current] and _one_ring(pairs, devices):   # the annotator's assumption: p = ids
            offset = trips[current] - devices
            bounds = {pair: (i, i + offset) for i, pair in enumerate(pairs)}
            marked.add(current)
        back = [p for p in pairs if p[1] < p[0]]
        edges = [("bwd", back), ("fwd", [p for p in pairs if p[1] >= p[0]])] if back else [("fwd", pairs)]
        datas = []
        for stage, (tag, edge) in enumerate(e for e in edges if e[1]):
            channel += 1
            datas.append(_transfer(out, m, tag, edge, channel, stage, bounds))
        result.transfers += 1
        result.bodies.append(current)
        _join(out, m, datas)
    result.text = "\n".join(_mark_loops(out, marked)) + "\n"
    result.annotated = bool(marked)
    return result


def _one_ring(pairs: list[tuple[int, int]], devices: int) -> bool:
    """Whether the pairs make one ring over devices 0 .. devices − 1."""
    nxt = dict(pairs)
    seen, at = set(), 0
    while at in nxt and at not in seen:
        seen.add(at)
        at = nxt[at]
    return len(pairs) == devices and seen == set(range(devices))


def _transfer(out: list[str], m: re.Match, tag: str, pairs: list[tuple[int, int]], channel: int, stage: int,
              bounds: dict | None) -> str:
    indent, name, shape = m.group("indent"), m.group("name"), m.group("shape")
    meta = _METADATA.search(m.group("attrs"))
    tail = f", {meta.group(0)}" if meta else ""
    attrs = f'_xla_send_recv_pipeline="{stage}",_xla_send_recv_source_target_pairs={_pairs_text(pairs)}'
    if bounds is not None:
        attrs += f",_xla_send_recv_validation={_pairs_text([bounds[p] for p in pairs])}"
    base = f"{name}-{tag}"
    context = f"({shape}, u32[], token[])"
    out += [
        f"{indent}{base}-after-all = token[] after-all()",
        f"{indent}{base}-recv = {context} recv(token[] {base}-after-all), channel_id={channel}, "
        f"frontend_attributes={{{attrs}}}{tail}",
        f"{indent}{base}-send = {context} send({m.group('operand')}, token[] {base}-after-all), "
        f"channel_id={channel}, frontend_attributes={{{attrs}}}, control-predecessors={{{base}-recv}}{tail}",
        f"{indent}{base}-recv-done = ({shape}, token[]) recv-done({context} {base}-recv), channel_id={channel}, "
        f'frontend_attributes={{_xla_send_recv_pipeline="{stage}"}}, control-predecessors={{{base}-send}}',
        f"{indent}{base}-send-done = token[] send-done({context} {base}-send), channel_id={channel}, "
        f'frontend_attributes={{_xla_send_recv_pipeline="{stage}"}}, control-predecessors={{{base}-recv-done}}',
        f"{indent}{base}-data = {shape} get-tuple-element(({shape}, token[]) {base}-recv-done), index=0",
    ]
    return f"{base}-data"


def _join(out: list[str], m: re.Match, datas: list[str]) -> None:
    """The permute's name for what it delivered: the one transfer's data, or the ring's two halves selected
    by the partition id."""
    indent, name, shape = m.group("indent"), m.group("name"), m.group("shape")
    if len(datas) == 1:
        out.append(f"{indent}{name} = {shape} copy({shape} {datas[0]})")
        return
    dims = m.group("dims")
    out += [f"{indent}{name}-pid = u32[] partition-id()",
            f"{indent}{name}-zero = u32[] constant(0)",
            f"{indent}{name}-first = pred[] compare(u32[] {name}-pid, u32[] {name}-zero), direction=EQ",
            f"{indent}{name}-mask = pred[{dims}] broadcast(pred[] {name}-first), dimensions={{}}",
            f"{indent}{name} = {shape} select(pred[{dims}] {name}-mask, {shape} {datas[0]}, {shape} {datas[1]})"]


def _mark_loops(lines: list[str], bodies: set[str]) -> list[str]:
    """``is_pipelined_while_loop`` on the loops whose bodies the annotator read."""
    out = []
    for line in lines:
        m = _WHILE.search(line)
        if m and m.group("body").lstrip("%") in bodies and "frontend_attributes=" not in line:
            line = line.replace(", backend_config=", ', frontend_attributes={is_pipelined_while_loop="true"}, '
                                                     "backend_config=", 1)
        out.append(line)
    return out
