"""parsers.xspace.reader on the real traces: devices, steps, HLO protos, gzip, nesting, bad input."""

from __future__ import annotations

import gzip
import shutil

import numpy as np
import pandas as pd
import pytest

from traceview.errors import TraceError, UserError
from traceview.parsers.profile import HOST_EVENT_COLUMNS, OP_COLUMNS, STEP_COLUMNS
from traceview.parsers.tables.conventions import as_uint64
from traceview.parsers.tables.nesting import self_times
from traceview.parsers.xspace.file import load_xspace
from traceview.parsers.xspace.reader import read_xplane
from traceview.parsers.xspace.schema import XSpace

TPU = "openxla-xprof/tpu_inference_2.xplane.pb"
V100 = "tensorflow-profiler/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
MI300X_GEMM = "AMD-AGI-TraceLens/jax08_gemm/tw003.xplane.pb"
MI355X = "AMD-AGI-TraceLens/te_fused_attn/934987a2fc2f.xplane.pb"
LEGACY = "AMD-AGI-TraceLens/jax_conv_minimal_legacy"


def _check_dtypes(frame: pd.DataFrame, columns: dict[str, str]) -> None:
    assert list(frame.columns) == list(columns)
    for name, dtype in columns.items():
        assert str(frame[name].dtype) == dtype, name


def test_every_real_trace_reads_with_contract_dtypes(shared_traces):
    files = sorted(shared_traces.rglob("*.xplane.pb"))
    assert files
    for f in files:
        td = read_xplane(f)
        _check_dtypes(td.ops, OP_COLUMNS)
        _check_dtypes(td.host_events, HOST_EVENT_COLUMNS)
        _check_dtypes(td.steps, STEP_COLUMNS)
        assert len(td.ops) > 0, f
        assert (td.ops["self_ps"] <= td.ops["duration_ps"]).all()
        assert (td.ops["self_ps"] >= 0).all()


def test_tpu_v6e_devices_as_the_trace_states(shared_traces):
    td = read_xplane(shared_traces / TPU)
    tpus = [d for d in td.devices if d.kind == "TPU"]
    assert [d.id for d in tpus] == [f"tpu_inference_2/TPU:{i}" for i in range(4)]
    for d in tpus:
        assert d.model == "TPU v6 Lite"
        assert d.peak_flops == pytest.approx(918e12)
        assert d.hbm_bandwidth == pytest.approx(1638e9, rel=1e-3)
        assert d.stats["device_type_string"] == "TPU v6 Lite"


def test_tpu_ops_carry_trace_cost_and_module(shared_traces):
    td = read_xplane(shared_traces / TPU)
    ops = td.ops
    ar = ops[ops["op"] == "all-reduce"]
    # 3 executions of jit__psum on each of 4 chips.
    assert len(ar) == 12
    assert set(ar["module"]) == {"jit__psum"}
    assert set(ar["category"]) == {"all-reduce"}
    # the program id is a uint64 above 2^63, kept bit for bit
    assert {as_uint64(int(p)) for p in ar["program_id"]} == {9646411105960254074}
    assert "jit__psum(9646411105960254074)" in td.hlo_protos
    assert (ar["trace_flops"] == 1342177280).all()
    assert (ar["trace_bytes"] == 10737418240).all()
    # every module name seen in the op table has its HLO proto in /host:metadata
    keys = {f"{m}({as_uint64(int(p))})" for m, p in ops[["module", "program_id"]].drop_duplicates().itertuples(index=False)}
    assert keys <= set(td.hlo_protos)


def test_tpu_steps_are_main_module_executions(shared_traces):
    td = read_xplane(shared_traces / TPU)
    assert set(td.steps["source"]) == {"module"}
    main_ops = td.ops[td.ops["module"] == "jit_f"]
    assert (main_ops["step"] >= 0).all()
    per_device = td.steps.groupby("device", observed=True).size()
    assert len(per_device) == 4 and per_device.nunique() == 1


def test_mi300x_device(shared_traces):
    td = read_xplane(shared_traces / MI300X_GEMM)
    gpus = [d for d in td.devices if d.kind == "GPU"]
    assert len(gpus) == 8
    g = gpus[0]
    assert (g.vendor, g.compute_capability, g.core_count) == ("AMD", "9.4", 304)
    assert g.clock_hz == pytest.approx(2.1e9)
    assert g.memory_bytes == 206141652992
    assert td.environment == {} or isinstance(td.environment, dict)
    assert "jit_dot(64)" in td.hlo_protos


def test_mi355x_device(shared_traces):
    td = read_xplane(shared_traces / MI355X)
    g = next(d for d in td.devices if d.id.endswith("GPU:0"))
    assert (g.vendor, g.compute_capability, g.core_count) == ("AMD", "9.5", 256)
    assert g.hbm_bandwidth == pytest.approx(4.096e12)
    assert "profile_start_time" in td.environment
    # the Megascale plane has no events and is not a device
    assert all("CUSTOM" not in d.id for d in td.devices)


def test_v100_tensorflow_trace(shared_traces):
    td = read_xplane(shared_traces / V100)
    g = next(d for d in td.devices if d.id.endswith("GPU:4"))
    assert (g.compute_capability, g.core_count) == ("7.0", 80)
    assert g.clock_hz == pytest.approx(1.53e9)
    # only GPU:1, 4 and 6 have events
    assert set(td.ops["device"].astype(str).str.rsplit("/", n=1).str[1]) == {"GPU:1", "GPU:4", "GPU:6"}
    # Steps come from the Steps lines of GPU:4 and GPU:6
    assert set(td.steps["source"]) == {"steps_line"}
    assert sorted(td.steps["device"].astype(str).str.rsplit("/", n=1).str[1]) == ["GPU:4", "GPU:6"]
    # kernels on a Compute stream are named by their TensorFlow op ("level 0" stat)
    compute = td.ops[td.ops["line"].astype(str).str.contains("Compute")]
    assert compute["op"].astype(str).str.startswith("replica_").mean() > 0.9
    assert (td.ops["program_id"] == -1).all()


def test_hlo_protos_from_metadata_plane_equal_files_beside(shared_traces):
    folder = shared_traces / LEGACY
    td = read_xplane(next(folder.glob("*.xplane.pb")))
    files = sorted(folder.glob("*.hlo_proto.pb"))
    assert len(files) == 8
    for f in files:
        assert td.hlo_protos[f.name[: -len(".hlo_proto.pb")]] == f.read_bytes()


def test_cpu_sample_trace(sample_traces):
    f = next(sample_traces.glob("mlp/plugins/profile/*/*.xplane.pb"))
    td = read_xplane(f)
    assert [d.kind for d in td.devices] == ["CPU"]
    assert set(td.ops["device"]) == {f"{td.host}/CPU:0"}  # thunks name their device ordinal
    assert "jit_train_step" in set(td.ops["module"])
    assert set(td.steps["source"]) == {"host_annotation"}
    assert (td.ops["step"] >= 0).all()
    assert "jax_version" in td.environment
    # op events left the host table; python events stayed
    assert not td.host_events["name"].isin(td.ops["op"].astype(str).unique()).all()


def test_gzip_gives_the_same_tables(shared_traces, tmp_path):
    src = shared_traces / MI300X_GEMM
    gz = tmp_path / "tw003.xplane.pb.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    a, b = read_xplane(src), read_xplane(gz)
    assert a.host == b.host == "tw003"
    pd.testing.assert_frame_equal(a.ops, b.ops)
    pd.testing.assert_frame_equal(a.host_events, b.host_events)


# ---------------------------------------------------------------- bad input


def _expect_trace_error(path, fragment: str) -> None:
    with pytest.raises(TraceError) as info:
        read_xplane(path)
    msg = str(info.value)
    assert str(path) in msg and fragment in msg and "\n" not in msg
    assert isinstance(info.value, UserError)


def test_empty_file(tmp_path):
    f = tmp_path / "h.xplane.pb"
    f.write_bytes(b"")
    _expect_trace_error(f, "empty")


def test_truncated_file(shared_traces, tmp_path):
    data = (shared_traces / MI300X_GEMM).read_bytes()
    f = tmp_path / "h.xplane.pb"
    f.write_bytes(data[: len(data) // 2 + 3])
    _expect_trace_error(f, "truncated")


def test_truncated_gzip(shared_traces, tmp_path):
    data = gzip.compress((shared_traces / MI300X_GEMM).read_bytes())
    f = tmp_path / "h.xplane.pb.gz"
    f.write_bytes(data[: len(data) // 2])
    _expect_trace_error(f, "gzip")


def test_text_file(tmp_path):
    f = tmp_path / "h.xplane.pb"
    f.write_text("this is not a protobuf\n" * 20)
    with pytest.raises(TraceError) as info:
        read_xplane(f)
    assert str(f) in str(info.value)


def test_other_protobuf(tmp_path):
    from google.protobuf import descriptor_pb2

    other = descriptor_pb2.FileDescriptorProto(name="x.proto", package="p")
    other.message_type.add(name="M")
    f = tmp_path / "h.xplane.pb"
    f.write_bytes(other.SerializeToString())
    _expect_trace_error(f, "not a")


def test_space_with_no_events(tmp_path):
    space = XSpace()
    space.planes.add(name="/device:GPU:0", id=1)
    f = tmp_path / "h.xplane.pb"
    f.write_bytes(space.SerializeToString())
    _expect_trace_error(f, "no events")
    # host events but no device ops: readable, with warnings naming what is missing
    host = space.planes.add(name="/host:CPU")
    host.event_metadata[1].name = "work"
    host.lines.add(name="python").events.add(metadata_id=1, offset_ps=5, duration_ps=10)
    f.write_bytes(space.SerializeToString())
    td = read_xplane(f)
    assert td.ops.empty and len(td.host_events) == 1
    assert any("no device op events" in w for w in td.warnings)
    assert any("no events on 1 device(s): h/GPU:0" in w for w in td.warnings)
    assert load_xspace(f).planes[0].name == "/device:GPU:0"


# ------------------------------------------------------------- self time


def _self_times_reference(start, dur):
    """Brute force: direct children are contained events with no contained event between."""
    n = len(start)
    end = start + dur
    out = dur.copy()
    for i in range(n):
        if dur[i] == 0:
            continue
        inside = [j for j in range(n) if j != i and dur[j] > 0 and start[i] <= start[j] and end[j] <= end[i]
                  and not (start[j] == start[i] and end[j] == end[i] and j < i)]
        direct = [j for j in inside if not any(k != j and start[k] <= start[j] and end[j] <= end[k]
                                               and not (start[k] == start[j] and end[k] == end[j] and k > j)
                                               for k in inside)]
        out[i] = dur[i] - sum(dur[j] for j in direct)
    return out


def _random_nested(rng, n_roots=6, depth=3):
    starts, durs = [], []

    def fill(lo, hi, d):
        t = lo
        while t < hi and d >= 0:
            s = t + int(rng.integers(0, 5))
            e = min(hi, s + int(rng.integers(1, 60)))
            if s >= e:
                break
            starts.append(s)
            durs.append(e - s)
            if d > 0 and rng.random() < 0.7:
                fill(s, e, d - 1)
            t = e + int(rng.integers(0, 3))
            if rng.random() < 0.3:
                break

    for r in range(n_roots):
        fill(r * 100, r * 100 + 90, depth)
    perm = rng.permutation(len(starts))
    return np.array(starts, dtype=np.int64)[perm], np.array(durs, dtype=np.int64)[perm]


@pytest.fixture(params=["numpy", "compiled"])
def nesting_path(request, monkeypatch):
    """self_times through each of its two implementations (the compiled one where numba is installed)."""
    from traceview.parsers.native import loader as native_loader

    if request.param == "compiled" and not native_loader.enabled():
        pytest.skip("numba is not installed")
    monkeypatch.setattr(native_loader, "loaded", lambda: request.param == "compiled")
    return request.param


@pytest.mark.parametrize("seed", range(8))
def test_self_times_match_brute_force(seed, nesting_path):
    rng = np.random.default_rng(seed)
    start, dur = _random_nested(rng)
    np.testing.assert_array_equal(self_times(start, dur), _self_times_reference(start, dur))


@pytest.mark.parametrize("seed", range(4))
def test_self_times_of_events_already_in_time_order(seed, nesting_path):
    """Lines usually hold their events in (start, longest first) order: that order skips the sort."""
    rng = np.random.default_rng(100 + seed)
    start, dur = _random_nested(rng)
    order = np.lexsort((-(start + dur), start))
    start, dur = start[order], dur[order]
    np.testing.assert_array_equal(self_times(start, dur), _self_times_reference(start, dur))


def test_self_times_flat_and_zero_length(nesting_path):
    start = np.array([0, 10, 10, 20], dtype=np.int64)
    dur = np.array([10, 0, 10, 5], dtype=np.int64)
    np.testing.assert_array_equal(self_times(start, dur), dur)
    # a parent with two children and a zero-length marker inside
    start = np.array([0, 1, 5, 3], dtype=np.int64)
    dur = np.array([10, 2, 3, 0], dtype=np.int64)
    np.testing.assert_array_equal(self_times(start, dur), [5, 2, 3, 0])


def test_self_times_with_partial_overlaps():
    """Partial overlaps (threads, async work) have no brute-force definition: the compiled walk must give
    exactly what the vectorized passes give, including an event that outlives its parent."""
    from traceview.parsers.native import loader as native_loader
    from traceview.parsers.tables.nesting import _nested_children_by_level, nested_children

    if not native_loader.enabled():  # loads the kernels: nested_children is then the compiled walk
        pytest.skip("numba is not installed")

    # A [0,10) holds B [2,6): 4 of A's time. C [5,15) starts with A and B open: depth 2, parent B, and
    # 1 of it lies inside B. D [12,14) starts when only C is open: depth 1, so its parent is the last
    # depth-0 event, A, which ended before D began: nothing.
    s = np.array([0, 2, 5, 12], dtype=np.int64)
    e = np.array([10, 6, 15, 14], dtype=np.int64)
    assert _nested_children_by_level(s, e).tolist() == [4, 1, 0, 0]
    assert nested_children(s, e).tolist() == [4, 1, 0, 0]
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(2, 400))
        s = np.sort(rng.integers(0, 1000, n))
        e = s + rng.integers(1, 200, n)
        order = np.lexsort((-e, s))
        s, e = s[order], e[order]
        np.testing.assert_array_equal(nested_children(s, e), _nested_children_by_level(s, e))



def test_self_times_of_lines_in_order_in_one_compiled_pass(monkeypatch):
    """The one-pass kernel (lines already in (start, longest first) order) gives what the numpy passes
    give: partial overlaps, ties, zero and negative durations (which neither have nor are children),
    and a line out of order is left to the sorting path."""
    from traceview.parsers.native import loader as native_loader
    from traceview.parsers.tables.nesting import _self_times_in_order

    if not native_loader.enabled():
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(11)
    for trial in range(60):
        n = int(rng.integers(2, 500))
        s = np.sort(rng.integers(0, 1000 if trial % 2 else 50, n))
        d = rng.integers(-3 if trial % 3 == 0 else 0, 200, n)
        order = np.lexsort((-(s + np.maximum(d, 0)), s))
        s, d = s[order].astype(np.int64), d[order].astype(np.int64)
        compiled = _self_times_in_order(s, d)
        monkeypatch.setattr(native_loader, "loaded", lambda: False)
        numpy_path = self_times(s, d)
        monkeypatch.undo()
        if compiled is None:  # a zero / negative duration between ties can break the order of the others
            pos = d > 0
            sp, ep = s[pos], s[pos] + d[pos]
            assert not ((sp[1:] > sp[:-1]) | ((sp[1:] == sp[:-1]) & (ep[1:] <= ep[:-1]))).all()
            continue
        np.testing.assert_array_equal(compiled, numpy_path)
    s = np.array([5, 0], dtype=np.int64)
    assert _self_times_in_order(s, np.array([1, 10], dtype=np.int64)) is None

def test_copy_of_trace_keeps_host_name(shared_traces, tmp_path):
    f = tmp_path / "myhost.xplane.pb"
    shutil.copy(shared_traces / MI300X_GEMM, f)
    assert read_xplane(f).host == "myhost"


# ------------------------------------------------------- columnar event decoder


def test_columnar_decoder_matches_protobuf_parser(shared_traces):
    """decode_events gives the same events and stats as protobuf's own parser, on every real trace."""
    from traceview.parsers.xspace.schema import XSpaceRaw, decode_events

    kinds = {"double_value": 2, "uint64_value": 3, "int64_value": 4, "str_value": 5, "bytes_value": 6,
             "ref_value": 7, None: 0}
    for f in sorted(shared_traces.rglob("*.xplane.pb")):
        data = f.read_bytes()
        raw, full = XSpaceRaw.FromString(data), XSpace.FromString(data)
        for raw_plane, plane in zip(raw.planes, full.planes):
            for raw_line, line in zip(raw_plane.lines, plane.lines):
                cols = decode_events(raw_line.events)
                events = list(line.events)
                np.testing.assert_array_equal(cols.metadata_id, [e.metadata_id for e in events])
                np.testing.assert_array_equal(cols.offset_ps, [e.offset_ps for e in events])
                np.testing.assert_array_equal(cols.duration_ps, [e.duration_ps for e in events])
                stats = [(i, s) for i, e in enumerate(events) for s in e.stats]
                assert cols.stat_event.tolist() == [i for i, _ in stats]
                assert cols.stat_id.tolist() == [s.metadata_id for _, s in stats]
                assert cols.stat_kind.tolist() == [kinds[s.WhichOneof("value")] for _, s in stats]
                for k, (_, s) in enumerate(stats):
                    which = s.WhichOneof("value")
                    if which in ("str_value", "bytes_value"):
                        got = cols.stat_bytes(k)
                        assert got == (s.str_value.encode() if which == "str_value" else s.bytes_value)
                    elif which == "double_value":
                        assert cols.stat_bits[k:k + 1].view(np.float64)[0] == s.double_value
                    elif which == "int64_value":
                        assert cols.stat_bits[k:k + 1].view(np.int64)[0] == s.int64_value
                    elif which is not None:
                        assert int(cols.stat_bits[k]) == getattr(s, which)


def test_corrupt_event_bytes(tmp_path):
    from traceview.parsers.xspace.schema import XSpaceRaw

    space = XSpaceRaw()
    plane = space.planes.add(name="/device:GPU:0")
    line = plane.lines.add(name="Stream #1")
    line.events.append(b"\x08\x01\x22\xff\x01")  # a stats field claiming 255 bytes
    f = tmp_path / "h.xplane.pb"
    f.write_bytes(space.SerializeToString())
    _expect_trace_error(f, "corrupt events")


def test_cpu_sharded_sample_has_one_device_per_ordinal(sample_traces):
    """The sharded sample forces 8 host devices: every one runs its share of the collectives."""
    f = next(sample_traces.glob("sharded/plugins/profile/*/*.xplane.pb"))
    td = read_xplane(f)
    expected = {f"{td.host}/CPU:{i}" for i in range(8)}
    assert {d.id for d in td.devices} == expected
    assert set(td.ops["device"].astype(str)) == expected
    per_device = td.ops.groupby("device", observed=True)["op"].agg(lambda ops: set(map(str, ops)))
    collectives = [op for op in per_device.iloc[0] if op.startswith(("all_gather", "reduce_scatter", "psum"))]
    assert collectives, "no collective ops on device 0"
    for ops in per_device:
        assert set(collectives) <= ops


def _jax_reference_cpu_ops(xplane):
    """Per (module, op): count and total time, from JAX's own xplane reader (jax.profiler.ProfileData).

    An op that XLA:CPU hands to its thread pool ends at its `end: <op>` marker
    (the marker's `_c` flow id equals the op's `_p`), not at its own event's end.
    """
    ProfileData = pytest.importorskip("jax.profiler").ProfileData
    ops, marker_end = [], {}
    for plane in ProfileData.from_file(str(xplane)).planes:
        for line in plane.lines:
            for ev in line.events:
                stats = dict(ev.stats)
                end_ns = ev.start_ns + ev.duration_ns
                if ev.name.startswith("end: ") and "_c" in stats:
                    marker_end[int(stats["_c"])] = end_ns
                elif "hlo_op" in stats:
                    ops.append((str(stats["hlo_module"]), str(stats["hlo_op"]), ev.start_ns, end_ns,
                                int(stats["_p"]) if "_p" in stats else None))
    totals: dict[tuple[str, str], list[float]] = {}
    for module, op, start, end, flow in ops:
        entry = totals.setdefault((module, op), [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += max(end, marker_end.get(flow, end)) - start
        entry[2] += end - start  # the launch event alone
    return totals


@pytest.mark.parametrize("sample", ["mlp_slow", "transformer"])
def test_cpu_op_times_run_to_their_end_markers(sample_traces, sample):
    """CPU op durations (launch to `end:` marker) agree with the same rule applied through JAX's reader."""
    xplane = next(sample_traces.glob(f"{sample}/plugins/profile/*/*.xplane.pb"))
    ref = _jax_reference_cpu_ops(xplane)
    td = read_xplane(xplane)
    got = td.ops.groupby(["module", "op"], observed=True)["duration_ps"].agg(["size", "sum"])
    ours = {(str(m), str(o)): (int(r["size"]), r["sum"] / 1e3) for (m, o), r in got.iterrows()}
    assert set(ours) == set(ref)
    for key, (count, total_ns, _) in ref.items():
        assert ours[key][0] == count, key
        # ProfileData gives float nanoseconds: allow 1 ns per occurrence of rounding.
        assert abs(ours[key][1] - total_ns) <= count + 1e-6 * total_ns, (key, ours[key][1], total_ns)
    # The rule matters: some ops run far past their launch event.
    assert any(total > 2 * launch for _, total, launch in ref.values())


def test_unreported_figures_hold_no_memory_and_a_profile_can_change_them():
    """GPU and CPU rows' trace flops and bytes (the trace does not report them): read as one NaN seen on every
    row (no 16 bytes per row), the same values as before; a Profile's op table holds writable columns."""
    from traceview.parsers.tables.columns import is_unreported
    from traceview.trace.read import ReadOptions, load_profile

    path = "sample_traces/transformer"
    (trace,) = sorted(__import__("pathlib").Path(path).rglob("*.xplane.pb"))
    ops = read_xplane(trace).ops
    for name in ("trace_flops", "trace_bytes"):
        values = ops[name].to_numpy()
        assert is_unreported(values) and values.nbytes == 8 * len(ops) and np.isnan(values).all()
    profile = load_profile(path, options=ReadOptions(cache=False, jobs=1))
    assert len(profile.kept.ops) == len(ops)
    for name in ("trace_flops", "trace_bytes"):
        assert not is_unreported(profile.kept.ops[name].to_numpy())
        profile.kept.ops.loc[profile.kept.ops.index[0], name] = 2.0
        assert profile.kept.ops[name].iloc[0] == 2.0 and profile.kept.ops[name].iloc[1:].isna().all()
