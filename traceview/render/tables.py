"""Plain-text and Markdown tables, for terminal and pull-request output."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

from traceview.render.escape import colour_mark, markdown_text, strip_colour_marks, terminal_text

ANSI = {"red": "31", "green": "32", "yellow": "33", "blue": "34", "magenta": "35",
        "cyan": "36", "grey": "90", "bold": "1"}


def use_colour(stream=None) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set."""
    stream = stream or sys.stdout
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def colour(text: str, name: str | None, enabled: bool) -> str:
    """`text` coloured: marked with traceview's own colour markers, which the report's final pass
    (render.escape.terminal_lines) turns into colour codes."""
    if not enabled or not name:
        return text
    return f"{colour_mark(ANSI[name])}{text}{colour_mark('0')}"


_SGR = re.compile(r"\x1b\[[0-9;]*m")


def _visible_len(text: str) -> int:
    """Columns `text` takes: colour markers and codes take none (a stray ESC counts as a character)."""
    return len(_SGR.sub("", strip_colour_marks(text)))


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
               align: str | None = None) -> str:
    """Columns padded to width; `align` is one char per column, 'l' or 'r'."""
    align = align or "l" * len(headers)
    # Names come from traces: no control sequence of theirs reaches the terminal; our colours stay markers
    # (made colour codes by the report's final pass).
    rows = [[terminal_text(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], _visible_len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i, cell in enumerate(cells):
            pad = " " * (widths[i] - _visible_len(cell))
            parts.append(pad + cell if align[i] == "r" else cell + pad)
        return "  ".join(parts).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out.extend(line(row) for row in rows)
    return "\n".join(out)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
                   align: str | None = None) -> str:
    align = align or "l" * len(headers)
    rule = ["---:" if a == "r" else "---" for a in align]
    esc = markdown_text  # every cell is literal text: no |, line break, HTML or Markdown syntax of its own
    lines = ["| " + " | ".join(esc(h) for h in headers) + " |", "| " + " | ".join(rule) + " |"]
    lines.extend("| " + " | ".join(esc(c) for c in row) + " |" for row in rows)
    return "\n".join(lines)
