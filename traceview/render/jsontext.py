"""JSON text as ``json.dumps(obj, indent=1)`` writes it, byte for byte, in a fraction of the time.

The standard library's C encoder only serves compact output; with an indent
every value goes through its pure-Python generator, several times slower
(docs/scale.md, "Measuring", has the figures). Each container
is one join over its items; a table (a list of dicts with one key order, as
the reports' ops and steps are) is written column by column, a column of
numbers by the C encoder at once, each row one %-format. Strings, floats and
integers are written by the functions the standard library uses
(``encode_basestring_ascii``, ``float.__repr__``, ``int.__repr__``), so the
text is the same: tests/unit/test_jsontext.py compares the two on generated documents.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from json.encoder import encode_basestring_ascii as _string
from typing import Any

_INFINITY = float("inf")


def dumps(obj: object) -> str:
    """``json.dumps(obj, indent=1)``: dicts, lists and tuples of str, int, float, bool and None.

    Raises TypeError for anything else (as json.dumps does), and ValueError for a
    container nested more deeply than Python's recursion allows.
    """
    try:
        return _value(obj, "\n")
    except RecursionError:
        raise ValueError("JSON document nested too deeply") from None


def chunks(obj: object, end: str = "") -> Iterator[str]:
    """The text of ``dumps(obj)``, then ``end``, in pieces: each container that holds another opened item by
    item (a table's rows in batches), each container of scalars whole. A caller that writes the pieces as they
    come never holds the whole text, nor every item's text at once: a pod's report of thousands of hosts is
    megabytes of text, and a list of its pieces several times that (docs/scale.md).

    Raises as :func:`dumps` does, before or while yielding."""
    try:
        yield from _pieces(obj, "\n")
    except RecursionError:
        raise ValueError("JSON document nested too deeply") from None
    if end:
        yield end


def _pieces(o: object, newline: str) -> Iterator[str]:
    """The text of :func:`_value` (o, newline) in pieces."""
    values: Iterable[object] = ()
    if type(o) is dict:
        values = o.values()
    elif type(o) is list or type(o) is tuple:
        values = o
    if not any(type(v) in _OPENED for v in values):     # a scalar, or a container of scalars (or subclasses)
        yield _value(o, newline)
        return
    inner = newline + " "
    separator = inner
    if isinstance(o, dict):
        yield "{"
        for k, v in o.items():
            yield separator + (_string(k) if type(k) is str else _key(k)) + ": "
            yield from _pieces(v, inner)
            separator = "," + inner
        yield newline + "}"
        return
    assert isinstance(o, (list, tuple))
    yield "["
    rows = len(o) >= _ROWS_FROM and _rows(o, inner)
    if rows:
        for start in range(0, len(rows), _ROWS_PER_PIECE):
            yield separator + ("," + inner).join(rows[start:start + _ROWS_PER_PIECE])
            separator = "," + inner
    else:
        for v in o:
            yield separator
            yield from _pieces(v, inner)
            separator = "," + inner
    yield newline + "]"


def _scalar(o: object) -> str | None:
    """The text of a scalar, None for a container."""
    if isinstance(o, str):
        return _string(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return _float(o)
    if isinstance(o, (list, tuple, dict)):
        return None
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _float(o: float) -> str:
    if o != o:
        return "NaN"
    if o == _INFINITY:
        return "Infinity"
    if o == -_INFINITY:
        return "-Infinity"
    return float.__repr__(o)


def _key(k: object) -> str:
    """A key's text: a string as it is, a number, bool or None as the quoted text of that scalar."""
    if isinstance(k, str):
        return _string(k)
    if k is None or isinstance(k, (int, float)):
        return _string(_scalar(k) or "")
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")


# Writers by exact type: one dictionary lookup per value (subclasses take the isinstance path).
_WRITE: dict[type, Callable[[Any], str]] = {
    str: _string, float: _float, int: int.__repr__, bool: lambda o: "true" if o else "false", type(None): lambda o: "null"}
# Scalars the C encoder writes as the indented path does, none of them with a comma in its text.
_PLAIN = {float, int, bool, type(None)}
_ROWS_FROM = 8          # lists this long of dicts with one key order are written column by column
_OPENED = (dict, list, tuple)   # chunks(): the containers it writes item by item
_ROWS_PER_PIECE = 512   # chunks(): a table's rows joined this many at a time


def _value(o: object, newline: str) -> str:
    """The text of ``o`` whose first line is already indented; ``newline`` is a newline and the indent of o's line."""
    text = _scalar(o)
    if text is not None:
        return text
    inner = newline + " "
    write = _WRITE.get
    if isinstance(o, dict):
        if not o:
            return "{}"
        items = [(_string(k) if type(k) is str else _key(k)) + ": " +
                 ((w := write(type(v))) and w(v) or _value(v, inner)) for k, v in o.items()]
        return "{" + inner + ("," + inner).join(items) + newline + "}"
    assert isinstance(o, (list, tuple))
    if not o:
        return "[]"
    items = (len(o) >= _ROWS_FROM and _rows(o, inner)) or [(w := write(type(v))) and w(v) or _value(v, inner)
                                                             for v in o]
    return "[" + inner + ("," + inner).join(items) + newline + "]"


def _rows(rows: list | tuple, newline: str) -> list[str] | None:
    """Each row's text when every row is a dict with the same keys in the same order (a table: the reports'
    ops and steps), else None. Column by column: a column of numbers is written by the C encoder at once,
    and each row is one %-format of its column texts."""
    first = rows[0]
    if type(first) is not dict or not first:
        return None
    keys = list(first)
    if any(type(r) is not dict or list(r) != keys for r in rows):
        return None
    inner = newline + " "
    columns = [_column(c, inner) for c in zip(*(r.values() for r in rows))]
    template = "{" + inner + ("," + inner).join(_key(k).replace("%", "%%") + ": %s" for k in keys) + newline + "}"
    return [template % values for values in zip(*columns)]


def _column(values: tuple, newline: str) -> list[str]:
    """The texts of one column's values, each to sit on a line indented as ``newline`` says."""
    kinds = set(map(type, values))
    if kinds <= _PLAIN:
        return json.dumps(values, separators=(",", ":"))[1:-1].split(",")
    if kinds == {str}:
        return list(map(_string, values))
    if kinds == {dict}:
        texts = _rows(values, newline)
        if texts is not None:
            return texts
    write = _WRITE.get
    return [(w := write(type(v))) and w(v) or _value(v, newline) for v in values]
