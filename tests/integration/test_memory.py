"""Memory: runtime peaks (allocator events), static peaks (buffer assignment), headroom, the CLI.

References: XProf's memory profile (per allocator: peak, stack, heap) and
memory viewer (per module: peak heap, total allocation = get_peak_allocations'
total_hbm_mib, the buffers at the peak), run on the same files; hand
calculations for a synthetic heap trace and for the project's own MLP sample.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from traceview.cli import main
from traceview.hostreduce.memory_peaks import fill_steps, runtime_peaks
from traceview.memory.modules import static_peaks_from_dump, static_peaks_from_protos
from traceview.memory.static import static_peak
from traceview.parsers.hlo.buffer_assignment import (
    ALLOC,
    FREE,
    SHARE_WITH,
    BufferAllocation,
    BufferAssignment,
    HeapEvent,
    LogicalBuffer,
)
from traceview.parsers.xspace.allocator_events import ALLOCATOR_COLUMNS, read_allocator_events
from traceview.render.memory import held_json

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
XPLANES = sorted(SHARED.rglob("*.xplane.pb")) if SHARED.is_dir() else []
REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20
TOLERANCE = 0.01


# ------------------------------------------------------------------ static: synthetic heap walk


def _alloc(index, size, ids, **flags):
    base = dict(color=0, is_thread_local=False, is_entry_parameter=False, is_constant=False, maybe_live_out=False,
                is_tuple=False, parameter_number=0)
    base.update(flags)
    return BufferAllocation(index=index, size=size, assigned=tuple((i, 0, 0) for i in ids), **base)


def _lb(i, size, name, color=0):
    return LogicalBuffer(id=i, size=size, instruction_id=None, instruction_name=name, shape_index=(), color=color)


def test_heap_walk_by_hand():
    # Parameter p (1000 B) and output o (300 B) live throughout. The heap simulator trace:
    #   ALLOC a 100  -> 100
    #   ALLOC b 200  -> 300
    #   FREE a       -> 200
    #   ALLOC c 400  -> 600   <- peak: b, c live
    #   SHARE_WITH d -> c     (c already live: no growth)
    #   FREE c       -> 600   (d still references it)
    #   FREE d       -> 200
    #   FREE b       -> 0
    # Peak = 600 + 1000 + 300 = 1900; at the peak: p, o, c, b.
    ba = BufferAssignment(
        logical_buffers={1: _lb(1, 100, "a"), 2: _lb(2, 200, "b"), 3: _lb(3, 400, "c"), 4: _lb(4, 400, "d"),
                         5: _lb(5, 1000, "p"), 6: _lb(6, 300, "o"), 7: _lb(7, 50, "hbm2", color=1)},
        allocations=[_alloc(0, 1000, [5], is_entry_parameter=True), _alloc(1, 300, [6], maybe_live_out=True),
                     _alloc(2, 600, [1, 2, 3, 4]), _alloc(3, 50, [7], color=1)],
        heap_traces=[[HeapEvent(ALLOC, 1, "a", 0), HeapEvent(ALLOC, 2, "b", 0), HeapEvent(FREE, 1, "a", 0),
                      HeapEvent(ALLOC, 3, "c", 0), HeapEvent(SHARE_WITH, 4, "d", 3), HeapEvent(FREE, 3, "c", 0),
                      HeapEvent(FREE, 4, "d", 0), HeapEvent(FREE, 2, "b", 0)]])
    peak = static_peak(ba, None, name="m")
    assert peak.heap_peak_bytes == 600
    assert peak.indefinite_bytes == 1300
    assert peak.peak_bytes == 1900
    assert [(b.instruction, b.size_bytes, b.kind) for b in peak.buffers] == [
        ("p", 1000, "parameter"), ("c", 400, "temporary"), ("o", 300, "output"), ("b", 200, "temporary")]
    assert peak.peak_instruction == "c"
    assert peak.total_allocation_bytes == 1900  # colour 1 not counted
    assert peak.heap_timeline == [1300, 1400, 1600, 1500, 1900, 1900, 1900, 1500, 1300]


def test_share_with_after_free_counts_again():
    # SHARE_WITH of a freed canonical buffer brings it back (XProf: ref count back to 1).
    ba = BufferAssignment(
        logical_buffers={1: _lb(1, 500, "x"), 2: _lb(2, 500, "y"), 3: _lb(3, 10, "z")},
        allocations=[_alloc(0, 510, [1, 2, 3])],
        heap_traces=[[HeapEvent(ALLOC, 1, "x", 0), HeapEvent(FREE, 1, "x", 0), HeapEvent(ALLOC, 3, "z", 0),
                      HeapEvent(SHARE_WITH, 2, "y", 1), HeapEvent(FREE, 2, "y", 0), HeapEvent(FREE, 3, "z", 0)]])
    assert static_peak(ba, None).heap_peak_bytes == 510


def test_double_free_stops_with_a_warning():
    ba = BufferAssignment(logical_buffers={1: _lb(1, 8, "x")}, allocations=[_alloc(0, 8, [1])],
                          heap_traces=[[HeapEvent(ALLOC, 1, "x", 0), HeapEvent(FREE, 1, "x", 0),
                                        HeapEvent(FREE, 1, "x", 0)]])
    peak = static_peak(ba, None)
    assert peak.heap_peak_bytes == 8
    assert any("freed more often" in w for w in peak.warnings)


# ------------------------------------------------------------------ static: the project's own sample


def test_mlp_sample_static_peak_by_hand():
    dump = REPO / "sample_traces" / "mlp" / "hlo"
    if not any(dump.glob("*after_optimizations.hlo.pb")):
        pytest.skip("sample_traces/mlp has no after-optimizations HLO proto")
    peaks, _ = static_peaks_from_dump(dump)
    (peak,) = peaks
    f32 = 4
    params = f32 * (512 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 128 + 128)   # w1 b1 w2 b2 w3 b3
    batch = f32 * (256 * 512 + 256 * 128)                                       # x, y
    outputs = params + f32 + 7 * 8   # new params, the loss (f32[]) and the 7-element output tuple of pointers
    # Backward pass at its peak: the two hidden activations and the gradient flowing
    # through them (three f32[256,1024]) and the output-layer gradient f32[256,128].
    temporaries = f32 * (3 * 256 * 1024 + 256 * 128)
    assert peak.bytes_by_kind["parameter"] == params + batch
    assert peak.bytes_by_kind["output"] == outputs
    assert peak.heap_peak_bytes == temporaries
    # XLA:CPU also keeps two f32[] constants; its thread-local f32[] scratch is not counted (as in XProf).
    assert peak.bytes_by_kind["constant"] == 2 * f32 and "thread-local" not in peak.bytes_by_kind
    assert peak.peak_bytes == params + batch + outputs + temporaries + 2 * f32
    assert peak.buffers[0].size_bytes == f32 * 1024 * 1024
    assert any(b.source and "capture.py" in b.source for b in peak.buffers)


# ------------------------------------------------------------------ runtime: synthetic events


def _events(rows: list[dict]) -> pd.DataFrame:
    base = {"host": "h", "memory": "GPU_0_bfc", "stack_bytes": 0, "free_bytes": 1000, "fragmentation": 0.0,
            "peak_bytes_in_use": 0, "requested_bytes": 0, "step": -1, "tf_op": None, "region_type": None,
            "data_type": None, "shape": None}
    return pd.DataFrame([{**base, **r} for r in rows], columns=list(ALLOCATOR_COLUMNS)).astype(ALLOCATOR_COLUMNS)


def test_runtime_peak_and_what_holds_it():
    ev = _events([
        dict(time_ps=10, kind="alloc", heap_bytes=300, allocation_bytes=100, address=1, tf_op="a"),  # 200 before
        dict(time_ps=20, kind="alloc", heap_bytes=500, allocation_bytes=200, address=2, tf_op="b"),
        dict(time_ps=30, kind="free", heap_bytes=400, allocation_bytes=100, address=1),
        dict(time_ps=40, kind="alloc", heap_bytes=500, allocation_bytes=100, address=3, tf_op="c", step=4),
        dict(time_ps=50, kind="free", heap_bytes=300, allocation_bytes=200, address=2),
    ])
    (p,) = runtime_peaks(ev)
    assert p.peak_bytes == 500 and p.peak_time_ps == 40       # ties: the latest event wins, as in XProf
    assert p.capacity_bytes == 1500 and p.step == 4
    assert [(a.op, a.size_bytes) for a in p.at_peak] == [("b", 200), ("allocated before the profile", 200),
                                                              ("c", 100)]
    assert sum(a.size_bytes for a in p.at_peak) == p.peak_bytes


def test_held_at_peak_json_is_timed_from_the_origin_without_the_address():
    ev = _events([dict(time_ps=1_000_000 * t, kind="alloc", heap_bytes=100 * t, allocation_bytes=100,
                       address=t, tf_op=f"op{t}", step=t) for t in (1, 2, 3)])
    (p,) = runtime_peaks(ev)
    rows = [held_json(a, origin=1_000_000) for a in p.at_peak]
    assert [list(r) for r in rows] == [["size_bytes", "requested_bytes", "shape", "op", "region_type",
                                         "data_type", "step", "kind", "time_us"]] * 3
    assert [(r["op"], r["time_us"], r["step"]) for r in rows] == [("op1", 0.0, 1), ("op2", 1.0, 2), ("op3", 2.0, 3)]


def test_fill_steps_like_xprof():
    assert fill_steps(np.array([-1, -1, 3, -1, 5, -1])).tolist() == [0, 0, 3, 4, 5, 6]


# ------------------------------------------------------------------ references: XProf


def _xprof_reference(path: Path, tmp_path: Path) -> tuple[dict, dict]:
    """XProf's memory profile and, per module, memory viewer figures for a private copy of `path`."""
    convert = pytest.importorskip("xprof.convert.raw_to_tool_data")
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    data, _ = convert.xspace_to_tool_data([str(copy)], "memory_profile", {"use_saved_result": False})
    profile = json.loads(data) if data else {}
    convert.xspace_to_tool_names([str(copy)])  # writes <module>.hlo_proto.pb beside the copy
    modules = {}
    for f in sorted(tmp_path.glob("*.hlo_proto.pb")):
        name = f.name[: -len(".hlo_proto.pb")]
        view, _ = convert.xspace_to_tool_data([str(copy)], "memory_viewer",
                                             {"use_saved_result": False, "module_name": name})
        if view:
            modules[name] = json.loads(view)
    return profile, modules


def _close(ours: float, theirs: float) -> bool:
    return abs(ours - theirs) <= TOLERANCE * abs(theirs) + 1e-9


@pytest.mark.skipif(not XPLANES, reason=f"real traces not available in {SHARED}")
@pytest.mark.parametrize("rel", [str(p.relative_to(SHARED)) for p in XPLANES])
def test_peaks_match_xprof(rel, tmp_path):
    path = SHARED / rel
    profile, viewer = _xprof_reference(path, tmp_path)
    per_allocator = profile.get("memoryProfilePerAllocator", {})
    ours = {p.name: p for p in runtime_peaks(read_allocator_events(path))}
    assert set(ours) == set(per_allocator)
    for name, ref in per_allocator.items():
        stats = ref["profileSummary"]["peakStats"]
        p = ours[name]
        assert _close(p.peak_bytes, int(stats["peakBytesInUse"])), (name, p.peak_bytes, stats)
        assert _close(p.stack_bytes, int(stats["stackReservedBytes"])), name
        assert _close(p.heap_bytes, int(stats["heapAllocatedBytes"])), name
        assert p.capacity_bytes == int(ref["profileSummary"]["memoryCapacity"]), name
    from traceview.trace.read import load_profile

    peaks, _ = static_peaks_from_protos(load_profile(path).hlo_protos, str(path))
    by_key = {f"{p.name}({p.program_id})": p for p in peaks}
    with_buffers = {k: v for k, v in viewer.items() if v.get("maxHeap")}
    assert set(with_buffers) <= set(by_key)
    for key, ref in with_buffers.items():
        p = by_key[key]
        assert _close(p.peak_bytes / MiB, ref["peakHeapMib"]), (key, p.peak_bytes / MiB, ref["peakHeapMib"])
        # get_peak_allocations' total_hbm_mib is the memory viewer's totalBufferAllocationMib
        assert _close(p.total_allocation_bytes / MiB, ref["totalBufferAllocationMib"]), key
        # The largest buffers at the peak: XProf lumps those under its small-buffer size into one "small" row.
        theirs = sorted(((round(h["logicalBufferSizeMib"] * MiB), h["instructionName"])
                         for h in ref["maxHeap"] if h.get("instructionName")), reverse=True)
        smallest = min((s for s, _ in theirs), default=None)
        mine = sorted(((b.size_bytes, b.instruction) for b in p.buffers
                       if smallest is not None and b.size_bytes >= smallest), reverse=True)
        assert mine[:5] == theirs[:5], key


# ------------------------------------------------------------------ CLI


@pytest.mark.skipif(not XPLANES, reason=f"real traces not available in {SHARED}")
def test_cli_json_contract_on_a_gpu_trace(capsys):
    path = SHARED / "AMD-AGI-TraceLens" / "jax08_gemm" / "tw003.xplane.pb"
    if not path.exists():
        pytest.skip(f"{path} not available")
    assert main(["memory", str(path), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    gpu = next(m for m in out["memories"] if m["name"] == "GPU_0_bfc")
    for key in ("device", "name", "capacity_bytes", "peak_bytes", "peak_time_us", "step", "timeline", "at_peak"):
        assert key in gpu
    assert max(t["usage_bytes"] for t in gpu["timeline"]) == gpu["peak_bytes"]
    assert sum(a["size_bytes"] for a in gpu["at_peak"]) == gpu["peak_bytes"]
    assert gpu["headroom"]["fits"] is True and out["target"]["name"] == "mi300x"
    module = out["modules"][0]
    for key in ("program_id", "name", "peak_bytes", "buffers"):
        assert key in module
    assert set(module["buffers"][0]) >= {"instruction", "shape", "size_bytes", "kind", "source"}
    assert module["peak_bytes"] == max(m["peak_bytes"] for m in out["modules"])


def test_cli_headroom_misses_on_a_small_target(capsys):
    dump = REPO / "sample_traces" / "mlp" / "hlo"
    if not any(dump.glob("*after_optimizations.hlo.pb")):
        pytest.skip("sample_traces/mlp has no after-optimizations HLO proto")
    hw = {"chips": [{"name": "tiny", "kind": "GPU", "hbm_capacity": {"value": 1 << 20, "source": "test"}}]}
    hw_file = Path(pytest.importorskip("tempfile").mkdtemp()) / "hw.json"
    hw_file.write_text(json.dumps(hw))
    assert main(["memory", str(dump), "--target", "tiny", "--hardware-file", str(hw_file), "--format", "json"]) == 0
    room = json.loads(capsys.readouterr().out)["modules"][0]["headroom"]
    assert room["fits"] is False and room["headroom_bytes"] == (1 << 20) - room["peak_bytes"]
    assert main(["memory", str(dump), "--target", "tiny", "--hardware-file", str(hw_file)]) == 0
    assert "MISSES by" in capsys.readouterr().out


def test_cli_bad_path(tmp_path, capsys):
    assert main(["memory", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err


@pytest.mark.skipif(not XPLANES, reason=f"real traces not available in {SHARED}")
def test_absent_allocation_metadata_is_none_not_nan():
    path = SHARED / "openxla-xprof" / "tpu_inference_2.xplane.pb"
    if not path.exists():
        pytest.skip(f"{path} not available")
    events = read_allocator_events(path)
    for column in ("tf_op", "region_type", "data_type", "shape"):
        assert all(v is None or isinstance(v, str) for v in events[column]), column


def test_mutated_buffer_assignments_fail_cleanly():
    """Hostile bytes: a clean HloError or a result, never another exception or a hang."""
    from traceview.errors import HloError
    from traceview.parsers.hlo.buffer_assignment import parse_buffer_assignment
    from traceview.parsers.hlo.dump import read_bytes

    protos = sorted((REPO / "sample_traces" / "mlp" / "hlo").glob("*after_optimizations.hlo.pb"))
    if not protos:
        pytest.skip("sample_traces/mlp has no after-optimizations HLO proto")
    data = read_bytes(protos[0])
    rng = np.random.default_rng(1234)
    for _ in range(150):
        buf = bytearray(data)
        for pos in rng.integers(0, len(buf), size=int(rng.integers(1, 8))):
            buf[pos] = int(rng.integers(0, 256))
        cut = int(rng.integers(len(buf) // 2, len(buf) + 1))
        try:
            ba = parse_buffer_assignment(bytes(buf[:cut]), "fuzz")
        except HloError:
            continue
        if ba is not None:
            peak = static_peak(ba, None)
            assert peak.peak_bytes >= 0 or peak.warnings


@pytest.mark.skipif(not XPLANES, reason=f"real traces not available in {SHARED}")
def test_truncated_trace_is_a_trace_error(tmp_path):
    from traceview.errors import TraceError

    path = SHARED / "AMD-AGI-TraceLens" / "jax08_gemm" / "tw003.xplane.pb"
    if not path.exists():
        pytest.skip(f"{path} not available")
    data = path.read_bytes()
    for cut in (len(data) // 3, len(data) // 2):
        bad = tmp_path / "cut.xplane.pb"
        bad.write_bytes(data[:cut])
        with pytest.raises(TraceError, match="cut.xplane.pb"):
            read_allocator_events(bad)


NVIDIA_DUMPS = sorted((SHARED / "NVIDIA-JAX-Toolbox").rglob("*after_optimizations.hlo.pb.xz")) if SHARED.is_dir() else []


@pytest.mark.skipif(not NVIDIA_DUMPS, reason=f"the NVIDIA dumps are not available in {SHARED}")
@pytest.mark.parametrize("dump", NVIDIA_DUMPS, ids=lambda p: p.name.split(".")[1])
def test_dump_static_peak_matches_xprof_memory_viewer(dump, tmp_path):
    """H100 MaxText and A100 Pax train steps: XProf's memory viewer reads the same HloProto.

    XProf's viewer takes a module as ``<name>.hlo_proto.pb`` beside a session's xplane: any xplane will do.
    """
    import lzma

    convert = pytest.importorskip("xprof.convert.raw_to_tool_data")
    anchor = next(iter(XPLANES), None)
    if anchor is None:
        pytest.skip("no xplane to anchor XProf's session")
    shutil.copy(anchor, tmp_path / "anchor.xplane.pb")
    (tmp_path / "dumped.hlo_proto.pb").write_bytes(lzma.decompress(dump.read_bytes()))
    view, _ = convert.xspace_to_tool_data([str(tmp_path / "anchor.xplane.pb")], "memory_viewer",
                                          {"use_saved_result": False, "module_name": "dumped"})
    ref = json.loads(view)
    (peak,), _ = static_peaks_from_dump(dump)
    assert _close(peak.peak_bytes / MiB, ref["peakHeapMib"]), (peak.peak_bytes / MiB, ref["peakHeapMib"])
    assert _close(peak.total_allocation_bytes / MiB, ref["totalBufferAllocationMib"])
    theirs = sorted((round(h["logicalBufferSizeMib"] * MiB) for h in ref["maxHeap"] if h.get("instructionName")),
                    reverse=True)
    assert [b.size_bytes for b in peak.buffers[:len(theirs)]][:10] == theirs[:10]
    names = {h["instructionName"] for h in ref["maxHeap"] if h.get("instructionName")}
    assert {b.instruction for b in peak.buffers[:5]} <= names


def test_text_buffer_assignment_agrees_with_the_proto(jax_hlo_dump, tmp_path):
    """An XLA dump in text only (*-buffer-assignment.txt beside the HLO text) gives the same allocations.

    The text has no heap simulator trace, so its peak counts the temporaries' allocation whole: equal to
    the allocation total, never below the proto's exact peak.
    """
    dump = jax_hlo_dump / "dump"
    texts = sorted(dump.glob("*after_optimizations-buffer-assignment.txt"))
    if not texts:
        pytest.skip("this XLA writes no *-buffer-assignment.txt")
    text_only = tmp_path / "text"
    text_only.mkdir()
    for f in dump.glob("*after_optimizations*.txt"):
        shutil.copy(f, text_only / f.name)
    from_text, _ = static_peaks_from_dump(text_only)
    from_proto, _ = static_peaks_from_dump(dump)
    assert len(from_text) == len(texts) == len(from_proto)
    upper_bounds = 0
    for t, p in zip(from_text, from_proto):   # both in module-id order
        assert t.name == p.name
        assert t.total_allocation_bytes == p.total_allocation_bytes
        assert t.indefinite_bytes == p.indefinite_bytes
        assert t.peak_bytes == t.total_allocation_bytes >= p.peak_bytes
        upper_bounds += not t.exact
    assert upper_bounds > 0   # the fixture's programs have temporaries


def test_allocator_events_of_a_file_the_compiled_reader_would_take(monkeypatch):
    """Large traces go to the compiled reader, whose lines keep no per-event bytes: the allocator events
    must still be read (the same rows as for a small file), never a TypeError."""
    pytest.importorskip("numba")
    from traceview.parsers.xspace import file as xspace_file

    path = SHARED / "openxla-xprof" / "tpu_inference_2.xplane.pb"
    if not path.exists():
        pytest.skip(f"{path} not available")
    expected = read_allocator_events(path)
    assert len(expected) > 0
    monkeypatch.setattr(xspace_file, "_FAST_MIN_BYTES", 0)  # every file counts as large
    pd.testing.assert_frame_equal(read_allocator_events(path), expected)
