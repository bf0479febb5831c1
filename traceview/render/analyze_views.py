"""The views' parts of ``traceview analyze``: their fields in the JSON record and their blocks in the text and
Markdown reports (what to fix first, idle causes, stragglers, where in the model, serving), and the mesh's
one-line summary. Each takes the views' typed reports; ``traceview.Analysis`` builds them on first use."""

from __future__ import annotations

import dataclasses
from typing import Any

from traceview.advice.view import AdviceReport
from traceview.analysis.build import PipelineResult
from traceview.inference.view import InferenceReport
from traceview.parallelism.report import Parallelism
from traceview.render.advice import add_advice_record, advice_sections
from traceview.render.analyze import Section, projected_label
from traceview.render.inference import inference_json, section_lines
from traceview.render.parallelism import summary_line
from traceview.render.record import analysis_json, summary_record
from traceview.render.scopes import node_record, top_scope_lines
from traceview.scopes.tree import ScopeTree

TOP_SCOPES = 3      # the scopes with most gain the summary names


def analyze_json(pipeline: PipelineResult, advice: AdviceReport, scopes: ScopeTree,
                 serving: InferenceReport | None) -> dict[str, Any]:
    """What ``traceview analyze --format json`` prints: the pipeline's record, then the views' fields the
    contract names (``inference`` when a program with a KV cache ran, ``summary.top_scopes``, the advice's
    ``summary.idle_causes`` and top-level ``advice``). A fresh record on each call."""
    record = analysis_json(pipeline)
    if serving is not None:
        record["inference"] = inference_json(serving)
    _add_view_fields(record, advice, scopes)
    return record


def analyze_summary(pipeline: PipelineResult, advice: AdviceReport, scopes: ScopeTree) -> dict[str, Any]:
    """The ``summary`` of :func:`analyze_json` alone (the headline numbers), without writing a row per op."""
    record: dict[str, Any] = {"summary": summary_record(pipeline)}
    _add_view_fields(record, advice, scopes)
    return record["summary"]


def _add_view_fields(record: dict[str, Any], advice: AdviceReport, scopes: ScopeTree) -> None:
    """``summary.top_scopes`` and the advice's fields, in the contract's order."""
    record["summary"]["top_scopes"] = top_scopes_json(scopes)
    add_advice_record(record, advice)


def top_scopes_json(tree: ScopeTree, n: int = TOP_SCOPES) -> list[dict[str, Any]]:
    """``summary.top_scopes``: the named scopes whose own ops have the most gain (docs/scopes.md)."""
    return [node_record(row, tree.judged) for row in tree.top_by_gain(n).to_dict("records")]


def report_sections(pipeline: PipelineResult, advice: AdviceReport, scopes: ScopeTree,
                    serving: InferenceReport | None) -> list[Section]:
    """The views' blocks in the ``analyze`` text and Markdown reports, in the order printed: what to fix
    first (with idle causes and stragglers), where in the model, serving."""
    projected = projected_label(pipeline)    # savings judged against a chip the trace did not run on
    sections = [dataclasses.replace(s, title=s.title + projected) if s.title == "What to fix first" else s
                for s in advice_sections(advice)]
    top = scopes.top_by_gain(TOP_SCOPES)
    if not top.empty:
        sections.append(Section(f"Where in the model: scopes with most to gain{projected} (traceview scopes PATH "
                                "for the tree)", tuple(top_scope_lines(top, scopes.total_us, scopes.overlap))))
    if serving is not None:
        sections.append(Section("Inference", tuple(section_lines(serving))))
    return sections


def mesh_line(mesh: Parallelism | None) -> str | None:
    """The one line ``analyze`` prints about the mesh (``parallelism.summary.summarised_mesh``), or None."""
    return None if mesh is None else summary_line(mesh)
