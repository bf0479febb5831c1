"""Trace-event JSON text -> its list of events, bounded and safe on hostile text.

A trace JSON is read whole with :func:`json.loads`, whose objects cost far more
than their text: a 53-byte event becomes about 600 bytes of dicts and columns,
and an empty object ``{}`` 72 bytes for 3 bytes of text. So three bounds come
before the decoder runs, each a one-line error naming the file: the
decompressed size (:data:`JSON_LIMIT`), the number of JSON values, counted as
the commas, objects and arrays in the text (:data:`MAX_VALUES`: any value but
the first of an array or object follows a comma, so this is an upper bound), and,
once decoded, the number of events (:data:`MAX_EVENTS`).

Strings never raise: invalid UTF-8 is replaced (U+FFFD), control characters
inside strings are kept (the renderers escape names), and a lone surrogate
escape (``"\\ud800"``, which no UTF-8 output can hold) becomes U+FFFD while a
valid surrogate pair stays the character it encodes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from traceview.errors import TraceError
from traceview.parsers.compressed import read_limited

# Decompressed JSON text read at most.
JSON_LIMIT = 512 << 20
# JSON values decoded at most (commas + objects + arrays in the text): about 2.4 GB of Python objects at worst.
MAX_VALUES = 32_000_000
# Events decoded at most: beyond, the columns built from them pass a few GB (read the .xplane.pb instead).
MAX_EVENTS = 4_000_000

# An escaped backslash (kept, so the `u` after it is no escape), a surrogate pair (kept), or a lone surrogate.
_SURROGATE_ESCAPE = re.compile(
    r"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_ANY_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_ESCAPE_LENGTH = 6


def load_events(path: str | Path) -> list[dict]:
    """The events (the dicts among them) of a trace JSON file, in file order; TraceError on unusable input."""
    doc = _decode(path)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TraceError(f"{path}: not a trace-event JSON file (no traceEvents list)")
    if len(events) > MAX_EVENTS:
        raise TraceError(f"{path}: {len(events):,} trace events, more than the {MAX_EVENTS:,} read from JSON "
                         "(read the run's .xplane.pb instead)")
    return [e for e in events if type(e) is dict]


def _decode(path: str | Path):
    raw = read_limited(path, limit=JSON_LIMIT, error=TraceError, what="trace JSON")
    if not raw or raw.isspace():
        raise TraceError(f"{path}: file is empty")
    values = raw.count(b",") + raw.count(b"{") + raw.count(b"[")
    if values > MAX_VALUES:
        raise TraceError(f"{path}: trace JSON of about {values:,} values, more than the {MAX_VALUES:,} read "
                         "(read the run's .xplane.pb instead)")
    text = raw.decode("utf-8", errors="replace").removeprefix("\ufeff")
    del raw
    text = replace_lone_surrogates(text)
    try:
        return json.loads(text, strict=False)
    except RecursionError:
        raise TraceError(f"{path}: not readable trace JSON (nested too deeply)") from None
    except ValueError as exc:
        raise TraceError(f"{path}: not readable trace JSON ({' '.join(str(exc).split())[:200]})") from None


def replace_lone_surrogates(text: str) -> str:
    """JSON text with each lone surrogate escape (``\\ud800`` not part of a pair) replaced by ``\\ufffd``."""
    if _ANY_SURROGATE.search(text) is None:
        return text
    return _SURROGATE_ESCAPE.sub(lambda m: "\\ufffd" if len(m[0]) == _LONE_ESCAPE_LENGTH else m[0], text)


def event_times(values: list) -> np.ndarray:
    """Event times (``ts``, ``dur``) as float64 microseconds: JSON numbers only (NaN for a string, a boolean,
    null, a container, or an integer too large to be a time)."""
    return np.array([v if type(v) is float else float(v) if type(v) is int and -(1 << 62) < v < 1 << 62
                     else np.nan for v in values], dtype=np.float64)
