"""The text of source lines named by HLO metadata, when the file is on this disk (bounded reads).

A trace names its source files by the paths they had where it was captured. A path that does not
exist here is looked for under the source roots (default: the current folder) by its longest tail
that does: ``/home/ci/repo/model/attn.py`` is found as ``./model/attn.py`` in a checkout of the same
repository. The text is the file's as it is now: an edit since the capture shifts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

MAX_FILE_BYTES = 8 << 20      # a larger "source file" is not read
MAX_LINE_CHARS = 240


MAX_PATH_PARTS = 64            # tails tried per missing file


def resolve_source(path: str, roots: Sequence[Path] = ()) -> Path | None:
    """The file ``path`` names on this disk: itself, else its longest tail under one of ``roots``
    (default: the current folder); None when none exists."""
    try:
        p = Path(path)
        if p.is_file():
            return p
        parts = [part for part in p.parts if part not in ("/", "\\", "..", ".")][-MAX_PATH_PARTS:]
        for k in range(len(parts), 0, -1):
            for root in roots or (Path.cwd(),):
                candidate = Path(root, *parts[-k:])
                if candidate.is_file():
                    return candidate
    except (OSError, ValueError):
        return None
    return None


def _lines(path: str, cache: dict[str, list[str] | None], roots: Sequence[Path]) -> list[str] | None:
    if path not in cache:
        try:
            p = resolve_source(path, roots)
            cache[path] = (p.read_text(encoding="utf-8", errors="replace").splitlines()
                           if p is not None and p.stat().st_size <= MAX_FILE_BYTES else None)
        except (OSError, ValueError):
            cache[path] = None
    return cache[path]


def is_line(path: tuple) -> bool:
    """Whether a by-source path ends at a line: (file, line) or (file, function, line)."""
    return len(path) >= 2 and path[-1].isdigit()


def line_texts(paths: list[tuple], roots: Sequence[Path] = ()) -> list[str | None]:
    """For line paths (file first, line last) the stripped text of that line (None when not readable);
    None for file and function nodes. ``roots``: where to look for files missing at their own path."""
    cache: dict[str, list[str] | None] = {}
    out: list[str | None] = []
    for path in paths:
        text = None
        if is_line(path):
            lines = _lines(path[0], cache, roots)
            n = int(path[-1])
            if lines is not None and 1 <= n <= len(lines):
                text = lines[n - 1].strip()[:MAX_LINE_CHARS]
        out.append(text)
    return out
