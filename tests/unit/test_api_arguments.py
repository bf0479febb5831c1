"""Hostile arguments to the public Python API: each wrong type or out-of-range value is a UserError naming it
(the CLI's parser types its values; from Python anything arrives), never an AttributeError or TypeError from
deep inside, and never a result for nonsense. The natural Python forms a user writes work, and mean what
their command-line spelling means.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import traceview
from traceview.errors import UserError
from traceview.hardware.database import get_chip, load_hardware


@pytest.fixture(scope="module")
def mlp(sample_traces) -> traceview.Analysis:
    return traceview.load(sample_traces / "mlp")


@pytest.fixture(scope="module")
def mlp_slow(sample_traces) -> traceview.Analysis:
    return traceview.load(sample_traces / "mlp_slow")


@pytest.fixture(scope="module")
def sharded(sample_traces) -> traceview.Analysis:
    """A trace with a mesh (fsdp x tensor) and a batch read from it: what-if has something to project."""
    return traceview.load(sample_traces / "sharded")


@pytest.fixture
def no_reading(monkeypatch):
    """Reading the trace fails the test: an argument that is checked must fail before the (slow) read."""
    def read(*args, **kwargs):
        raise AssertionError("the trace was read before a bad argument was refused")

    monkeypatch.setattr("traceview.api.analysis.load_profile", read)


# ------------------------------------------------------------------ load

@pytest.mark.parametrize("path", [123, None, ["sample_traces/mlp"], b"sample_traces/mlp", "", 1.5])
def test_load_refuses_a_path_that_is_no_path(path):
    with pytest.raises(UserError, match="path="):
        traceview.load(path)


@pytest.mark.parametrize("kwargs, named", [
    ({"target": 123}, "123"), ({"target": ["tpu-v5p"]}, "tpu-v5p"), ({"target": True}, "True"),
    ({"target": "nochip"}, "nochip"),
    ({"stage": "bogus"}, "bogus"), ({"stage": 1}, "1"), ({"stage": None}, "None"),
    ({"hlo": 5}, "hlo=5"), ({"hlo": ""}, "hlo=''"), ({"hardware_file": 5}, "hardware_file=5"),
    ({"hardware_file": ["x.json"]}, "hardware_file="),
    ({"progress": "yes"}, "progress='yes'"), ({"progress": 5}, "progress=5"),
    ({"per_device": "yes"}, "per_device='yes'"), ({"per_device": 2}, "per_device=2"),
    ({"read_options": {"jobs": 2}}, "read_options="),
])
def test_load_refuses_bad_arguments_before_reading(sample_traces, no_reading, kwargs, named):
    with pytest.raises(UserError, match=named.replace("[", r"\[")):
        traceview.load(sample_traces / "mlp", **kwargs)


@pytest.mark.parametrize("run", [5, ["mlp"], "nope"])
def test_load_refuses_a_run_it_does_not_hold(sample_traces, run):
    with pytest.raises(UserError, match="no run named"):
        traceview.load(sample_traces, run=run)


def test_load_takes_per_device_as_0_or_1_and_an_empty_target_as_none(sample_traces, mlp):
    per_device = traceview.load(sample_traces / "mlp", per_device=1)
    assert "device" in per_device.ops.columns and "device" not in mlp.ops.columns
    assert traceview.load(sample_traces / "mlp", target="").target.name == mlp.target.name == "cpu"   # detected


# ------------------------------------------------------------------ retarget, scopes

@pytest.mark.parametrize("chip", [123, None, ["tpu-v5p"], {"name": "tpu-v5p"}, True, 1.5, "", "nochip"])
def test_retarget_refuses_what_is_no_chip(mlp, chip):
    with pytest.raises(UserError, match="target"):
        mlp.retarget(chip)


@pytest.mark.parametrize("by", ["bogus", "", 1, None, ["scope"]])
def test_scopes_refuse_an_unknown_grouping(mlp, by):
    with pytest.raises(UserError, match="by="):
        mlp.scope_tree(by)
    with pytest.raises(UserError, match="by="):
        mlp.scopes(by)


@pytest.mark.parametrize("path", [5, None, ("train_step", 1), {"train_step": 1}])
def test_scope_tree_under_refuses_what_is_no_path(mlp, path):
    with pytest.raises(UserError, match="path="):
        mlp.scope_tree().under(path)


def test_scope_tree_under_takes_a_list_or_one_program_name(mlp):
    tree = mlp.scope_tree()
    program = tree.roots["path"].iloc[0]
    assert len(program) == 1
    mask = tree.under(program)
    assert 0 < mask.sum() <= len(mlp.pipeline.ops)
    assert (tree.under(list(program)) == mask).all() and (tree.under(program[0]) == mask).all()


# ------------------------------------------------------------------ whatif

@pytest.mark.parametrize("kwargs, named", [
    ({"meshes": [{"data": "x"}]}, "data='x'"), ({"meshes": [{"data": 0}]}, "data=0"),
    ({"meshes": [{"data": -2}]}, "data=-2"), ({"meshes": [{"data": 2.5}]}, "data=2.5"),
    ({"meshes": [{"data": True}]}, "data=True"), ({"meshes": [{"data": math.nan}]}, "data=nan"),
    ({"meshes": [{"bogus": 2}]}, "bogus"), ({"meshes": [{1: 2}]}, "role 1"),
    ({"meshes": [{"data": 1 << 30}]}, "out of range"), ({"meshes": [{"data": 1 << 20, "fsdp": 4}]}, "out of range"),
    ({"meshes": ["data=0"]}, "data=0"), ({"meshes": ["model=2"]}, "model=2"), ({"meshes": [None]}, "mesh None"),
    ({"meshes": [["data", 8]]}, "mesh"), ({"meshes": 5}, "meshes=5"),
    ({"batches": [None]}, "None"), ({"batches": [True]}, "True"), ({"batches": [-1]}, "-1"),
    ({"batches": [math.inf]}, "inf"), ({"batches": [10**400]}, "must be a positive, finite"),
    ({"batches": {"x2": 1}}, "batches="), ({"batches": [[512]]}, r"\[512\]"), ({"batches": "many"}, "many"),
    ({"chips": -1}, "chips=-1"), ({"chips": 0}, "chips=0"), ({"chips": 1.5}, "chips=1.5"),
    ({"chips": True}, "chips=True"), ({"chips": math.nan}, "chips=nan"), ({"chips": math.inf}, "chips=inf"),
    ({"chips": [8]}, "chips="), ({"chips": 1 << 40}, "out of range"), ({"chips": "eight"}, "chips='eight'"),
    ({"microbatches": 0}, "microbatches=0"), ({"microbatches": -1}, "microbatches=-1"),
    ({"microbatches": 1.5}, "microbatches=1.5"), ({"microbatches": True}, "microbatches=True"),
    ({"microbatches": math.nan}, "microbatches=nan"),
    ({"target": "nochip"}, "nochip"), ({"target": 123}, "123"), ({"target": ["tpu-v5p"]}, "tpu-v5p"),
    ({"target": True}, "True"),
])
def test_whatif_refuses_bad_arguments(sharded, kwargs, named):
    with pytest.raises(UserError, match=named):
        sharded.whatif(**kwargs)


def test_whatif_refuses_bad_arguments_even_where_nothing_uses_them(mlp):
    """mlp has no pipeline, so its projection reads no microbatches: a wrong count is still wrong."""
    with pytest.raises(UserError, match="microbatches=0"):
        mlp.whatif(microbatches=0)


def _configs(report) -> list[tuple]:
    return [(tuple(sorted(p.config.mesh.items())), p.config.batch, p.step_ps) for p in report.projections]


def test_whatif_batch_as_a_number_of_tokens(sharded):
    report = sharded.whatif(batches=[2560])
    assert report.projections and {p.config.batch for p in report.projections} == {2560.0}
    assert _configs(sharded.whatif(batches=2560)) == _configs(report)          # one batch alone
    assert _configs(sharded.whatif(batches=["2560"])) == _configs(report)      # as the command line spells it


def test_whatif_batch_factor_alone_is_one_factor(sharded):
    """`batches="x2"` is twice today's batch, not the batches "x" and "2"."""
    today = sharded.whatif().today.batch
    assert today is not None and today > 0
    report = sharded.whatif(batches="x2")
    assert {p.config.batch for p in report.projections} == {2 * today}


def test_whatif_mesh_as_text_or_one_dict(sharded):
    asked = sharded.whatif(meshes=[{"fsdp": 2, "tensor": 2}], batches=["x1"])
    (p,) = asked.projections
    assert p.config.mesh == {"fsdp": 2, "tensor": 2} and p.config.chips == 4
    for same in ("fsdp=2,tensor=2", ["fsdp=2, tensor=2"], {"fsdp": 2, "tensor": 2}, [{"fsdp": 2.0, "tensor": 2}],
                 ({"tensor": 2, "fsdp": 2},)):
        assert _configs(sharded.whatif(meshes=same, batches=["x1"])) == _configs(asked), same


def test_whatif_chip_count_as_a_whole_float(sharded):
    report = sharded.whatif(chips=4.0, batches=["x1"])
    assert report.projections and {p.config.chips for p in report.projections} == {4}
    assert _configs(report) == _configs(sharded.whatif(chips=4, batches=["x1"]))


# ------------------------------------------------------------------ hlo, chips, Chip

@pytest.mark.parametrize("kwargs, named", [
    ({"path": 123}, "path=123"), ({"path": None}, "path=None"), ({"path": ""}, "path=''"),
    ({"stage": "bogus"}, "bogus"), ({"hardware_file": 5}, "hardware_file=5"),
])
def test_hlo_refuses_bad_arguments(sample_traces, kwargs, named):
    args = {"path": sample_traces / "mlp" / "hlo", **kwargs}
    with pytest.raises(UserError, match=named):
        traceview.hlo(**args)


@pytest.mark.parametrize("kwargs, named", [
    ({"top": -1}, "top=-1"), ({"top": "many"}, "top='many'"), ({"top": 1.5}, "top=1.5"), ({"top": True}, "top=True"),
    ({"top": None}, "top=None"), ({"markdown": "yes"}, "markdown='yes'"),
])
def test_hlo_text_refuses_bad_arguments(sample_traces, kwargs, named):
    report = traceview.hlo(sample_traces / "mlp" / "hlo")
    with pytest.raises(UserError, match=named):
        report.to_text(**kwargs)


def test_hlo_text_top_as_a_whole_float(sample_traces):
    report = traceview.hlo(sample_traces / "mlp" / "hlo")
    assert report.to_text(top=2.0) == report.to_text(top=2) != report.to_text(top=3)
    assert "top 2 instructions" in report.to_text(top=2.0)


@pytest.mark.parametrize("hardware_file", [5, ["x.json"], b"x.json", ""])
def test_chips_refuse_a_hardware_file_that_is_no_path(hardware_file):
    with pytest.raises(UserError, match="hardware_file="):
        traceview.chips(hardware_file)


@pytest.mark.parametrize("kwargs, named", [
    ({"hbm_bandwidth": "fast"}, "hbm_bandwidth='fast'"), ({"hbm_bandwidth": -1}, "hbm_bandwidth=-1"),
    ({"hbm_bandwidth": 0}, "hbm_bandwidth=0"), ({"hbm_bandwidth": 10**400}, "hbm_bandwidth="),
    ({"peak_flops": [1e15]}, "peak_flops="), ({"peak_flops": {"bf16": math.nan}}, "nan"),
    ({"peak_flops": {"bf16": True}}, "True"), ({"peak_flops": {"nonsense": 1e15}}, "nonsense"),
    ({"name": 5}, "name=5"),
])
def test_chip_with_figures_refuses_what_is_no_figure(kwargs, named):
    chip = get_chip("tpu-v5p", load_hardware())
    with pytest.raises(UserError, match=named):
        chip.with_figures("what-if", **kwargs)


def test_chip_with_figures_takes_a_dtype_name(mlp):
    chip = mlp.retarget("tpu-v5p").target
    faster = chip.with_figures("what-if", peak_flops={"bfloat16": 2 * chip.peak_flops["bf16"]}, hbm_bandwidth=4e12)
    assert faster.peak_flops["bf16"] == 2 * chip.peak_flops["bf16"] and faster.hbm_bandwidth == 4e12
    assert "bfloat16" not in faster.peak_flops


# ------------------------------------------------------------------ diff, check

@pytest.mark.parametrize("budgets, named", [
    ([1], r"budgets=\[1\]"), (5, "budgets=5"), (True, "budgets=True"), (b"x.toml", "budgets=b'x.toml'"),
    ("", "budgets=''"), ({"max_step_regression": [1]}, "max_step_regression"),
    ({"max_step_regression": None}, "max_step_regression"), ({"max_step_regression": math.nan}, "nan"),
    ({"max_step_regression": True}, "True"), ({"min_op_time": {}}, "min_op_time"), ({"programs": 5}, "programs"),
    ({"confidence": 5}, "confidence 5"), ({"confidence": 0}, "confidence 0"), ({"confidence": "100%"}, "confidence 1"),
    ({1: 2}, "unknown setting 1"), ({"max_step_regresion": "5%"}, "max_step_regresion"),
    ({"ops": [{"pattern": "*", "ignore": "no"}]}, "ignore"), ({"ops": "all"}, "ops"),
    ({"max_peak_memory_increase": []}, "max_peak_memory_increase"),
])
def test_diff_and_check_refuse_bad_budgets(mlp, mlp_slow, budgets, named):
    with pytest.raises(UserError, match=named):
        traceview.diff(mlp, mlp_slow, budgets=budgets)
    with pytest.raises(UserError, match=named):
        traceview.check(mlp_slow, mlp, budgets)


def test_a_budgets_object_is_checked_too(mlp, mlp_slow):
    with pytest.raises(UserError, match="confidence 1.5"):
        traceview.check(mlp_slow, mlp, traceview.Budgets(confidence=1.5))


def test_budgets_dict_takes_op_rules_as_the_config_file_does(mlp, mlp_slow):
    """`ops` is a config key, so a dict of the config's keys takes it: here every op is ignored."""
    strict = traceview.check(mlp_slow, mlp, {"max_op_regression": "1%", "min_op_time": "0ms"})
    assert [c for c in strict.checks if c.kind == "op"]                        # ops are judged without the rule
    ignored = traceview.check(mlp_slow, mlp, {"max_op_regression": "1%", "min_op_time": "0ms",
                                              "ops": [{"pattern": "*", "ignore": True}]})
    assert not [c for c in ignored.checks if c.kind == "op"]


@pytest.mark.parametrize("kwargs, named", [
    ({"base": 123}, "base=123"), ({"new": None}, "new=None"), ({"new": [1]}, r"new=\[1\]"), ({"base": ""}, "base=''"),
    ({"target": 5}, "target 5"), ({"target": "nochip"}, "nochip"), ({"target": ["tpu-v5p"]}, "tpu-v5p"),
    ({"stage": "bogus"}, "bogus"), ({"hardware_file": 5}, "hardware_file=5"),
])
def test_diff_refuses_bad_arguments(mlp, mlp_slow, kwargs, named):
    args = {"base": mlp, "new": mlp_slow, **kwargs}
    with pytest.raises(UserError, match=named):
        traceview.diff(**args)


def test_diff_judges_analyses_on_the_target_it_names(mlp, mlp_slow):
    """`target` judges both sides on one chip: an Analysis side too, not only a path."""
    d = traceview.diff(mlp, mlp_slow, target="tpu-v5p")
    assert d.summary.base.target == d.summary.new.target == "tpu-v5p"
    assert traceview.diff(mlp, mlp_slow).summary.base.target == "cpu"


def test_check_refuses_a_missing_or_extra_baseline(mlp, mlp_slow):
    with pytest.raises(UserError, match="give the baseline"):
        traceview.check(mlp_slow)
    with pytest.raises(UserError, match="new=123"):
        traceview.check(123, mlp)
    with pytest.raises(UserError, match="a Diff carries its baseline"):
        traceview.check(traceview.diff(mlp, mlp_slow), mlp)


class _PathLike:
    """An os.PathLike that is no pathlib.Path (as other libraries' path objects are)."""

    def __init__(self, path: Path):
        self.path = path

    def __fspath__(self) -> str:
        return str(self.path)


def test_a_path_may_be_a_str_or_any_path_like(sample_traces, mlp):
    for path in (str(sample_traces / "mlp"), _PathLike(sample_traces / "mlp")):
        loaded = traceview.load(path)
        assert list(loaded.ops["self_time_us"]) == pytest.approx(list(mlp.ops["self_time_us"]))
    report = traceview.hlo(_PathLike(sample_traces / "mlp" / "hlo"))
    assert list(report.modules["name"]) == list(traceview.hlo(sample_traces / "mlp" / "hlo").modules["name"])
