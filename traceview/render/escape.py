"""Names from traces made safe for each output format (Markdown, XML, terminals).

Op, module, thread and file names come from the profiled program and its
compiler; they may hold anything: ``|``, newlines, HTML, Markdown link and
image syntax, terminal escape sequences, characters XML forbids.
"""

from __future__ import annotations

import re
import secrets

# C0 and C1 control characters (tab and newline included: a name never needs them) and DEL.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# traceview's own colours (render.tables.colour) travel through the report as markers no name can carry:
# private-use characters around a nonce drawn per process, then a colour number. Only the final pass
# (terminal_lines, or terminal_text with keep_colour) turns them into colour codes; every ESC a name
# brings is shown as text, whatever sequence follows it.
_NONCE = secrets.token_hex(8)
_OWN_MARK = re.compile("\ue000" + _NONCE + r"(\d{1,2})\ue001")
# Characters XML 1.0 forbids anywhere in a document.
_XML_FORBIDDEN = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# Markdown syntax characters: backslash-escaped so a name renders as its own text.
# ``_`` only where it could open or close emphasis (GitHub ignores it between letters: ``jit_train_step``).
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~#!$]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])|^[+=-])")
# Bare URLs GitHub and Streamlit would turn into links: an invisible word joiner breaks the pattern.
_AUTOLINK = re.compile(r"(?i)[a-z][a-z0-9+.\-]*://|www\.")
_MD_ORDERED = re.compile(r"^(\d+)([.)])")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}


def _visible(ch: str) -> str:
    return "\\n" if ch == "\n" else "\\t" if ch == "\t" else f"\\x{ord(ch):02x}"


def colour_mark(code: str) -> str:
    """The marker of traceview's own colour `code` (an SGR number: "31", "0"), made a colour code by
    :func:`terminal_lines` / ``terminal_text(keep_colour=True)``; a name cannot forge it."""
    return f"\ue000{_NONCE}{code}\ue001"


def strip_colour_marks(text: str) -> str:
    """`text` without traceview's colour markers (what it shows, for widths)."""
    return _OWN_MARK.sub("", text)


def terminal_text(text: object, keep_colour: bool = False) -> str:
    """`text` with every control character shown as ``\\xNN`` (so no escape sequence reaches the terminal).

    With `keep_colour`, traceview's own colour markers (:func:`colour_mark`) become plain colour codes
    (they only colour text; no cursor movement, title, hyperlink or clearing); without, they stay markers
    for the final pass. A colour sequence inside a name is always shown as text.
    """
    s = _CONTROL.sub(lambda m: _visible(m.group()), str(text))
    return _OWN_MARK.sub(lambda m: f"\x1b[{m[1]}m", s) if keep_colour else s


def terminal_lines(text: str) -> str:
    """A whole report for a terminal: line breaks kept, every other control character made visible."""
    return "\n".join(terminal_text(line, keep_colour=True) for line in text.split("\n"))


def markdown_text(text: object) -> str:
    """`text` as literal Markdown (GitHub, Streamlit): one line, no HTML, no link, image or emphasis syntax."""
    s = str(text)
    s = _CONTROL.sub(lambda m: " " if m.group() in "\n\r\t" else "", s)
    s = "".join(_HTML.get(ch, ch) for ch in s)
    s = _MD_SPECIAL.sub(r"\\\1", s)
    s = _AUTOLINK.sub(lambda m: m.group()[:-3] + "\u2060://" if m.group().endswith("://") else m.group()[:-1] + "\u2060.", s)
    return _MD_ORDERED.sub(r"\1\\\2", s)


def markdown_code(text: object) -> str:
    """`text` inside an inline code span: backticks and line breaks cannot end it early."""
    s = _CONTROL.sub(lambda m: " " if m.group() in "\n\r\t" else "", str(text))
    longest = max((len(run) for run in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def xml_text(text: object) -> str:
    """`text` without the characters XML 1.0 forbids (ElementTree escapes ``<>&"`` itself)."""
    return _XML_FORBIDDEN.sub("", str(text))
