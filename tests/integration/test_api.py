"""The public Python API (docs/api.md): what a notebook user gets from `import traceview`."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import traceview
from traceview.analysis.public import OP_FIELDS
from traceview.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mlp(sample_traces) -> traceview.Analysis:
    return traceview.load(sample_traces / "mlp")


def _cli_json(capsys, *args) -> dict:
    assert main([*map(str, args), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def assert_same_json(a, b, path="$"):
    """Equal JSON documents, floats to 1e-9 relative (sums may run in another order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert list(a) == list(b), path
        for key in a:
            assert_same_json(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_json(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9), path
    else:
        assert a == b, path


def test_every_public_name_resolves():
    for name in traceview.__all__:
        assert getattr(traceview, name) is not None, name
    assert issubclass(traceview.TraceError, traceview.UserError)
    assert issubclass(traceview.HloError, traceview.UserError)
    with pytest.raises(AttributeError):
        traceview.no_such_name  # noqa: B018


def test_import_and_version_load_no_pandas():
    """`import traceview` and `traceview --version` stay cheap: names resolve on first use."""
    code = ("import sys, traceview\n"
            "from traceview.cli import main\n"
            "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('pandas', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_cli_json_equals_to_json(sample_traces, capsys, mlp):
    assert _cli_json(capsys, "analyze", sample_traces / "mlp") == mlp.to_json()


def test_cli_json_equals_to_json_on_another_target(sample_traces, capsys):
    loaded = traceview.load(sample_traces / "transformer", target="tpu-v5p")
    assert _cli_json(capsys, "analyze", sample_traces / "transformer", "--target", "tpu-v5p") == loaded.to_json()


def test_ops_are_the_json_ops(mlp):
    """`ops`: the JSON `ops` as a frame, same fields in the same order, sorted by gap, largest first."""
    records = mlp.to_json()["ops"]
    assert list(mlp.ops.columns) == list(records[0])
    assert set(mlp.ops.columns) <= set(OP_FIELDS.values())
    assert list(mlp.ops["name"]) == [r["name"] for r in records]
    assert list(mlp.ops["self_time_us"]) == pytest.approx([r["self_time_us"] for r in records])
    gains = mlp.ops["gain_us"].dropna().to_list()
    assert gains == sorted(gains, reverse=True)                             # the JSON's order: by gain
    assert mlp.ops["gain_us"].notna().all() or mlp.ops["gain_us"].isna().to_list()[-1]   # unknown gains last


def test_op_executions_add_up_to_the_ops(mlp):
    """One row per execution: per (module, op) the count and self time add up to `ops`."""
    ex = mlp.op_executions
    per_op = ex.groupby(["module", "name"], observed=True).agg(n=("name", "size"), self_us=("self_time_us", "sum"))
    ops = mlp.ops.set_index(["module", "name"])
    assert len(per_op) == len(ops)
    for key, row in per_op.iterrows():
        assert ops.at[key, "occurrences"] == row["n"]
        assert ops.at[key, "self_time_us"] == pytest.approx(row["self_us"], rel=1e-9)
    assert {"start_us", "duration_us", "self_time_us", "step", "device"} <= set(ex.columns)


def test_steps_devices_and_summary_follow_the_json(mlp):
    doc = mlp.to_json()
    assert list(mlp.steps["step"]) == [s["step"] for s in doc["summary"]["steps"]]
    assert list(mlp.steps["time_us"]) == pytest.approx([s["time_us"] for s in doc["summary"]["steps"]])
    assert list(mlp.devices["id"]) == [d["id"] for d in doc["devices"]]
    assert isinstance(mlp.summary, traceview.Summary)
    record = {k: v for k, v in doc["summary"].items() if k != "steps"}
    assert {k: v for k, v in dataclasses.asdict(mlp.summary).items() if k in record} == record
    assert all(v is None for k, v in dataclasses.asdict(mlp.summary).items() if k not in record)


def test_summary_fields_cover_the_json_summary(sample_traces):
    """Every key the JSON summary can hold (steps aside: `Analysis.steps`) is a Summary field, and no more:
    a trace judged on its own chip, one projected onto another, one with no target."""
    fields = {f.name for f in dataclasses.fields(traceview.Summary)}
    seen: set[str] = set()
    for target in (None, "tpu-v5p"):
        doc = traceview.load(sample_traces / "sharded", target=target).to_json()
        keys = set(doc["summary"]) - {"steps"}
        assert keys <= fields, keys - fields
        seen |= keys
    assert seen == fields, fields - seen


def test_retarget_equals_loading_for_that_target_without_reading_again(sample_traces, monkeypatch, mlp):
    expected = traceview.load(sample_traces / "mlp", target="tpu-v5p").to_json()

    def no_reading(*args, **kwargs):
        raise AssertionError("retarget read the trace again")

    monkeypatch.setattr("traceview.api.analysis.load_profile", no_reading)
    moved = mlp.retarget("tpu-v5p")
    assert moved.target.name == "tpu-v5p" and mlp.target.name == "cpu"      # the original is left as it was
    assert_same_json(moved.to_json(), expected)
    chip = moved.target
    assert_same_json(mlp.retarget(chip).to_json(), expected)  # a Chip works as well as a name
    # The measured times never move; only the judgement does.
    assert list(moved.ops.sort_values("name")["self_time_us"]) == \
        pytest.approx(list(mlp.ops.sort_values("name")["self_time_us"]))


def test_load_takes_a_chip_object(sample_traces):
    chips = traceview.chips()
    assert "tpu-v5p" in set(chips["name"])
    by_name = traceview.load(sample_traces / "mlp", target="tpu-v5p").to_json()
    v5p = traceview.load(sample_traces / "mlp", target="tpu-v5p").target
    assert traceview.load(sample_traces / "mlp", target=v5p).to_json() == by_name


def test_bad_input_raises_user_error(sample_traces, tmp_path):
    with pytest.raises(traceview.UserError, match="tpu-v99"):
        traceview.load(sample_traces / "mlp", target="tpu-v99")
    with pytest.raises(traceview.UserError, match="nothing-here"):
        traceview.load(tmp_path / "nothing-here")


def test_chips_match_the_hardware_command(capsys):
    doc = _cli_json(capsys, "hardware")
    chips = traceview.chips().set_index("name")
    assert list(chips.index) == [c["name"] for c in doc["chips"]]
    for c in doc["chips"]:
        assert chips.at[c["name"], "kind"] == c["kind"]
        bf16 = c["peak_flops"].get("bf16")
        cell = chips.at[c["name"], "peak_flops_bf16"]
        assert (pd.isna(cell) and bf16 is None) or cell == bf16
        assert (pd.isna(chips.at[c["name"], "hbm_bandwidth"]) and c["hbm_bandwidth"] is None) or \
            chips.at[c["name"], "hbm_bandwidth"] == c["hbm_bandwidth"]


def test_hlo_report_equals_the_hlo_command(sample_traces, capsys):
    dump = sample_traces / "mlp" / "hlo"
    report = traceview.hlo(dump)
    doc = _cli_json(capsys, "hlo", dump)
    assert report.to_json() == json.loads(json.dumps(doc))
    assert list(report.modules["name"]) == [m["name"] for m in doc["modules"]]
    assert list(report.modules["flops"]) == pytest.approx([m["flops"] for m in doc["modules"]])
    assert len(report.instructions) == sum(len(m["instructions"]) for m in doc["modules"])
    assert list(report.instructions["name"]) == [i["name"] for m in doc["modules"] for i in m["instructions"]]


def test_diff_and_check_of_two_runs(sample_traces, mlp):
    slow = traceview.load(sample_traces / "mlp_slow")
    diff = traceview.diff(mlp, slow)
    assert isinstance(diff, traceview.Diff)
    assert diff.step_shift is not None and diff.step_shift.estimate > 0      # mlp_slow is slower
    by_path = traceview.diff(sample_traces, sample_traces, base_run="mlp", run="mlp_slow")
    pd.testing.assert_frame_equal(diff.ops.drop(columns=["source_file"]), by_path.ops.drop(columns=["source_file"]))
    verdict = traceview.check(slow, mlp, {"max_step_regression": 0.05})
    assert isinstance(verdict, traceview.Verdict) and verdict.diff is not None
    assert not verdict.passed and any(c.name == "step_time" and not c.passed for c in verdict.checks)
    generous = {key: "10000%" for key in ("max_step_regression", "max_op_regression", "max_flops_increase",
                                          "max_bytes_increase", "max_collective_increase", "max_peak_memory_increase")}
    assert traceview.check(diff, budgets=generous).passed                    # the same diff, judged again
    assert traceview.check(mlp, mlp).passed


def test_budgets_as_a_dict_use_the_config_keys(sample_traces):
    loose = traceview.check(sample_traces / "mlp_slow", sample_traces / "mlp",
                            {"max_step_regression": "300%", "min_op_time": "1000s"})
    step = next(c for c in loose.checks if c.name == "step_time")
    assert step.limit == 3.0 and step.passed                                  # +216% within 300%
    assert not [c for c in loose.checks if c.kind == "op"]                    # no op takes 1000 s per step
    with pytest.raises(traceview.UserError, match="max_step_regresion"):
        traceview.check(sample_traces / "mlp_slow", sample_traces / "mlp", {"max_step_regresion": "5%"})


def test_diff_of_a_trace_and_hlo_is_a_user_error(sample_traces, mlp):
    with pytest.raises(traceview.UserError, match="cannot compare"):
        traceview.diff(mlp, sample_traces / "mlp" / "hlo")




def _ops_table_columns() -> list[str]:
    """The first cell of each row of docs/api.md's `Analysis.ops` column table."""
    text = (REPO / "docs" / "api.md").read_text()
    section = text.split("### `Analysis.ops` columns", 1)[1].split("\n### ", 1)[0]
    names = []
    for line in section.splitlines():
        if line.startswith("| `"):
            names += [c.strip(" `") for c in line.split("|")[1].split(",")]
    return names


def test_docs_list_every_public_name_and_ops_column(sample_traces):
    text = (REPO / "docs" / "api.md").read_text()
    for name in traceview.__all__:
        assert f"`{name}" in text, name
    documented = set(_ops_table_columns())
    assert set(OP_FIELDS.values()) <= documented, set(OP_FIELDS.values()) - documented   # every column there can be
    per_device = traceview.load(sample_traces / "sharded", per_device=True)
    assert set(per_device.ops.columns) <= documented, set(per_device.ops.columns) - documented


def test_readme_example_runs(sample_traces, monkeypatch):
    """The README's "Python API" example, run as it is written (from the repository root)."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Python API", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(REPO)
    exec(compile(code, "README.md", "exec"), {})
