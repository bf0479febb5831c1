"""Budgets: what CI allows a Diff to change, from defaults, a TOML config file and flags.

Budgets come from defaults, then a TOML config file, then command-line
flags (each later one wins). A timing check fails only when the slowdown is
larger than its budget and, where per-step times give an interval, real: the
interval's lower bound is above zero. Ops below a minimum time per step are
not judged (their timings are mostly noise). Static checks (FLOPs, bytes,
collective bytes per module of an HLO dump) have no noise and compare exactly.

Config file::

    [check]
    max_step_regression = "5%"      # relative, noise-aware
    max_op_regression = "10%"
    max_scope_regression = "10%"    # per named scope (op_name path), noise-aware; off unless set
    min_op_time = "1ms"             # per step; ops below are not judged
    max_flops_increase = "1%"       # static (HLO) checks, per module
    max_bytes_increase = "1%"
    max_collective_increase = "1%"
    confidence = 0.95
    max_peak_memory_increase = "1%" # peak memory per device allocator and per HLO module:
                                    # relative ("1%") or absolute ("256MiB", "1GB")
    max_step_time = "20ms"          # absolute: median step time of NEW
    min_mfu = 0.30                  # absolute: MFU of NEW
    programs = ["jit_init*"]        # gate these programs too (by default only those that run
                                    # every step are gated: regress/gating.py)

    [[check.ops]]                   # first matching rule wins
    pattern = "jit_train_step/ynn_fusion*"   # glob on "module/op" or on the op name
    max_regression = "25%"
    min_time = "0.5ms"

    [[check.ops]]
    pattern = "*copy*"
    ignore = true
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from traceview.config.files import read_toml, validate
from traceview.config.values import as_float
from traceview.errors import UserError
from traceview.units import PS_PER_UNIT


def parse_fraction(value, name: str = "value") -> float:
    """"5%", "0.05" or 0.05 -> 0.05."""
    try:
        if isinstance(value, str):
            text = value.strip()
            result = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            result = as_float(value)     # a TOML integer beyond any float: infinite, refused below
        else:
            raise ValueError
    except ValueError:
        raise UserError(f"{name}: {value!r} is not a fraction (write e.g. 5% or 0.05)") from None
    if not math.isfinite(result) or result < 0:
        raise UserError(f"{name}: {_shown(value)} must be a non-negative fraction")
    return result


def parse_share(value, name: str = "value") -> float:
    """A share of a whole (an MFU): :func:`parse_fraction`, at most 1. ``--min-mfu 30`` means 30%, not 3000%;
    a floor no run can reach would fail every check (exit 1) for what is a typo."""
    share = parse_fraction(value, name)
    if share > 1:
        raise UserError(f"{name}: {_shown(value)} is more than 100% (write e.g. 30% or 0.30)")
    return share


def _shown(value) -> str:
    """A value as an error shows it: a TOML number of 400 digits by its length."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def parse_globs(value, name: str = "value") -> list[str]:
    """["jit_a*", "jit_b"] or "jit_a*,jit_b" -> a list of non-empty globs."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(g, str) for g in items):
        raise UserError(f"{name}: {value!r} is not a list of program names or globs")
    globs = [g.strip() for g in items if g.strip()]
    if not globs:
        raise UserError(f"{name}: {value!r} names no program")
    return globs


def parse_duration_ps(value, name: str = "value") -> float:
    """"1ms", "250us", "0.5 s" -> picoseconds; a bare number is milliseconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number, unit = as_float(value), "ms"     # a TOML integer beyond any float: infinite, refused below
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(ps|ns|us|µs|ms|s)?\s*", value)
        if not m:
            raise UserError(f"{name}: {value!r} is not a duration (write e.g. 1ms, 250us, 2s)")
        try:
            number = float(m.group(1))
        except ValueError:
            raise UserError(f"{name}: {value!r} is not a duration (write e.g. 1ms, 250us, 2s)") from None
        unit = m.group(2) or "ms"
    else:
        raise UserError(f"{name}: {value!r} is not a duration (write e.g. 1ms, 250us, 2s)")
    if not math.isfinite(number) or number < 0:
        raise UserError(f"{name}: {_shown(value)} must be a non-negative duration")
    return number * PS_PER_UNIT[unit]


def parse_time_limit_ps(value, name: str = "value") -> float:
    """An absolute limit on the step time (:func:`parse_duration_ps`), above 0: no step takes no time, so a limit
    of 0 would fail every check (exit 1) for what is a typo."""
    limit = parse_duration_ps(value, name)
    if limit <= 0:
        raise UserError(f"{name}: {_shown(value)} must be a positive duration (write e.g. 20ms)")
    return limit


_BYTE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


@dataclass(frozen=True)
class MemoryBudget:
    """How much a peak may grow: a fraction of the baseline's peak, or a number of bytes."""

    fraction: float | None = None
    bytes: float | None = None

    def limit_for(self, base: float) -> float:
        """The budget as the largest relative change allowed over `base`."""
        if self.bytes is None:
            return float(self.fraction or 0.0)
        return self.bytes / base if base > 0 else (math.inf if self.bytes > 0 else 0.0)

    def __str__(self) -> str:
        return f"+{self.fraction:.1%}" if self.bytes is None else f"+{self.bytes:,.0f} bytes"


def parse_memory_budget(value, name: str = "value") -> MemoryBudget:
    """"1%" or 0.01 (relative), "256MiB", "1 GB", "4096 B" (absolute)."""
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([KMGT]i?B|B)\s*", value, flags=re.IGNORECASE)
        if m:
            try:
                number = float(m.group(1))
            except ValueError:
                number = math.nan
            if not math.isfinite(number) or number < 0:
                raise UserError(f"{name}: {value!r} must be a non-negative size")
            return MemoryBudget(bytes=number * _BYTE_UNITS[m.group(2).lower()])
    try:
        return MemoryBudget(fraction=parse_fraction(value, name))
    except UserError:
        raise UserError(f"{name}: {_shown(value)} is neither a fraction (1%, 0.01) nor a size (256MiB, 1GB)") \
            from None


@dataclass(frozen=True)
class OpRule:
    """A budget for the ops whose "module/op" or op name matches `pattern` (a glob)."""

    pattern: str
    max_regression: float | None = None
    min_time_ps: float | None = None
    ignore: bool = False

    def matches(self, module: str, op: str) -> bool:
        return fnmatch.fnmatchcase(f"{module}/{op}", self.pattern) or fnmatch.fnmatchcase(op, self.pattern)


@dataclass
class Budgets:
    """What a check allows: relative budgets (fractions, 0.05 = 5%), the minimum op time per step that is
    judged, the confidence of the noise intervals, optional absolute limits, and per-op rules (first match wins)."""

    max_step_regression: float = 0.05
    max_op_regression: float = 0.10
    max_scope_regression: float | None = None     # None: scopes are reported, not judged
    min_op_time_ps: float = 1e9
    max_flops_increase: float = 0.01
    max_bytes_increase: float = 0.01
    max_collective_increase: float = 0.01
    confidence: float = 0.95
    max_peak_memory_increase: MemoryBudget = field(default_factory=lambda: MemoryBudget(fraction=0.01))
    max_step_time_ps: float | None = None
    min_mfu: float | None = None
    ops: list[OpRule] = field(default_factory=list)
    programs: list[str] = field(default_factory=list)   # globs of programs gated even if not run every step

    def rule_for(self, module: str, op: str) -> OpRule | None:
        return next((r for r in self.ops if r.matches(module, op)), None)


# config key (and `--flag` of diff/check) -> (Budgets field, parser)
BUDGET_KEYS = {
    "max_step_regression": ("max_step_regression", parse_fraction),
    "max_op_regression": ("max_op_regression", parse_fraction),
    "max_scope_regression": ("max_scope_regression", parse_fraction),
    "min_op_time": ("min_op_time_ps", parse_duration_ps),
    "max_flops_increase": ("max_flops_increase", parse_fraction),
    "max_bytes_increase": ("max_bytes_increase", parse_fraction),
    "max_collective_increase": ("max_collective_increase", parse_fraction),
    "confidence": ("confidence", parse_fraction),
    "max_peak_memory_increase": ("max_peak_memory_increase", parse_memory_budget),
    "max_step_time": ("max_step_time_ps", parse_time_limit_ps),
    "min_mfu": ("min_mfu", parse_share),
    "programs": ("programs", parse_globs),
}
_RULE_KEYS = {"pattern", "max_regression", "min_time", "ignore"}


def load_config(path: str | Path) -> dict:
    """A TOML config -> Budgets field values (only those it sets). Unknown keys are errors, not ignored."""
    p = Path(path)
    data = read_toml(p, "config file")
    section = data.get("check", data)
    if not isinstance(section, dict):
        raise UserError(f"{p}: [check] must be a table")
    return budget_values(section, p)


def budget_values(section: Mapping, where: str | Path) -> dict:
    """The Budgets field values a ``[check]`` table sets, or a dict of the same keys and values from Python
    (``traceview.check(..., budgets={...})``); ``where`` (the file, or "budgets") starts each error."""
    values: dict = {}
    for key, value in section.items():
        if key == "ops":
            values["ops"] = _rules(value, where)
        elif key in BUDGET_KEYS:
            name, parse = BUDGET_KEYS[key]
            values[name] = parse(value, f"{where}: {key}")
        else:
            known = ", ".join(sorted([*BUDGET_KEYS, "ops"]))
            raise UserError(f"{where}: unknown setting {key!r} (known: {known})")
    if "confidence" in values:
        check_confidence(values["confidence"], where)
    validate({"check": dict(section)}, "check-config", where)  # the types the parsers do not judge (ignore = "no")
    return values


def check_confidence(confidence: float, where: str | Path) -> None:
    """The noise intervals need 0 < confidence < 1: at 0 every change is real, at 1 none is."""
    if not 0 < confidence < 1:
        raise UserError(f"{where}: confidence {confidence:g} must be between 0 and 1, e.g. 0.95")


def _rules(value, path: str | Path) -> list[OpRule]:
    if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
        raise UserError(f"{path}: 'ops' must be an array of tables ([[check.ops]])")
    rules = []
    for i, r in enumerate(value):
        unknown = set(r) - _RULE_KEYS
        if unknown:
            raise UserError(f"{path}: ops rule {i + 1}: unknown key(s) {', '.join(sorted(unknown))} "
                            f"(known: {', '.join(sorted(_RULE_KEYS))})")
        if not isinstance(r.get("pattern"), str) or not r["pattern"]:
            raise UserError(f"{path}: ops rule {i + 1} needs a 'pattern' (a glob on module/op or op)")
        where = f"{path}: ops rule {r['pattern']!r}"
        rules.append(OpRule(
            pattern=r["pattern"],
            max_regression=parse_fraction(r["max_regression"], f"{where}: max_regression")
            if "max_regression" in r else None,
            min_time_ps=parse_duration_ps(r["min_time"], f"{where}: min_time") if "min_time" in r else None,
            ignore=bool(r.get("ignore", False))))
    return rules


def make_budgets(config: str | Path | None = None, **overrides) -> Budgets:
    """Defaults, then the config file, then `overrides` (Budgets fields; None means "not given")."""
    values = load_config(config) if config else {}
    values.update({k: v for k, v in overrides.items() if v is not None})
    unknown = set(values) - {f.name for f in dataclasses.fields(Budgets)}
    if unknown:
        raise TypeError(f"unknown budget(s): {', '.join(sorted(unknown))}")
    return Budgets(**values)
