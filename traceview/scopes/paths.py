"""An HLO op_name (``jit(step)/transpose(jvp(Model))/layer_3/attn/dot_general``) -> a scope path and a pass.

JAX writes the named-scope stack of the equation that made an instruction,
wrapped in the transformations it went through. The path keeps the user's
names: ``jvp(Model)`` becomes ``Model``; ``transpose(...)`` (reverse-mode AD)
marks the backward pass and ``jvp(...)`` the forward one; bare markers
(``while``, ``body``, ``cond``, ``checkpoint``, ``remat``, ``shard_map``,
``pjit``, ...) and the ``jit(main)`` wrapper are dropped. The first component
(the jitted function) and the last (the primitive: ``dot_general``, ``mul``)
are not scopes: the caller roots the path at the program that ran the op.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PASSES = ("forward", "backward", "other")

# Wrappers JAX puts around a scope name: name(inner). transpose = the backward pass of reverse-mode AD.
WRAPPERS = frozenset({"jit", "pjit", "jvp", "transpose", "vmap", "pmap", "xmap", "checkpoint", "remat",
                      "remat2", "shard_map", "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr",
                      "named_call", "core_call", "closed_call", "xla_call", "xla_pmap", "while", "cond",
                      "scan", "body", "cond_fun", "body_fun", "linearize", "vjp", "grad"})
# Components that are only a transformation or control-flow marker, never a user's scope.
MARKERS = frozenset({"pjit", "jit", "while", "body", "cond", "branch", "checkpoint", "remat", "remat2",
                     "rematted_computation", "shard_map", "vmap", "pmap", "xmap", "jvp", "transpose", "scan",
                     "closed_call", "core_call", "xla_call", "custom_jvp_call", "custom_vjp_call",
                     "custom_vjp_call_jaxpr", "checkpoint_name", "main", "cond_fun", "body_fun"})
_WRAPPED = re.compile(r"^([A-Za-z_][\w]*)\((.*)\)$", re.S)
_BRANCH = re.compile(r"^branch_\d+(_fun)?$")
MAX_COMPONENTS = 64          # hostile input: deeper paths are cut here
MAX_NAME_CHARS = 4096        # and longer op_names read only this far


@dataclass(frozen=True)
class ScopePath:
    """Where an op_name puts its op: the scope names below the program (may be empty) and its pass."""

    scopes: tuple[str, ...]
    pass_: str
    program: str | None      # the jitted function the op_name starts with (jit(f) -> "f"), if any


def _split(text: str) -> list[str]:
    """Split on "/" outside parentheses (einsum specs and wrappers hold none, but be safe)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        elif ch == "/" and depth == 0:
            parts.append(text[start:i])
            start = i + 1
            if len(parts) >= MAX_COMPONENTS:
                return parts
    parts.append(text[start:])
    return parts


def _unwrap(component: str) -> tuple[str, set[str]]:
    """``transpose(jvp(Model))`` -> ("Model", {"transpose", "jvp"})."""
    seen: set[str] = set()
    for _ in range(MAX_COMPONENTS):
        m = _WRAPPED.match(component)
        if m is None or m.group(1) not in WRAPPERS:
            break
        seen.add(m.group(1))
        component = m.group(2)
    return component, seen


def _parse_one(op_name: str) -> ScopePath:
    raw = _split(op_name[:MAX_NAME_CHARS])
    program = None
    if len(raw) > 1:
        first, wrappers = _unwrap(raw[0])
        if wrappers & {"jit", "pjit"}:
            program, raw = first, raw[1:]
    body = raw[:-1]     # the last component is the primitive, not a scope
    scopes: list[str] = []
    markers: set[str] = set()
    for component in body:
        name, seen = _unwrap(component)
        markers |= seen
        if name in MARKERS or _BRANCH.match(name) or not name:
            markers.add(name)
            continue
        scopes.append(name)
    # The primitive can carry markers too (transpose(jvp(mul)) is rare but possible).
    markers |= _unwrap(raw[-1])[1] if raw else set()
    if "transpose" in markers:
        pass_ = "backward"
    elif "jvp" in markers:
        pass_ = "forward"
    else:
        pass_ = "other"
    return ScopePath(tuple(scopes), pass_, program)


def parse_op_name(op_name: str) -> ScopePath | None:
    """The scope path of one op_name; None when it is empty. Names XLA merged with ";" (a fusion of
    instructions from several places) share the longest common scope prefix; their pass is theirs if
    they agree, else "other"."""
    if not op_name:
        return None
    parts = [p for p in op_name[:MAX_NAME_CHARS].split(";") if p]
    if not parts:
        return None
    paths = [_parse_one(p) for p in parts[:MAX_COMPONENTS]]
    if len(paths) == 1:
        return paths[0]
    common: list[str] = []
    for names in zip(*(p.scopes for p in paths)):
        if any(n != names[0] for n in names):
            break
        common.append(names[0])
    passes = {p.pass_ for p in paths}
    programs = {p.program for p in paths}
    return ScopePath(tuple(common), passes.pop() if len(passes) == 1 else "other",
                     programs.pop() if len(programs) == 1 else None)
