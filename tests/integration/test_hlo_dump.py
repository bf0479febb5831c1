"""Dump folders: one module per dumped module, the right stage, the other files left alone."""

from __future__ import annotations

import shutil

import pytest

from traceview.errors import HloError, UserError
from traceview.parsers.hlo.dump import classify_file, load_hlo_modules, match_module, read_hlo_file
from traceview.parsers.hlo.text import parse_hlo_text


def test_jax_dump_folder_both_stages(jax_hlo_dump):
    dump = jax_hlo_dump / "dump"
    after, warnings = load_hlo_modules(dump)
    assert warnings == []  # buffer assignments, .ll, .o, debug options... are recognised
    before, _ = load_hlo_modules(dump, stage="before")
    # one module per module_NNNN id XLA wrote (independent: the file names)
    ids = {int(f.name.split(".")[0].split("_")[1]) for f in dump.glob("module_*_optimizations.txt")}
    assert [m.module_id for m in after] == sorted(ids)
    assert [m.module_id for m in before] == sorted(ids)
    assert {m.stage for m in after} == {"after"} and {m.stage for m in before} == {"before"}
    for m in after:
        assert m.file.endswith("after_optimizations.hlo.pb")  # the proto form is preferred
    ops_after = match_module(after, "jit_ops")
    ops_before = match_module(before, "jit_ops")
    assert ops_after is not None and ops_before is not None
    assert ops_after.module_id == ops_before.module_id
    # the optimized module is the one compiled.as_text() gives
    reference = parse_hlo_text((jax_hlo_dump / "ops.as_text.txt").read_text())
    assert {c: [i.name for i in comp.instructions] for c, comp in reference.computations.items()} == \
        {c: [i.name for i in comp.instructions] for c, comp in ops_after.computations.items()}
    assert any(i.opcode == "fusion" for c in ops_after.computations.values() for i in c.instructions)
    assert not any(i.opcode == "fusion" for c in ops_before.computations.values() for i in c.instructions)


def test_text_only_folder(jax_hlo_dump, tmp_path):
    """Without the protos, the text files are read, and give the same modules."""
    for f in (jax_hlo_dump / "dump").glob("*"):
        if f.is_file() and not f.name.endswith(".hlo.pb"):
            shutil.copy(f, tmp_path / f.name)
    from_text, warnings = load_hlo_modules(tmp_path)
    from_proto, _ = load_hlo_modules(jax_hlo_dump / "dump")
    assert warnings == []
    assert all(m.file.endswith("after_optimizations.txt") for m in from_text)
    assert [(m.module_id, m.name, sum(len(c.instructions) for c in m.computations.values()))
            for m in from_text] == \
        [(m.module_id, m.name, sum(len(c.instructions) for c in m.computations.values())) for m in from_proto]


def test_nvidia_dumps(shared_traces):
    folder = shared_traces / "NVIDIA-JAX-Toolbox"
    after, warnings = load_hlo_modules(folder)
    before, _ = load_hlo_modules(folder, stage="before")
    assert warnings == []
    assert [(m.module_id, m.name) for m in after] == [(16, "jit_train_step"), (40, "pjit__wrapped_step_fn")]
    assert [(m.module_id, m.name) for m in before] == [(16, "jit_train_step"), (40, "pjit__wrapped_step_fn")]
    for a, b in zip(after, before):
        assert a.stage == "after" and b.stage == "before"
        assert a.entry.endswith("_spmd") and not b.entry.endswith("_spmd")  # SPMD-partitioned after
    # the H100 module id in the file name is the id inside the proto too
    assert read_hlo_file(next(folder.glob("maxtext*/dump/*after*.pb.xz"))).module_id == 16


def test_profiler_protos_carry_program_ids(shared_traces):
    folder = shared_traces / "AMD-AGI-TraceLens" / "jax_conv_minimal_legacy"
    modules, warnings = load_hlo_modules(folder)
    assert warnings == []
    files = sorted(folder.glob("*.hlo_proto.pb"))
    assert len(modules) == len(files) == 8
    for m in modules:
        # "jit__normal(11).hlo_proto.pb": the number in the name is the id inside the proto
        assert m.program_id == m.module_id
        assert m.file.endswith(f"{m.name}({m.program_id}).hlo_proto.pb")
    two = [m for m in modules if m.name == "jit__normal"]
    assert len(two) == 2
    assert match_module(modules, "jit__normal", program_id=9).program_id == 9
    assert match_module(modules, "jit__normal(11)").program_id == 11
    assert match_module(modules, "jit_forward_3d_conv").name == "jit_forward_3d_conv"
    assert match_module(modules, "jit_nothing") is None


def test_single_files(shared_traces):
    text = shared_traces / "AI-Hypercomputer-maxtext" / "reference_hlo_qwen3_1.7b.txt"
    modules, warnings = load_hlo_modules(text)
    assert len(modules) == 1 and any("no ENTRY" in w for w in warnings)
    xz = next((shared_traces / "NVIDIA-JAX-Toolbox").glob("pax*/dump/*before*.hlo.pb.xz"))
    (module,), _ = load_hlo_modules(xz)
    assert module.stage == "before" and module.name == "pjit__wrapped_step_fn"


def test_file_names_are_classified():
    from pathlib import Path

    cases = {
        "module_0016.jit_train_step.sm_9.0_gpu_after_optimizations.hlo.pb.xz": ("proto", 16, "after"),
        "module_0003.jit_f.cpu_after_optimizations.txt": ("text", 3, "after"),
        "module_0001.jit_f.before_optimizations.txt": ("text", 1, "before"),
        "module_0001.jit_f.tpu_after_optimizations.txt": ("text", 1, "after"),
    }
    for name, (kind, mid, stage) in cases.items():
        info = classify_file(Path(name))
        assert (info.kind, info.module_id, info.stage) == (kind, mid, stage), name
        assert info.name in ("jit_train_step", "jit_f")
    for other in ("module_0003.jit_f.cpu_after_optimizations-buffer-assignment.txt",
                  "module_0016.jit_train_step.autotune_results.pbtxt.xz",
                  "module_0006.jit_f.ir-with-opt.ll", "host.xplane.pb"):
        assert classify_file(Path(other)) is None, other


def test_errors(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_hlo_modules(tmp_path / "missing")
    (tmp_path / "notes.md").write_text("hello")
    with pytest.raises(UserError, match="no HLO modules found"):
        load_hlo_modules(tmp_path)
    bad = tmp_path / "module_0001.jit_f.before_optimizations.hlo.pb.xz"
    bad.write_bytes(b"not xz at all")
    # A folder whose only module file is unreadable: nothing to analyse, and the error says why.
    with pytest.raises(UserError, match="no HLO modules found.*corrupt .xz"):
        load_hlo_modules(tmp_path)
    with pytest.raises(UserError, match="stage"):
        load_hlo_modules(tmp_path, stage="middle")
    with pytest.raises(HloError, match="notes.md: neither HLO text"):
        load_hlo_modules(tmp_path / "notes.md")


def test_a_dump_reads_only_the_modules_wanted(jax_hlo_dump, monkeypatch):
    """A module whose text header names one not wanted is neither parsed in text nor in proto form."""
    from traceview.parsers.hlo import dump as hlo_dump

    dump = jax_hlo_dump / "dump"
    every, _ = load_hlo_modules(dump)
    assert len(every) > 2 and "jit_ops" in {m.name for m in every}
    read = []
    real = hlo_dump.read_hlo_file
    monkeypatch.setattr(hlo_dump, "read_hlo_file", lambda p, *data: read.append(p) or real(p, *data))
    some, warnings = load_hlo_modules(dump, wanted=lambda name: name in ("jit_ops", "jit_gspmd"))
    assert warnings == []
    assert sorted(m.name for m in some) == ["jit_gspmd", "jit_ops"]
    assert len(read) == 2
    by_name = {m.name: m for m in every}
    for m in some:   # the same modules as the full read gives
        assert m.module_id == by_name[m.name].module_id
        assert [i.name for c in m.computations.values() for i in c.instructions] == \
            [i.name for c in by_name[m.name].computations.values() for i in c.instructions]
    assert load_hlo_modules(dump, wanted=lambda name: False) == ([], [])    # none wanted: no error


def test_a_dump_read_again_reuses_the_modules_converted(jax_hlo_dump, monkeypatch):
    """What a filtered read converted, a later read of the whole dump reuses: the same list, in the same
    order, each module read once (PipelineResult.hlo.every after the analysis read the modules that ran)."""
    from traceview.parsers.hlo import dump as hlo_dump

    dump = jax_hlo_dump / "dump"
    every, every_warnings = load_hlo_modules(dump)
    read = []
    real = hlo_dump.read_hlo_file
    monkeypatch.setattr(hlo_dump, "read_hlo_file", lambda p, *data: read.append(p) or real(p, *data))
    converted: dict = {}
    some, _ = load_hlo_modules(dump, wanted=lambda name: name in ("jit_ops", "jit_gspmd"), converted=converted)
    again, again_warnings = load_hlo_modules(dump, converted=converted)
    assert len(read) == len(every)                                     # the two wanted ones once, not twice
    assert [m.name for m in again] == [m.name for m in every] and again_warnings == every_warnings
    assert all(any(m is s for m in again) for s in some)
    assert [len(m.computations) for m in again] == [len(m.computations) for m in every]


@pytest.mark.parametrize("form", ["proto only", "text compressed", "proto and text compressed"])
def test_a_dump_without_plain_text_reads_only_the_modules_wanted(jax_hlo_dump, tmp_path, monkeypatch, form):
    """Modules dumped only as protos, or as compressed text, are named without being converted: the
    proto decoded by protobuf (and read once), the text's first 4 KB decompressed."""
    import gzip
    import lzma
    import shutil

    from traceview.parsers.hlo import dump as hlo_dump
    from traceview.parsers.hlo import proto as hlo_proto

    dump = tmp_path / "dump"
    shutil.copytree(jax_hlo_dump / "dump", dump)
    for i, f in enumerate(sorted(dump.glob("*_optimizations.txt"))):
        if form != "proto only":  # gzip and xz in turn
            suffix, pack = (".gz", gzip.compress) if i % 2 else (".xz", lzma.compress)
            f.with_name(f.name + suffix).write_bytes(pack(f.read_bytes()))
        f.unlink()
    if form == "text compressed":
        for f in dump.glob("*.hlo.pb"):
            f.unlink()
    every, _ = load_hlo_modules(dump)
    assert len(every) > 2 and {"jit_ops", "jit_gspmd"} <= {m.name for m in every}
    read, converted = [], []
    real_read, real_convert = hlo_dump.read_hlo_file, hlo_proto._convert_module
    monkeypatch.setattr(hlo_dump, "read_hlo_file", lambda p, *data: read.append(p) or real_read(p, *data))
    monkeypatch.setattr(hlo_proto, "_convert_module", lambda mp, f: converted.append(f) or real_convert(mp, f))
    some, warnings = load_hlo_modules(dump, wanted=lambda name: name in ("jit_ops", "jit_gspmd"))
    assert warnings == []
    assert sorted(m.name for m in some) == ["jit_gspmd", "jit_ops"]
    assert len(read) == 2
    assert len(converted) == (0 if form == "text compressed" else 2)
    by_name = {m.name: m for m in every}
    for m in some:
        assert m.module_id == by_name[m.name].module_id
        assert [i.name for c in m.computations.values() for i in c.instructions] == \
            [i.name for c in by_name[m.name].computations.values() for i in c.instructions]


def test_read_head_is_bounded_and_never_raises(tmp_path):
    import gzip
    import lzma

    from traceview.parsers.compressed import read_head

    text = b"HloModule m\n" + b"x" * 100_000
    for name, data in (("a.txt", text), ("a.txt.gz", gzip.compress(text)), ("a.txt.xz", lzma.compress(text))):
        (tmp_path / name).write_bytes(data)
        assert read_head(tmp_path / name, 4096) == text[:4096]
    (tmp_path / "bad.gz").write_bytes(b"\x1f\x8b" + b"\xff" * 50)   # gzip magic, garbage after
    assert read_head(tmp_path / "bad.gz", 4096) == b""
    assert read_head(tmp_path / "missing.txt", 4096) == b""
    bomb = gzip.compress(b"\0" * (50 << 20))                          # 50 MB of zeros in ~50 KB
    (tmp_path / "bomb.gz").write_bytes(bomb)
    assert len(read_head(tmp_path / "bomb.gz", 4096)) == 4096


def test_proto_module_name():
    from traceview.parsers.hlo.proto import proto_module_name

    assert proto_module_name(b"") is None
    assert proto_module_name(b"\xff\xff\xff") is None


def test_header_module_name():
    from traceview.parsers.hlo.text import header_module_name

    assert header_module_name("HloModule jit_f, entry_computation_layout={()->f32[]}\n") == "jit_f"
    assert header_module_name("// a comment\n\n  HloModule m.1\nENTRY e {") == "m.1"
    assert header_module_name("ENTRY main {\n") is None                  # no header: the parser names it
    assert header_module_name("HloModule jit_cut_in_the_midd") is None   # cut inside the name
    assert header_module_name("") is None
