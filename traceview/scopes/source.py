"""The text of source lines named by HLO metadata, when the file is on this disk (bounded reads)."""

from __future__ import annotations

from pathlib import Path

MAX_FILE_BYTES = 8 << 20      # a larger "source file" is not read
MAX_LINE_CHARS = 240


def _lines(path: str, cache: dict[str, list[str] | None]) -> list[str] | None:
    if path not in cache:
        try:
            p = Path(path)
            cache[path] = (p.read_text(encoding="utf-8", errors="replace").splitlines()
                           if p.is_file() and p.stat().st_size <= MAX_FILE_BYTES else None)
        except (OSError, ValueError):
            cache[path] = None
    return cache[path]


def is_line(path: tuple) -> bool:
    """Whether a by-source path ends at a line: (file, line) or (file, function, line)."""
    return len(path) >= 2 and path[-1].isdigit()


def line_texts(paths: list[tuple]) -> list[str | None]:
    """For line paths (file first, line last) the stripped text of that line (None when not readable);
    None for file and function nodes."""
    cache: dict[str, list[str] | None] = {}
    out: list[str | None] = []
    for path in paths:
        text = None
        if is_line(path):
            lines = _lines(path[0], cache)
            n = int(path[-1])
            if lines is not None and 1 <= n <= len(lines):
                text = lines[n - 1].strip()[:MAX_LINE_CHARS]
        out.append(text)
    return out
