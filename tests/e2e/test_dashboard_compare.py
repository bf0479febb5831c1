"""The Compare tab: the diff report without raw HTML tags, and no colour for no change."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")

from streamlit.testing.v1 import AppTest  # noqa: E402

from traceview.dashboards.compare import delta_colour, without_html_blocks  # noqa: E402
from traceview.dashboards.config import DashboardConfig, from_env  # noqa: E402
from traceview.dashboards.tabs import TAB_KEY  # noqa: E402


def test_details_blocks_become_bold_headings():
    text = "# diff\n\n<details><summary>3 checks within budget</summary>\n\n| a |\n\n</details>\n"
    out = without_html_blocks(text)
    assert "<" not in out and "**3 checks within budget**" in out and "| a |" in out


def test_no_change_is_grey_and_a_change_is_coloured():
    assert delta_colour(0.0) == "off" and delta_colour(0.00004) == "off" and delta_colour(None) == "off"
    assert delta_colour(0.02) == "inverse" and delta_colour(-0.02) == "inverse"


@pytest.mark.slow
def test_compare_tab_with_itself_shows_no_tags_and_no_red(sample_traces, monkeypatch):
    from pathlib import Path

    import traceview.dashboards

    for key in list(from_env().to_env()):
        monkeypatch.delenv(key, raising=False)
    for key, value in DashboardConfig(path=str(sample_traces / "mlp")).to_env().items():
        monkeypatch.setenv(key, value)
    app = Path(traceview.dashboards.__file__).resolve().parent / "app.py"
    at = AppTest.from_file(str(app), default_timeout=300)
    at.run()
    at.session_state[TAB_KEY] = "Compare"      # as a click on the tab: only the open tab's content runs
    at.run()
    at.text_input(key="compare_path").set_value(str(sample_traces / "mlp")).run()
    assert not at.exception and not at.error
    assert not any("<details>" in m.value or "<summary>" in m.value for m in at.markdown)
    from streamlit.proto.Metric_pb2 import Metric

    [step] = [m for m in at.metric if m.label == "median step (new)"]
    assert step.proto.delta == "0.0%"                     # the same trace on both sides
    assert step.proto.color == Metric.MetricColor.Value("GRAY")
