"""CSV writes counts as integers (source_line 90, not 90.0) and leaves unknowns blank."""

from __future__ import annotations

import csv
import io

import pandas as pd

from traceview.cli import main
from traceview.render.analyze import integral_columns_as_int


def test_whole_number_columns_become_integers_and_blanks_stay_blank():
    frame = pd.DataFrame({"source_line": [90.0, None, 12.0], "time_us": [1.5, 2.0, 3.0],
                          "flops": [2.0**40, 0.0, None], "flag": [True, False, True], "name": ["a", "b", "c"]})
    text = integral_columns_as_int(frame).to_csv(index=False)
    assert text.splitlines() == ["source_line,time_us,flops,flag,name",
                                 "90,1.5,1099511627776,True,a",
                                 ",2.0,0,False,b",
                                 "12,3.0,,True,c"]


def test_analyze_csv_writes_source_lines_as_integers(sample_traces, capsys):
    assert main(["analyze", str(sample_traces / "mlp"), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    lines = [r["source_line"] for r in rows if r["source_line"]]
    assert lines and all(v.isdigit() for v in lines)
    assert all(r["occurrences"].isdigit() for r in rows)
