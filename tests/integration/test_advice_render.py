"""The advice blocks in the analyze report: hostile names (a trace's host events, op names) escaped in
the terminal and Markdown reports; the JSON keeps them as they are."""

from __future__ import annotations

import pandas as pd

import traceview
from traceview.advice.findings import Advice, ranked
from traceview.advice.idle import CAUSES, IdleCauses
from traceview.advice.stragglers import Stragglers
from traceview.advice.view import AdviceReport
from traceview.render.advice import add_advice_record, advice_sections
from traceview.render.analyze import analysis_markdown, analysis_text

EVIL = "\x1b[2J\x1b]0;owned\x07 | `tick` *star* <b>"      # clear screen, set the window title


def hostile_report() -> AdviceReport:
    idle = IdleCauses(idle_ps=100, causes={c: (100 if c == "host" else 0) for c in CAUSES},
                      evidence={"host": [{"name": EVIL, "time_ps": 100, "source": "host"}]},
                      per_device=pd.DataFrame({"device": ["h/TPU:0"], "idle_ps": [100],
                                               **{f"{c}_ps": [100 if c == "host" else 0] for c in CAUSES}}))
    items = ranked([Advice("op", f"op {EVIL} (jit_f): memory-bound", 50.0, "roofline", (f"measured {EVIL}",),
                           fix="fuse it"), Advice("memory", "memory: headroom", None, "peak / capacity")], 1000)
    return AdviceReport(idle=idle, stragglers=Stragglers(reason="one device: no straggler to find"), items=items,
                        span_ps=1000.0, active_devices=1)


def test_hostile_names_are_escaped_in_the_reports(sample_traces) -> None:
    pipeline = traceview.load(sample_traces / "mlp").pipeline
    sections = advice_sections(hostile_report())
    text = analysis_text(pipeline, colour_enabled=False, sections=sections)
    assert "\x1b[2J" not in text and "\x1b]0" not in text and "\x07" not in text
    assert "What to fix first" in text and "1. [op] op " in text and "2. [memory]" in text
    assert "saving not estimated" in text and "saves up to" in text
    markdown = analysis_markdown(pipeline, sections=sections)
    assert "\x1b" not in markdown and "`tick`" not in markdown and "\\|" in markdown
    record: dict = {"summary": {}}
    add_advice_record(record, hostile_report())
    assert record["advice"][0]["title"] == f"op {EVIL} (jit_f): memory-bound"
    assert record["advice"][0]["saving_share"] == 0.05 and record["advice"][1]["saving_us"] is None
    assert record["summary"]["idle_causes"][0] == {"cause": "host", "time_us": 100 / 1e6, "share": 1.0,
                                                    "evidence": [{"name": EVIL, "time_us": 100 / 1e6,
                                                                  "source": "host"}]}
    assert record["summary"]["stragglers"] == {"device": None, "reason": "one device: no straggler to find"}
