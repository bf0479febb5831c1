"""Loading for the dashboard: parse a trace once, re-target it without re-parsing.

Streamlit re-executes the app on every click, so the parsed profile and its
analysis live in `st.cache_resource`, keyed by the files' paths, sizes and
modification times (a re-captured trace is read again) plus the run and
options. A target change goes through `Analysis.retarget` on that cached
analysis, which returns a new one. The numbers shown always come from
`traceview.render.record` (the JSON contract), so the page and the CLI agree.
The header and the Overview draw a `front.Front` (the analysis' JSON record),
which a record stored in the result cache can stand for until the analysis is
loaded (`stored_front`).
"""

from __future__ import annotations

import hashlib
import tempfile
import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd
import streamlit as st

import traceview
from traceview.analysis.build import PipelineResult
from traceview.dashboards.config import DashboardConfig
from traceview.dashboards.front import Front, from_analysis, store, stored
from traceview.errors import UserError
from traceview.hardware.chips import Chip
from traceview.hardware.database import get_chip, load_hardware
from traceview.parsers.discover import Run, find_run, list_runs
from traceview.parsers.layout import is_trace_file
from traceview.render.record import summary_record
from traceview.trace.read import ReadOptions

# The choice in the target box that keeps the chip the analysis was built with.
AS_LOADED = "as loaded"


@dataclass(frozen=True)
class LoadRequest:
    """What the page asks to analyze (trace, run, chip, user files): everything that identifies one
    analysis in the cache."""

    path: str
    run: str | None = None
    hardware_file: str | None = None
    hlo: str | None = None
    stage: str | None = None         # which dumped HLO stage (None: after optimizations)
    target: str | None = None        # chip the base analysis is built for (None: detect)

    def stamp(self) -> tuple:
        """Paths, sizes and mtimes of the run's files: a changed file is a new cache entry."""
        files = find_run(self.path, self.run).files
        return tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)


@dataclass
class View:
    """One analysis as the page shows it: the traceview.Analysis plus its JSON-contract records."""

    request: LoadRequest
    stamp: tuple             # LoadRequest.stamp() when loaded
    result: traceview.Analysis
    ops: pd.DataFrame        # result.ops: the CLI's JSON `ops`, in us
    summary: dict            # summary_record(analysis): the CLI's JSON `summary`
    target_label: str        # what the target box shows for this view

    @property
    def analysis(self) -> PipelineResult:
        """The pipeline's own tables (picoseconds), which the charts and op details read."""
        return self.result.pipeline

    @property
    def chip(self) -> Chip | None:
        return self.result.target

    @cached_property
    def front(self) -> Front:
        """The header's and the Overview's record of this analysis."""
        return from_analysis(self.result.to_json(), self.chip, (self.request, self.stamp, self.target_label))

    @property
    def projected(self) -> str:
        """One sentence for a tab whose figures are judged against a target the trace did not run on, else ""."""
        judged = self.analysis.judged
        if judged is None or judged.measured_on is None:
            return ""
        return (f"Projected: bounds, roofline times, efficiency, gap and gain are judged against "
                f"{judged.chip.name}; times are as measured on {judged.measured_on.name}.")

    @property
    def as_loaded(self) -> traceview.Analysis:
        """The analysis on the chip it was loaded with: views that do not depend on the chip (memory
        peaks) come from it, read once whatever chip the page judges on."""
        return _base(self.request, self.stamp)


@st.cache_resource(show_spinner=False, max_entries=4)
def hardware(hardware_file: str | None) -> dict[str, Chip]:
    return load_hardware(hardware_file)


# A parsed 2-million-event trace holds about 1 GB: keep few of them.
@st.cache_resource(show_spinner="Reading the trace...", max_entries=3)
def _base(request: LoadRequest, stamp: tuple) -> traceview.Analysis:
    # the allocator events read with each host (from the table cache too): the advice weighs the memory view
    result = traceview.load(request.path, run=request.run, target=request.target,
                            hardware_file=request.hardware_file, hlo=request.hlo, stage=request.stage or "after",
                            read_options=ReadOptions(allocator_events=True))
    with _lock:
        _loaded.add((request, stamp))
    return result


# The (request, stamp) pairs whose analysis was loaded in this process: until then, a stored record may draw
# the first page (the cache itself cannot be asked whether it holds an entry without waiting for it).
_loaded: set[tuple] = set()
_lock = threading.Lock()


def loaded(request: LoadRequest, stamp: tuple) -> bool:
    with _lock:
        return (request, stamp) in _loaded


@st.cache_resource(show_spinner="Re-targeting...", max_entries=16)
def _retargeted(request: LoadRequest, stamp: tuple, chip_name: str) -> traceview.Analysis:
    return _base(request, stamp).retarget(get_chip(chip_name, hardware(request.hardware_file)))


# The outermost cached call shows the spinner (Streamlit hides nested ones): the page says what it waits
# for, also while `traceview dashboard`'s warm-up holds this entry's lock.
@st.cache_resource(show_spinner="Reading and analysing the trace...", max_entries=16)
def _view(request: LoadRequest, stamp: tuple, chip_name: str) -> View:
    if chip_name == AS_LOADED:
        result = _base(request, stamp)
    else:
        result = _retargeted(request, stamp, chip_name)
    return View(request=request, stamp=stamp, result=result, ops=result.ops.copy(),
                summary=summary_record(result.pipeline), target_label=chip_name)


def load_view(request: LoadRequest, chip_name: str = AS_LOADED) -> View:
    """The analysis of `request` judged against `chip_name` (AS_LOADED: the chip it was built with).

    Raises UserError (the one-line message the page shows) for bad input.
    """
    return _view(request, request.stamp(), chip_name)


def record_keys(config: DashboardConfig) -> list[str]:
    return [k for k in (config.record_keys or "").split(",") if k]


def stored_front(config: DashboardConfig, request: LoadRequest, stamp: tuple) -> Front | None:
    """The first page of `request` from a record stored in the result cache, when `traceview dashboard`
    found where one may be (config.record_keys: for its opening request only), and one is there."""
    keys = record_keys(config)
    if not keys or request != opening_request(config):
        return None
    return _stored_front(tuple(keys), request, stamp)


@st.cache_resource(show_spinner=False, max_entries=2)
def _stored_front(keys: tuple[str, ...], request: LoadRequest, stamp: tuple) -> Front | None:
    return stored(list(keys), request.path, [f for f, _, _ in stamp], hardware(request.hardware_file),
                        (request, stamp, AS_LOADED))


def store_record(config: DashboardConfig, view: View) -> bool:
    """Keep the loaded analysis' record under the dashboard's own key (the last of config.record_keys), so
    that the next opening of the same inputs draws its first page from it; only while the files are those
    the analysis read."""
    keys = record_keys(config)
    if not keys or view.request.stamp() != view.stamp:
        return False
    from traceview.render import jsontext

    return store(keys[-1], jsontext.dumps(view.result.to_json()) + "\n")


def runs_of(path: str) -> list[Run]:
    """The runs of a log dir, oldest first (UserError when there is no trace)."""
    return list_runs(path)


def default_run(runs: list[Run], wanted: str | None) -> str | None:
    """The run the page opens: the one asked for, else the newest (a single run keeps the name asked for)."""
    names = [r.name for r in runs]
    if len(names) <= 1:
        return wanted
    return wanted if wanted in names else names[-1]


def opening_request(config: DashboardConfig) -> LoadRequest:
    """The LoadRequest the page shows before any widget is touched: what `traceview dashboard` pre-loads."""
    if not config.path:
        raise UserError("no trace path to open")
    return LoadRequest(path=config.path, run=default_run(runs_of(config.path), config.run),
                  hardware_file=config.hardware_file, hlo=config.hlo, stage=config.stage, target=config.target)


def save_upload(name: str, data: bytes) -> Path:
    """Write an uploaded trace to a private temp folder (one per content) and return its path."""
    base = Path(name).name
    if not is_trace_file(Path(base)):
        raise UserError(f"{base}: not a trace file (expected a *.xplane.pb or *.xplane.pb.gz file)")
    if not data:
        raise UserError(f"{base}: the uploaded file is empty")
    digest = hashlib.sha256(data).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / "traceview-uploads" / digest
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / base
    if not path.exists():
        path.write_bytes(data)
    return path
