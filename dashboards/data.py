"""Loading for the dashboard: parse a trace once, re-target it without re-parsing.

Streamlit re-executes the app on every click, so the parsed profile and its
analysis live in `st.cache_resource`, keyed by the files' paths, sizes and
modification times (a re-captured trace is read again) plus the run and
options. A target change goes through `apply_target` on that cached
analysis, which returns a copy. The numbers shown always come from
`traceview.render.report` (the JSON contract), so the page and the CLI agree.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import streamlit as st

from traceview.analysis import Analysis, apply_target, build_analysis
from traceview.errors import UserError
from traceview.hardware.chips import Chip
from traceview.hardware.database import get_chip, load_hardware
from traceview.load import load_profile
from traceview.parsers.discover import Run, find_run, is_trace_file, list_runs
from traceview.render.report import op_records, summary_record

# The choice in the target box that keeps the chip the analysis was built with.
AS_LOADED = "as loaded"


@dataclass(frozen=True)
class Source:
    """Everything that identifies one analysis in the cache."""

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
    """One analysis as the page shows it: the Analysis plus its JSON-contract records."""

    source: Source
    stamp: tuple             # Source.stamp() when loaded
    analysis: Analysis
    ops: pd.DataFrame        # op_records(analysis.ops) as a frame: the CLI's JSON `ops`, in us
    summary: dict            # summary_record(analysis): the CLI's JSON `summary`
    target_label: str        # what the target box shows for this view

    @property
    def chip(self) -> Chip | None:
        return self.analysis.target


@st.cache_resource(show_spinner=False, max_entries=4)
def hardware(hardware_file: str | None) -> dict[str, Chip]:
    return load_hardware(hardware_file)


# A parsed 2-million-event trace holds about 1 GB: keep few of them.
@st.cache_resource(show_spinner="Reading the trace...", max_entries=3)
def _base(source: Source, stamp: tuple) -> Analysis:
    profile = load_profile(source.path, run=source.run)
    return build_analysis(profile, target=source.target, hardware_file=source.hardware_file,
                          hlo_path=source.hlo, stage=source.stage or "after")


@st.cache_resource(show_spinner="Re-targeting...", max_entries=16)
def _retargeted(source: Source, stamp: tuple, chip_name: str) -> Analysis:
    chip = get_chip(chip_name, hardware(source.hardware_file))
    return apply_target(_base(source, stamp), chip, detected=False)


@st.cache_resource(show_spinner=False, max_entries=16)
def _view(source: Source, stamp: tuple, chip_name: str) -> View:
    if chip_name == AS_LOADED:
        analysis = _base(source, stamp)
    else:
        analysis = _retargeted(source, stamp, chip_name)
    return View(source=source, stamp=stamp, analysis=analysis, ops=pd.DataFrame(op_records(analysis.ops)),
                summary=summary_record(analysis), target_label=chip_name)


def load_view(source: Source, chip_name: str = AS_LOADED) -> View:
    """The analysis of `source` judged against `chip_name` (AS_LOADED: the chip it was built with).

    Raises UserError (the one-line message the page shows) for bad input.
    """
    return _view(source, source.stamp(), chip_name)


def runs_of(path: str) -> list[Run]:
    """The runs of a log dir, oldest first (UserError when there is no trace)."""
    return list_runs(path)


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
