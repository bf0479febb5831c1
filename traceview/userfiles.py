"""Reading the files users hand us (hardware files, check configs, baselines) with one-line errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from traceview.errors import UserError


def _text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read {what} ({getattr(exc, 'strerror', None) or exc})") from None


def read_json(path: str | Path, what: str = "file") -> Any:
    p = Path(path)
    try:
        return json.loads(_text(p, what))
    except json.JSONDecodeError as exc:
        raise UserError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def read_toml(path: str | Path, what: str = "file") -> dict:
    p = Path(path)
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise UserError(f"{p}: reading TOML on Python 3.10 needs the 'tomli' package") from None
    try:
        return tomllib.loads(_text(p, what))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{p}: not valid TOML ({exc})") from None
