"""Checks on StableHLO/MHLO text before jaxlib's MLIR parser sees it.

jaxlib's parser and converter are C++ with recursive descent: text nested a few
hundred thousand levels deep (attributes, tuple types, modules, fused
locations, ``stablehlo.case`` regions) or a function that calls itself
overflows its stack, and a sharding it cannot build fails an internal check
with a page of log. The converter runs in a child process anyway
(parsers/hlo/stablehlo.py), so a crash cannot take traceview down; these checks
turn the known causes into a one-line error that says what is wrong, and
catch the one thing the converter accepts silently: an ``mhlo.sharding`` it
cannot parse is dropped from the program without a word.

All checks are linear in the text: string literals and comments are blanked
first, so brackets and ``@`` names inside them count for nothing.
"""

from __future__ import annotations

import re

import numpy as np

from traceview.errors import HloError

MAX_NESTING = 256             # brackets of any kind open at once; real programs stay under a few dozen
MAX_SHARDING_DEVICES = 1 << 24  # devices one sharding's tile assignment may name

_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_COMMENT = re.compile(r"//[^\n]*")
_ARROW = re.compile(r"->")
_FUNC = re.compile(r"\bfunc\.func\s+(?:(?:public|private|nested)\s+)*@([\w$.\-]+)")
_SYMBOL = re.compile(r"@([\w$.\-]+)")
_SHARDING = re.compile(r'\bmhlo\.sharding\s*=\s*"((?:[^"\\\n]|\\.)*)"')
_SHARDING_KIND = re.compile(r"\b(?:replicated|maximal|manual|unknown|unreduced)\b|\bdevices=\[")
_TILES = re.compile(r"devices=\[([^\]]*)\](?:\s*<=\[([^\]]*)\])?")
_OPEN = {ord(c): 1 for c in "([{<"}
_CLOSE = {ord(c): -1 for c in ")]}>"}


def check_mlir(text: str, where: str) -> None:
    """HloError (one line naming `where`) for text nested deeper than MAX_NESTING, for functions that call
    themselves (directly or through others), or for an ``mhlo.sharding`` that is no HLO sharding."""
    for value in _SHARDING.findall(text):
        _check_sharding(value, where)
    code = _COMMENT.sub("", _STRING.sub('""', text))
    depth = nesting_depth(_ARROW.sub("  ", code))
    if depth > MAX_NESTING:
        raise HloError(f"{where}: StableHLO text nested {depth} levels deep (brackets of attributes, types, "
                       f"regions or locations); more than the {MAX_NESTING} read")
    cycle = _call_cycle(code)
    if cycle:
        raise HloError(f"{where}: StableHLO function @{cycle[0]} calls itself"
                       + (f" (through {', '.join('@' + f for f in cycle[1:])})" if len(cycle) > 1 else "")
                       + ": recursion is not an XLA program")


def nesting_depth(code: str) -> int:
    """The most brackets open at once, a stray closing bracket never counted below zero."""
    raw = np.frombuffer(code.encode("utf-8", errors="replace"), dtype=np.uint8)
    steps = np.zeros(256, dtype=np.int64)
    for table in (_OPEN, _CLOSE):
        for byte, step in table.items():
            steps[byte] = step
    walk = np.cumsum(steps[raw])
    if not walk.size:
        return 0
    clamped = walk - np.minimum(np.minimum.accumulate(walk), 0)   # the walk reflected at zero
    return int(clamped.max())


def _call_cycle(code: str) -> list[str]:
    """A cycle of functions each naming the next in its body (the first repeated), or [] when none."""
    heads = list(_FUNC.finditer(code))
    defined = {m[1] for m in heads}
    calls: dict[str, set[str]] = {}
    for k, head in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(code)
        calls.setdefault(head[1], set()).update(
            name for name in _SYMBOL.findall(code, head.end(), end) if name in defined)
    state: dict[str, int] = {}       # 1: on the current path, 2: done
    for root in calls:
        if state.get(root):
            continue
        path, stack = [root], [iter(sorted(calls.get(root, ())))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(calls.get(nxt, ()))))
    return []


def _check_sharding(value: str, where: str) -> None:
    """An HLO sharding as text: balanced braces, a kind XLA knows, tile dimensions that are numbers naming at
    most MAX_SHARDING_DEVICES devices, and an iota form of as many devices as the tiles."""
    shown = value if len(value) <= 60 else value[:57] + "..."
    walk = np.cumsum([1 if c == "{" else -1 for c in value if c in "{}"] or [0])
    if not value.strip().startswith("{") or walk[-1] != 0 or walk.min() < 0 or not _SHARDING_KIND.search(value):
        raise HloError(f"{where}: mhlo.sharding {shown!r} is not an HLO sharding")
    for m in _TILES.finditer(value):
        tiles = _dims(m[1])
        devices = _dims(m[2]) if m[2] is not None else tiles
        if tiles is None or devices is None or _product(tiles) != _product(devices) \
                or _product(tiles) > MAX_SHARDING_DEVICES:
            raise HloError(f"{where}: mhlo.sharding {shown!r}: its tile assignment is not one of at most "
                           f"{MAX_SHARDING_DEVICES:,} devices")


def _dims(text: str) -> list[int] | None:
    parts = [p.strip() for p in text.split(",")]
    if not parts or not all(p.isdigit() and len(p) <= 12 for p in parts):
        return None
    return [int(p) for p in parts]


def _product(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out
