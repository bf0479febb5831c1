"""The lexical layer of XLA's HLO text: splitting at top-level commas and attribute boundaries (strings
and brackets respected), comments, metadata, bracket balance, and shapes such as
``f32[8,<=16]{1,0:T(8,128)}`` or nested tuples."""

from __future__ import annotations

import re

from traceview.parsers.hlo.attributes import unquote
from traceview.parsers.hlo.checks import MAX_TUPLE_DEPTH
from traceview.parsers.hlo.model import Shape

# Structural tokens: string literals (skipped whole), brackets and commas.
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_TOKEN_RE = re.compile(_STRING + r'|[{}\[\](),]')
_STRING_RE = re.compile(_STRING)
COMMENT_RE = re.compile(r"/\*.*?\*/")
# where XLA joins two attributes: ", key=" (a candidate only: it may sit inside a string or braces)
_ATTR_SPLIT_RE = re.compile(r", (?=[A-Za-z_][\w\-]*=)")


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split ``text`` at ``sep`` characters outside brackets and string literals."""
    parts: list[str] = []
    depth = 0
    start = 0
    for m in _TOKEN_RE.finditer(text):
        tok = m.group()
        if tok in "{[(":
            depth += 1
        elif tok in "}])":
            depth -= 1
        elif tok == sep and depth == 0:
            parts.append(text[start:m.start()].strip())
            start = m.end()
    tail = text[start:].strip()
    if tail or parts:
        parts.append(tail)
    return parts


def _closed(text: str) -> bool:
    """True when ``text`` opens no bracket or string it does not close (C-speed counts)."""
    if '"' in text:
        text = _STRING_RE.sub("", text)
        if '"' in text:
            return False
    return text.count("{") == text.count("}") and text.count("(") == text.count(")") \
        and text.count("[") == text.count("]")


def split_attributes(text: str) -> list[str]:
    """Split an instruction's ``key=value, key=value`` tail into ``key=value`` parts.

    Cuts at every ", key=" with str-level regexes and glues back pieces whose
    cut fell inside a string or brackets: no Python loop over characters or
    tokens, which matters for long JSON backend configs.
    """
    parts: list[str] = []
    held: str | None = None
    for piece in _ATTR_SPLIT_RE.split(text):
        held = piece if held is None else f"{held}, {piece}"
        if _closed(held):
            parts.append(held.strip())
            held = None
    if held is not None:
        parts.append(held.strip())
    return parts


def match_close(text: str, pos: int) -> int:
    """Index just past the bracket matching the one at ``text[pos]``; -1 if unbalanced."""
    depth = 0
    for m in _TOKEN_RE.finditer(text, pos):
        tok = m.group()
        if tok in "{[(":
            depth += 1
        elif tok in "}])":
            depth -= 1
            if depth == 0:
                return m.end()
    return -1


_META_RE = re.compile(r'([\w.\-]+)=(' + _STRING + r'|[^\s}]+)')


_COMMENT_TOKEN_RE = re.compile(_STRING + r"|/\*|//")
BARE_FLAG_RE = re.compile(r"^[A-Za-z_][\w.\-]*$")


def strip_comments(text: str) -> str:
    """``text`` without ``// ...`` and ``/* ... */`` comments outside string literals, as XLA's lexer
    skips them. Lines are kept (a block comment's lines become empty), so line numbers still hold."""
    if "//" not in text and "/*" not in text:
        return text
    lines = text.split("\n")
    in_block = False
    for i, line in enumerate(lines):
        if not in_block and "//" not in line and "/*" not in line:
            continue
        out: list[str] = []
        pos = 0
        while True:
            if in_block:
                end = line.find("*/", pos)
                if end < 0:
                    break
                in_block, pos = False, end + 2
                continue
            m = _COMMENT_TOKEN_RE.search(line, pos)
            while m is not None and m.group()[0] == '"':  # a string literal: comments inside it are text
                m = _COMMENT_TOKEN_RE.search(line, m.end())
            if m is None:
                out.append(line[pos:])
                break
            out.append(line[pos:m.start()])
            if m.group() == "//":
                break
            in_block, pos = True, m.end()
        lines[i] = "".join(out).rstrip() if out else ""
    return "\n".join(lines)


def parse_metadata(text: str) -> dict[str, str]:
    """``{op_type="x" op_name="y" source_line=3}`` -> dict of unquoted strings."""
    return {k: unquote(v) for k, v in _META_RE.findall(text)}


# ---------------------------------------------------------------------------
# shapes

ARRAY_RE = re.compile(r"\s*([a-z][a-z0-9]*)(?:\[([^\]]*)\])?(\{[^{}]*\})?")
_SHAPE_CACHE: dict[str, Shape] = {}


def parse_shape(text: str) -> Shape:
    """Parse an HLO shape such as ``f32[8,<=16]{1,0:T(8,128)}`` or a (nested) tuple.

    Raises ValueError on text that is not a shape; callers turn that into an
    :class:`HloError` with a file and line.
    """
    shape = _SHAPE_CACHE.get(text)
    if shape is None:
        shape, end = _parse_shape_at(text, 0)
        if text[end:].strip():
            raise ValueError(f"unexpected text after shape: {text[end:].strip()[:40]!r}")
        if len(_SHAPE_CACHE) < 200_000:
            _SHAPE_CACHE[text] = shape
    return shape


def _parse_shape_at(text: str, pos: int, depth: int = 0) -> tuple[Shape, int]:
    while pos < len(text) and text[pos] == " ":
        pos += 1
    if pos < len(text) and text[pos] == "(":
        if depth >= MAX_TUPLE_DEPTH:
            raise ValueError(f"tuple shape nested more than {MAX_TUPLE_DEPTH} deep")
        elems: list[Shape] = []
        pos += 1
        while True:
            while pos < len(text) and text[pos] in " ,":
                pos += 1
            if pos >= len(text):
                raise ValueError("unterminated tuple shape")
            if text[pos] == ")":
                pos += 1
                break
            if text.startswith("/*", pos):  # /*index=5*/ comments in long tuples
                end = text.find("*/", pos)
                if end < 0:
                    raise ValueError("unterminated comment in shape")
                pos = end + 2
                continue
            elem, pos = _parse_shape_at(text, pos, depth + 1)
            elems.append(elem)
        layout = None
        if text.startswith("{", pos):  # tuples may carry a (memory space) layout
            end = text.find("}", pos)
            layout = text[pos:end + 1]
            pos = end + 1
        return Shape("tuple", (), tuple(elems), layout), pos
    m = ARRAY_RE.match(text, pos)
    if not m or (m.group(2) is None and m.group(1) not in ("token", "opaque")):
        raise ValueError(f"not a shape: {text[pos:pos + 40]!r}")
    etype, dims_text, layout = m.groups()
    dims: tuple[int, ...] = ()
    dynamic: tuple[bool, ...] = ()
    if dims_text:
        parts = dims_text.split(",")
        if "<" in dims_text or "?" in dims_text:
            dl, fl = [], []
            for p in parts:
                p = p.strip()
                if p.startswith("<="):
                    dl.append(int(p[2:]))
                    fl.append(True)
                elif p == "?":
                    dl.append(-1)
                    fl.append(True)
                else:
                    dl.append(int(p))
                    fl.append(False)
            dims, dynamic = tuple(dl), tuple(fl)
        else:
            dims = tuple(int(p) for p in parts)
    return Shape(etype, dims, (), layout, dynamic), m.end()


def balanced(s: str) -> bool:
    """True when the brackets of ``s`` (outside string literals) balance out."""
    if s.count("{") == s.count("}") and s.count("(") == s.count(")") and s.count('"') % 2 == 0:
        return True  # fast path; strings holding brackets are checked below
    bare = _STRING_RE.sub("", s)
    depth = sum(bare.count(c) for c in "{[(") - sum(bare.count(c) for c in "}])")
    return depth <= 0 and (s.count('"') - s.count('\\"')) % 2 == 0
