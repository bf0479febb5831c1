"""What the page draws before any tab needs the full analysis: the header, the target box and the Overview.

All of it comes from the analysis' JSON record (`traceview analyze --format
json`, render.record plus the views' fields), so it can be drawn from a
record stored in the result cache (traceview.cache.results) while the full
analysis, whose tables the other tabs read, is still loading: on a pod of 32
hosts that is the difference between a first page in about a second and one
after the whole analysis (docs/scale.md, "The dashboard's first page").

`traceview dashboard` computes where such a record may be stored
(DashboardConfig.record_keys): the output of `traceview analyze PATH --format
json` with the same options, then the dashboard's own record, which the
server stores once its full analysis is loaded (a second opening of the same
run then finds it). A record is used only when it describes the request the
page opens (same path, same files) and parses as a record of this version;
anything else is a miss, and the page waits for the analysis as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pandas as pd

from traceview.cache import results as resultcache
from traceview.hardware.chips import Chip
from traceview.version import __version__

# What the header and the Overview read from a record: one without them is not used.
_NEEDED = ("source", "devices", "target", "summary", "ops", "warnings", "advice")


@dataclass(frozen=True)
class ChipTraits:
    """What the page says of the target chip: its name, and what names the resource an op hits
    (overview.resource_name): its kind, the dtypes it has a peak for, the dtype each other dtype borrows its
    peak from, and its link's type."""

    name: str
    kind: str
    peak_dtypes: frozenset[str]
    dtype_fallbacks: tuple[tuple[str, str], ...]    # (dtype class, the class whose peak it uses)
    link: str | None

    def fallback(self, klass: str) -> str | None:
        return dict(self.dtype_fallbacks).get(klass)


def traits_of(chip: Chip) -> ChipTraits:
    return ChipTraits(name=chip.name, kind=chip.kind, peak_dtypes=frozenset(chip.peak_flops),
                      dtype_fallbacks=tuple(sorted((k, v[0]) for k, v in chip.dtype_fallbacks.items())),
                      link=chip.interconnect.type if chip.interconnect is not None else None)


def traits_from_record(target: dict[str, Any], db: dict[str, Chip]) -> ChipTraits:
    """The record's ``target``: its name, kind and peaks as analysed (a trace may state its own peaks); the
    fallbacks and link from the hardware table's chip of that name, which the analysis judged with (a chip
    the table does not hold, built from the trace's own figures, has neither)."""
    known = db.get(target["name"])
    table = traits_of(known) if known is not None else None
    return ChipTraits(name=target["name"], kind=target["kind"], peak_dtypes=frozenset(target["peak_flops"]),
                      dtype_fallbacks=table.dtype_fallbacks if table is not None else (),
                      link=table.link if table is not None else None)


@dataclass(eq=False)
class Front:
    """One analysis as the header and the Overview draw it. ``key`` names the analysis (request, files'
    stamp, target label): a stored record and the loaded analysis of the same inputs share it."""

    record: dict[str, Any]
    chip: ChipTraits | None
    key: tuple

    @property
    def summary(self) -> dict[str, Any]:
        return self.record["summary"]

    @property
    def detected(self) -> bool:
        return bool((self.record.get("target") or {}).get("detected"))

    @property
    def executions(self) -> int:
        """Device op executions: the ops' occurrences (every execution is one occurrence of its op)."""
        return sum(int(op.get("occurrences") or 0) for op in self.record["ops"])

    @cached_property
    def ops(self) -> pd.DataFrame:
        """The record's ``ops`` as ``traceview.Analysis.ops`` holds them."""
        return pd.DataFrame.from_records(self.record["ops"])


def from_analysis(record: dict[str, Any], chip: Chip | None, key: tuple) -> Front:
    return Front(record=record, chip=traits_of(chip) if chip is not None else None, key=key)


def stored(keys: list[str], path: str, files: list[str], db: dict[str, Chip], key: tuple) -> Front | None:
    """The first record stored under ``keys`` that describes ``path`` and exactly ``files``, or None."""
    for name in keys:
        record = _stored_record(name)
        if record is None:
            continue
        source = record["source"]
        if source.get("path") != path or source.get("files") != files:
            continue
        target = record["target"]
        try:
            chip = traits_from_record(target, db) if target is not None else None
        except (KeyError, TypeError, AttributeError):
            continue
        return Front(record=record, chip=chip, key=key)
    return None


def _stored_record(name: str) -> dict[str, Any] | None:
    entry = resultcache.get(name)
    if entry is None or entry.exit_code != 0 or len(entry.texts) != 1:
        return None
    try:
        record = json.loads(entry.texts[0])
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("traceview_version") != __version__ or \
            any(k not in record for k in _NEEDED) or not isinstance(record["source"], dict):
        return None
    return record


def store(name: str, text: str) -> bool:
    """Keep the analyze JSON ``text`` of a loaded analysis under the dashboard's own key."""
    return resultcache.put(name, resultcache.Entry(texts=[text], stderr="", exit_code=0))
