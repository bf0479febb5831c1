"""Reading the files users hand us (hardware files, check configs, baselines) with one-line errors.

Every file is read with bounds (size, nesting depth, number length) and
checked against its JSON schema, published in ``traceview/schemas/`` so CI
users can validate their own files; a mistake is one line naming the file,
the field and what was expected.
"""

from __future__ import annotations

import json
import math
import re
import sys
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from traceview.errors import UserError
from traceview.units import clipped

MAX_FILE_BYTES = 256 << 20   # a baseline or config is kilobytes to a few megabytes
MAX_DEPTH = 64               # no traceview file nests deeper than about 6 levels
MAX_NUMBER_DIGITS = 40       # an int64 has 19 digits; anything longer is not a figure
MAX_MAGNITUDE = 1e30         # above any time (us), size or FLOP count; keeps every unit conversion finite


def _text(path: Path, what: str) -> str:
    try:
        _refuse_special(path, what)
        if path.is_file() and path.stat().st_size > MAX_FILE_BYTES:
            raise UserError(f"{path}: {what} larger than {MAX_FILE_BYTES >> 20} MiB: not a traceview {what}")
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read {what} ({getattr(exc, 'strerror', None) or exc})") from None


def _refuse_special(path: Path, what: str) -> None:
    """A FIFO, socket or device named as a file: reading a FIFO waits for a writer that may never come, and
    /dev/null reads as an empty file, which is no file the user meant. A folder is left to the read's own error."""
    if path.exists() and not path.is_file() and not path.is_dir():
        from traceview.parsers.discover import kind_of

        raise UserError(f"{path}: {kind_of(path)}: give a {what}")


_BRACKETS = re.compile(r'"(?:[^"\\\n]|\\.)*"|[\[\]{}]')


def _depth_problem(text: str) -> int | None:
    """The line where brackets outside strings nest deeper than MAX_DEPTH, or None (one pass, no recursion)."""
    depth = 0
    for m in _BRACKETS.finditer(text):
        ch = m.group()
        if ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return text.count("\n", 0, m.start()) + 1
        elif ch in "]}":
            depth -= 1
    return None


class _BadNumber(ValueError):
    pass


def _int(text: str) -> int | float:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise _BadNumber(f"a {len(text)}-digit number")
    value = int(text)
    if abs(value) > MAX_MAGNITUDE:
        raise _BadNumber(f"{text[:20]} is out of range")
    return value


def _float(text: str) -> float:
    if len(text) > 4 * MAX_NUMBER_DIGITS:
        raise _BadNumber(f"a {len(text)}-character number")
    value = float(text)
    if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
        raise _BadNumber(f"{text[:20]} is out of range")
    return value


def _constant(name: str) -> float:
    raise _BadNumber(f"{name} is not a number JSON allows")


def read_json(path: str | Path, what: str = "file") -> Any:
    from traceview.parsers.trace_json.text import replace_lone_surrogates

    p = Path(path)
    text = replace_lone_surrogates(_text(p, what))   # a "\ud800" escape: U+FFFD, which any output can write
    line = _depth_problem(text)
    if line is not None:
        raise UserError(f"{p}: not a traceview {what}: nested more than {MAX_DEPTH} levels deep (line {line})")
    try:
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise UserError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except _BadNumber as exc:
        raise UserError(f"{p}: not a usable number in the JSON: {exc}") from None
    except RecursionError:
        raise UserError(f"{p}: not a traceview {what}: nested too deeply") from None


def read_toml(path: str | Path, what: str = "file") -> dict:
    p = Path(path)
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise UserError(f"{p}: reading TOML on Python 3.10 needs the 'tomli' package") from None
    text = _text(p, what)
    line = _depth_problem(text)
    if line is not None:
        raise UserError(f"{p}: not a traceview {what}: nested more than {MAX_DEPTH} levels deep (line {line})")
    try:
        data = tomllib.loads(text, parse_float=_float)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{p}: not valid TOML ({exc})") from None
    except (ValueError, RecursionError) as exc:  # a number Python will not convert, or nesting
        raise UserError(f"{p}: not a usable TOML {what} ({str(exc)[:100]})") from None
    return data


# ---------------------------------------------------------------------------- schemas

SCHEMAS = ("analyze", "hlo", "check", "check-config", "hardware", "parallelism")


@cache
def schema(name: str) -> dict:
    """The published JSON schema ``traceview/schemas/<name>.schema.json``."""
    text = resources.files("traceview").joinpath(f"schemas/{name}.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def _field(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, (dict, list)) else \
        ("an object" if isinstance(value, dict) else "a list")
    return clipped(text, 60)


_TYPE_WORDS = {"string": "a string", "number": "a number", "integer": "an integer", "boolean": "true or false",
               "object": "an object (table)", "array": "a list", "null": "null"}


def _expected(error) -> str:
    v, arg = error.validator, error.validator_value
    if v == "type":
        types = arg if isinstance(arg, list) else [arg]
        return " or ".join(str(_TYPE_WORDS.get(t, t)) for t in types)
    if v == "oneOf":
        return error.schema.get("description") or "one of the allowed forms"
    if v == "enum":
        return "one of " + ", ".join(json.dumps(a) for a in arg)
    if v == "exclusiveMinimum" and arg == 0:
        return "a positive number"
    if v in ("minimum", "exclusiveMinimum"):
        return f"a number {'>=' if v == 'minimum' else '>'} {arg}"
    if v == "minLength":
        return "a non-empty string"
    if v == "pattern":
        return error.schema.get("description") or f"text matching {arg}"
    return error.message


def validate(data: Any, name: str, path: str | Path, subschema: str | None = None) -> None:
    """Raise UserError (file, field, expectation) when `data` does not follow schema `name`.

    `subschema` picks one of the schema's ``$defs`` alternatives by JSON pointer
    (e.g. ``"/oneOf/2"``) for files normalized before checking.
    """
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - a core dependency
        return
    root = schema(name)
    target = root
    if subschema:
        for part in subschema.strip("/").split("/"):
            target = target[int(part)] if isinstance(target, list) else target[part]
        target = {**target, "$defs": root.get("$defs", {})}
    validator = jsonschema.Draft202012Validator(target)
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is None:
        return
    field = _field(error.absolute_path)
    if error.validator == "required":
        raise UserError(f"{path}: {error.message.replace(' is a required property', '')} is missing"
                        f"{'' if field == '(top level)' else ' in ' + field} ({root.get('title', name)})")
    if error.validator == "additionalProperties":
        raise UserError(f"{path}: {field}: {error.message}")
    raise UserError(f"{path}: {field}: expected {_expected(error)}, got {_shown(error.instance)}")
