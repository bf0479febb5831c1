"""Parallelism: mesh inference, attribution of collectives to axes, roles, the book's thresholds.

References are independent of the code under test: groups written out by hand
(or from the capture script's mesh configuration), the samples' capture.json
(mesh names, batch and widths the programs were built with), the shapes the
HLO dumps hold, and the book's / vendors' figures written out below.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import traceview
from traceview.hardware.database import get_chip, load_hardware
from traceview.parallelism.diagnose import DiagnoseInputs, diagnose, from_analysis, from_hlo
from traceview.parallelism.groups import collective_sites
from traceview.parallelism.mesh import subgrid
from traceview.parallelism.rules import axis_link, critical_ratio
from traceview.parsers.hlo.text import parse_hlo_text
from traceview.render.parallelism import md, parallelism_json, parallelism_markdown, parallelism_text, summary_line

MAXTEXT = Path("NVIDIA-JAX-Toolbox/maxtext_fsdp4_h100/dump")
V6E = Path("openxla-xprof/tpu_inference_2.xplane.pb")


def _module(lines: str, header: str = ", num_partitions=8", frontend: str = "") -> str:
    front = f", frontend_attributes={{{frontend}}}" if frontend else ""
    return f"""HloModule m{header}{front}

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

ENTRY %main (p: f32[16,32]) -> f32[16,32] {{
  %p = f32[16,32]{{1,0}} parameter(0)
{lines}
  ROOT %r = f32[16,32]{{1,0}} copy(%p)
}}
"""


def _ar(name: str, groups: str, extra: str = ", channel_id=1, use_global_device_ids=true") -> str:
    return f"  %{name} = f32[16,32]{{1,0}} all-reduce(%p), replica_groups={groups}{extra}, to_apply=%add"


def _report(text: str):
    module = parse_hlo_text(text)
    return diagnose(DiagnoseInputs([module]))


def _axes_of(report) -> dict[str, list[str] | None]:
    return {c.attribution.site.name: c.attribution.axes for c in report.collectives}


# --- replica-group forms, by hand -----------------------------------------------------------

def test_explicit_groups_give_a_two_axis_mesh():
    # 8 devices as [4, 2]: {0,1},{2,3},... run over the minor axis (size 2); {0,2,4,6},{1,3,5,7} over the major.
    report = _report(_module(_ar("minor", "{{0,1},{2,3},{4,5},{6,7}}") + "\n"
                             + _ar("major", "{{0,2,4,6},{1,3,5,7}}")))
    assert [(a.name, a.size) for a in report.mesh.axes] == [("axis0", 4), ("axis1", 2)]
    assert _axes_of(report) == {"minor": ["axis1"], "major": ["axis0"]}


def test_iota_groups_with_transpose():
    # [4,2]<=[2,4]T(1,0): iota(8) as 2x4, transposed to 4x2 = rows {0,4},{1,5},{2,6},{3,7}: stride 4, a major
    # axis of 2 over a minor axis of 4 (hand-written: the v6e trace's all-reduce).
    report = _report(_module(_ar("ar", "[4,2]<=[2,4]T(1,0)")))
    assert [(a.name, a.size) for a in report.mesh.axes] == [("axis0", 2), ("axis1", 4)]
    assert _axes_of(report) == {"ar": ["axis0"]}
    assert sorted(map(sorted, report.mesh.groups(["axis0"]))) == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_iota_groups_without_transpose_and_all_devices():
    report = _report(_module(_ar("rows", "[2,4]<=[8]") + "\n" + _ar("everyone", "{}")))
    assert [(a.name, a.size) for a in report.mesh.axes] == [("axis0", 2), ("axis1", 4)]
    assert _axes_of(report) == {"rows": ["axis1"], "everyone": ["axis0", "axis1"]}


def test_mesh_form_names_the_axes():
    # mesh['a'=4,'b'=2] {'a'}: devices differing only along 'a' (stride 2): {0,2,4,6}, {1,3,5,7}
    report = _report(_module(_ar("over_a", "mesh['a'=4,'b'=2] {'a'}") + "\n"
                             + _ar("over_b", "mesh['a'=4,'b'=2] {'b'}")))
    assert [(a.name, a.size) for a in report.mesh.axes] == [("a", 4), ("b", 2)]
    assert _axes_of(report) == {"over_a": ["a"], "over_b": ["b"]}
    site = next(s for s in collective_sites(parse_hlo_text(_module(_ar("x", "mesh['a'=4,'b'=2] {'a'}")))))
    assert sorted(map(sorted, site.groups)) == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_shardy_mesh_names_positional_groups_and_disagreement_is_reported():
    front = 'xla.sdy.meshes={mesh = #sdy.mesh<["data"=4, "model"=2]>}'
    report = _report(_module(_ar("tp", "{{0,1},{2,3},{4,5},{6,7}}"), frontend=front))
    assert [(a.name, a.size, "sdy" in a.source) for a in report.mesh.axes] == [("data", 4, True),
                                                                               ("model", 2, True)]
    assert _axes_of(report) == {"tp": ["model"]}
    # groups of 4 consecutive devices split 'data': they fit no set of the named axes
    bad = _report(_module(_ar("odd", "{{0,1,2,3},{4,5,6,7}}"), frontend=front))
    assert bad.mesh.axes[0].name == "axis0"
    assert any("do not fit the named mesh" in w for w in bad.warnings)


def test_group_modes_cross_replica_and_cross_partition():
    # no channel_id: replica ids; with 2 replicas x 4 partitions, replica group {0,1} is devices {p, 4+p}
    text = _module(_ar("cr", "{{0,1}}", extra=""), header=", replica_count=2, num_partitions=4")
    site = collective_sites(parse_hlo_text(text))[0]
    assert site.mode == "cross-replica"
    assert sorted(map(sorted, site.groups)) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # channel_id, use_global_device_ids=false: each replica group takes all partitions of its replicas
    text = _module(_ar("crp", "{{0},{1}}", extra=", channel_id=1"), header=", replica_count=2, num_partitions=4")
    site = collective_sites(parse_hlo_text(text))[0]
    assert site.mode == "cross-replica-and-partition"
    assert sorted(map(sorted, site.groups)) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_collective_permute_is_attributed_by_coordinates():
    lines = (_ar("minor", "{{0,1},{2,3},{4,5},{6,7}}") + "\n"
             "  %cp = f32[16,32]{1,0} collective-permute(%p), channel_id=2, "
             "source_target_pairs={{0,2},{2,4},{4,6},{6,0}}")
    report = _report(_module(lines))
    assert _axes_of(report)["cp"] == ["axis0"]
    assert next(c for c in report.collectives if c.attribution.site.name == "cp").pattern == "point-to-point"


def test_no_collective_no_mesh_says_why():
    report = _report(_module("", header=""))
    assert report.mesh is None and "does not communicate" in report.why_no_mesh


def test_groups_that_are_no_grid_stay_unattributed():
    assert subgrid([0, 1, 4, 5]) == [(1, 2), (4, 2)]
    assert subgrid([0, 1, 3]) is None
    report = _report(_module(_ar("odd", "{{0,1,3},{2,4,5}}"), header=", num_partitions=6"))
    assert _axes_of(report) == {"odd": None}
    assert any("no sub-grid" in w for w in report.warnings)
    assert any("not attributed" in w for w in report.warnings)


def test_parameter_sharding_forms():
    from traceview.parallelism.shardings import tile_groups as groups_of
    from traceview.parsers.hlo.sharding import parse_sharding

    def tile_groups(text: str):
        return groups_of(parse_sharding(text))

    # [4,2]<=[8]: tile (i, j) on device 2i + j; dim 0 varies i (stride 2), dim 1 varies j
    assert sorted(map(sorted, tile_groups("{devices=[4,2]<=[8]}")[0])) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert sorted(map(sorted, tile_groups("{devices=[4,2]<=[8]}")[1])) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # [2,4]<=[4,2]T(1,0): tile (i, j) on device i + 2j; dim 0 varies i (stride 1)
    assert sorted(map(sorted, tile_groups("{devices=[2,4]<=[4,2]T(1,0)}")[0])) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # the replicated last tile dimension is no tensor dimension
    assert set(tile_groups("{devices=[4,1,2]<=[8] last_tile_dim_replicate}")) == {0}
    # explicit device list
    assert sorted(map(sorted, tile_groups("{devices=[1,2]1,0}")[1])) == [[0, 1]]
    assert tile_groups("{replicated}") is None
    assert tile_groups("{{devices=[2]0,1}, {replicated}}") is None   # a tuple's elements are not read
    assert tile_groups("{devices=[2,2]0,1,2}") is None               # 3 devices for 4 tiles
    assert tile_groups("{devices=[2,2]<=[4]T(0,0)}") is None         # no transpose
    assert tile_groups("{devices=[2,1,2]<=[4] last_tile_dims={manual}}") is None


# --- the book's thresholds from the code's formulas --------------------------------------------

def test_book_thresholds():
    db = load_hardware(None)
    v5p, h100 = get_chip("tpu-v5p", db), get_chip("h100-sxm", db)
    # TPU v5p: C = 4.59e14 FLOP/s, one ICI axis W = 2 x 9e10 B/s: C/W = 2,550; three axes: 850 (book ch. 5)
    assert critical_ratio(v5p, axis_link(v5p)) == pytest.approx(4.59e14 / 1.8e11) == pytest.approx(2550)
    assert critical_ratio(v5p, axis_link(v5p, torus_axes=3)) == pytest.approx(850)
    # H100: C = 9.89e14, NVLink egress 4.5e11 B/s within a node: ~2,200; across nodes 400 GB/s: ~2,475
    assert critical_ratio(h100, axis_link(h100)) == pytest.approx(2200, rel=0.01)
    assert critical_ratio(h100, axis_link(h100, crosses_dcn=True)) == pytest.approx(2475, rel=0.01)


# --- escaping -------------------------------------------------------------------------------

def test_hostile_axis_names_are_escaped_in_markdown():
    front = 'xla.sdy.meshes={mesh = #sdy.mesh<["<b>x*_"=4, "m"=2]>}'
    assert "<" not in md("<b>x*_") and "\\*" in md("<b>x*_")
    report = _report(_module(_ar("a", "{{0,2,4,6},{1,3,5,7}}"), frontend=front))
    assert report.mesh.axes[0].name == "<b>x*_"
    out = parallelism_markdown(report)
    assert "<b>" not in out and "&lt;b&gt;x\\*" in out


# --- samples ----------------------------------------------------------------------------------

def _sample(sample_traces: Path, name: str):
    analysis = traceview.load(sample_traces / name).pipeline
    return analysis, from_analysis(analysis), json.loads((sample_traces / name / "capture.json").read_text())


def _hlo_groups(sample_traces: Path, name: str) -> dict[str, list[list[int]]]:
    """Collective name -> replica groups, read from the dump's text with a regex."""
    text = next((sample_traces / name / "hlo").glob("*cpu_after_optimizations.txt")).read_text()
    out = {}
    for m in re.finditer(r"%(\S+) = .*? (?:all-reduce|all-gather|reduce-scatter)\(.*?replica_groups=\{(.*?)\}\}",
                         text):
        out[m.group(1)] = [[int(x) for x in g.split(",")] for g in re.findall(r"(\d+(?:,\d+)*)", m.group(2))]
    return out


def _check_every_collective(analysis, report) -> None:
    assert all(c.attribution.axes for c in report.collectives), [c.attribution for c in report.collectives]
    # every collective of the trace is on an axis: the axes' exposed times add up to the analysis's
    ops = analysis.ops[analysis.ops["collective_kind"].fillna("").astype(str) != ""]
    assert sum(a.exposed_ps for a in report.axes) == pytest.approx(float(ops["exposed_time_ps"].fillna(0).sum()))
    assert sum(a.executions for a in report.axes) == int(ops["occurrences"].sum())


def test_sharded_sample(sample_traces):
    analysis, report, meta = _sample(sample_traces, "sharded")
    mesh = meta["config"]["mesh"]
    assert [(a.name, a.size) for a in report.mesh.axes] == list(mesh.items())   # data=4, model=2
    axes = {a.name: a for a in report.axes}
    assert axes["data"].role.role == "fsdp" and axes["model"].role.role == "tensor"
    # device d sits at (d // 2, d % 2): 'data' groups share the model coordinate, 'model' groups the data one
    by_axis = {"data": sorted([[d for d in range(8) if d % 2 == m] for m in range(2)]),
               "model": sorted([[d for d in range(8) if d // 2 == i] for i in range(4)])}
    for name, groups in _hlo_groups(sample_traces, "sharded").items():
        axis = _axes_of(report)[name]
        assert axis is not None and len(axis) == 1
        assert sorted(map(sorted, groups)) == by_axis[axis[0]]
    _check_every_collective(analysis, report)
    # per-chip batch: the global batch split over 'data'; per-shard width: hidden split over 'model'
    assert report.per_chip_tokens.value == meta["config"]["batch"] / mesh["data"]
    # the TP all-reduce sums h[64, hidden/model] @ w2[hidden/model, 512]: it contracts the per-shard width
    assert axes["model"].verdict.value == meta["config"]["hidden"] / mesh["model"]
    # parameter shardings (the capture script's specs: w1 P("data", "model"), w2 P("model", "data"))
    split = {p.label: p.axes for p in report.parameters}
    assert split["params[0]"] == {0: ["data"], 1: ["model"]}
    assert split["params[1]"] == {0: ["model"], 1: ["data"]}
    assert split["batch[0]"] == {0: ["data"]}
    line = summary_line(report)
    assert "data=4 x model=2" in line and "FSDP" in line and "tensor parallel" in line


def test_fsdp_sample(sample_traces):
    analysis, report, meta = _sample(sample_traces, "fsdp")
    assert [(a.name, a.size) for a in report.mesh.axes] == [("fsdp", 8)]
    (axis,) = report.axes
    assert axis.role.role == "fsdp"
    assert axis.role.patterns["parameter all-gather"] == 2 and axis.role.patterns["gradient reduce-scatter"] == 2
    assert report.per_chip_tokens.value == meta["config"]["batch"] / 8
    assert axis.verdict.rule.startswith("FSDP") and axis.verdict.value == meta["config"]["batch"] / 8
    # per step and device: w1 [256,512] and w2 [512,256] f32 gathered (payload = the gathered array), their
    # gradients reduce-scattered (payload = the full operand), and the f32 loss: 5 steps x 8 devices
    cfg = meta["config"]
    weight_bytes = cfg["d_in"] * cfg["hidden"] * 4
    assert axis.executions == 5 * 5 * 8
    assert axis.bytes == 5 * 8 * (4 * weight_bytes + 4)
    assert axis.bytes_per_step == 4 * weight_bytes + 4           # the HLO cost model's payloads, per device
    _check_every_collective(analysis, report)


def test_tensor_parallel_sample(sample_traces):
    analysis, report, meta = _sample(sample_traces, "tensor_parallel")
    mesh, cfg = meta["config"]["mesh"], meta["config"]
    assert [(a.name, a.size) for a in report.mesh.axes] == list(mesh.items())   # data=2, model=4
    axes = {a.name: a for a in report.axes}
    assert axes["data"].role.role == "data" and axes["model"].role.role == "tensor"
    assert axes["model"].verdict.value == cfg["hidden"] / mesh["model"]          # F / Y = 256
    assert report.per_chip_tokens.value == cfg["batch"] / mesh["data"]           # 64 tokens per chip
    _check_every_collective(analysis, report)
    # --target projects the verdicts: on a v5p, C/W = 2,550 > 256 = F/Y: tensor parallelism is comm-bound
    v5p = get_chip("tpu-v5p", load_hardware(None))
    on_v5p = from_analysis(traceview.Analysis(analysis).retarget(v5p).pipeline)
    assert on_v5p.projected and on_v5p.measured_on == analysis.judged.chip.name        # said so in every output
    assert "PROJECTED from a trace measured on cpu" in parallelism_text(on_v5p)
    assert parallelism_json(on_v5p)["target"]["projected"] is True
    assert not report.projected and "PROJECTED" not in parallelism_text(report)
    projected = {a.name: a for a in on_v5p.axes}
    assert projected["model"].verdict.verdict == "communication-bound"
    assert projected["model"].verdict.threshold == pytest.approx(2550)
    assert projected["model"].verdict.suggestions
    # the trace: the TP all-reduce is not overlapped (share >= 5%), the gradient all-reduce mostly is
    share = axes["model"].exposed_ps / analysis.span_ps
    assert axes["model"].share == pytest.approx(share)
    assert ("costing time" in axes["model"].measured) == (share >= 0.05)


def test_single_device_sample_has_no_mesh(sample_traces):
    _, report, meta = _sample(sample_traces, "mlp")
    assert meta["device_count"] == 1
    assert report.mesh is None and report.why_no_mesh and not report.collectives
    assert parallelism_json(report)["mesh"] is None
    assert "no mesh" in summary_line(report)


def test_cli_json_contract(sample_traces, capsys):
    from traceview.cli import main

    assert main(["parallelism", str(sample_traces / "sharded"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"name", "size", "source"} <= set(out["mesh"]["axes"][0])
    for axis in out["axes"]:
        assert {"name", "size", "role", "collectives", "bytes", "time_us", "exposed_time_us", "verdict", "rule",
                "value", "threshold"} <= set(axis)
    assert isinstance(out["warnings"], list)
    jsonschema = pytest.importorskip("jsonschema")
    from traceview.config.files import schema

    jsonschema.validate(out, schema("parallelism"))   # the published schema (traceview/schemas/)


def test_cli_bad_input_is_a_one_line_error(tmp_path, capsys):
    from traceview.cli import main

    bad = tmp_path / "bad.txt"
    bad.write_text("not HLO")
    assert main(["parallelism", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and len(err.strip().splitlines()) == 1


def test_analyze_summary_has_the_parallelism_line(sample_traces):
    from traceview.render.analyze import analysis_text
    from traceview.render.analyze_views import mesh_line

    analysis = traceview.load(sample_traces / "tensor_parallel")
    line = mesh_line(analysis.mesh())
    assert line.startswith("mesh data=2 x model=4")
    text = analysis_text(analysis.pipeline, top=1, colour_enabled=False, mesh_line=line)
    assert "mesh data=2 x model=4" in text
    assert traceview.load(sample_traces / "mlp").mesh() is None   # no collectives: nothing to say


# --- real traces and dumps --------------------------------------------------------------------------

def test_maxtext_h100_dump_fsdp_over_4(shared_traces):
    h100 = get_chip("h100-sxm", load_hardware(None))
    report = from_hlo(shared_traces / MAXTEXT, h100)
    names = [(a.name, a.size) for a in report.mesh.axes]
    assert names == [("data", 1), ("fsdp", 4), ("fsdp_transpose", 1), ("sequence", 1), ("tensor", 1),
                     ("autoregressive", 1)]
    assert "op_name" in report.mesh.source
    (axis,) = report.axes
    assert axis.name == "fsdp" and axis.role.role == "fsdp"
    assert all(c.attribution.axes == ["fsdp"] for c in report.collectives)
    # tokens per chip: the before-optimizations module takes the global batch of token ids, s32[8,2048]
    # (the batch split 4 ways over 'fsdp'): 8 * 2048 / 4 = 4096
    from traceview.parsers.hlo.dump import load_hlo_modules

    (before,), _ = load_hlo_modules(shared_traces / MAXTEXT, stage="before")
    params = [i.shape for i in before.entry_computation().instructions if i.opcode == "parameter"]
    assert any(p.element_type == "s32" and p.dims == (8, 2048) for p in params)
    tokens = [p for p in report.parameters if p.shape.startswith("s32[8,2048]")]
    assert tokens and all(p.axes == {0: ["fsdp"]} for p in tokens)     # the batch split over 'fsdp'

    assert report.per_chip_tokens.value == 8 * 2048 / 4
    assert axis.verdict.threshold == pytest.approx(9.89e14 / 4.5e11)
    assert axis.verdict.verdict == "compute-bound"
    # the layers' collectives run inside while loops: per step they move more than once each
    assert axis.bytes_per_step > axis.bytes_per_execution
    record = parallelism_json(report)
    assert record["axes"][0]["time_us"] is None      # no trace: no times, not zeros
    assert record["target"] == {"name": h100.name, "source": "--target", "projected": False, "measured_on": None}
    assert [r["role"] for r in record["axes"][0]["roles"]] == ["fsdp"]
    # its two all-to-alls reshard activations (no router): not read as expert parallelism
    assert {c["pattern"] for c in record["collectives"] if c["kind"] == "all-to-all"} == {"all-to-all"}
    from traceview.config.files import schema

    pytest.importorskip("jsonschema").validate(record, schema("parallelism"))


def test_tpu_v6e_all_reduce_over_groups_of_two(shared_traces):
    analysis = traceview.load(shared_traces / V6E).pipeline
    report = from_analysis(analysis)
    ((name, axes),) = _axes_of(report).items()
    (axis,) = [a for a in report.mesh.axes if a.name == axes[0]]
    assert axis.size == 2
    # [4,2]<=[2,4]T(1,0) by hand: {0,4},{1,5},{2,6},{3,7}
    assert sorted(map(sorted, report.mesh.groups(axes))) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    ops = analysis.ops[analysis.ops["collective_kind"].fillna("").astype(str) != ""]
    row = next(a for a in report.axes if a.name == axes[0])
    assert row.link is not None and row.link.kind == "ICI"
    assert row.executions == int(ops.loc[ops["op"] == name, "occurrences"].sum())
    # the trace's host offload copies are communication too, on their own row (PCIe)
    host = next(a for a in report.axes if a.name == "host")
    assert host.link.kind == "PCIe" and host.collectives == 6
    assert sum(a.exposed_ps for a in report.axes) == pytest.approx(float(ops["exposed_time_ps"].fillna(0).sum()))
