"""A mutation fuzzer over traceview's readers: real traces, HLO files, baselines and configs, made hostile.

Each case is a seed file mutated (truncated, bytes flipped, a protobuf length or
varint corrupted, chunks inserted or repeated, text tokens made huge, negative
or deeply nested, compressed, or replaced by a decompression bomb) and handed to
one reader, in a worker process that is killed when a case runs too long.

The oracle, per case: the reader returns tables that hold no negative or
non-finite times, sizes or FLOPs, or it raises a ``UserError`` whose message is
one line naming the file. Anything else is a finding: ``crash`` (any other
exception), ``hang`` (over the time limit), ``died`` (the worker process was
killed, e.g. by memory), ``memory`` (a case whose resident peak passed
MEMORY_FINDING), ``garbage`` (accepted with impossible numbers, accepted where it
must be refused, or a history store modified by a read or a failed add) or
``message`` (an error of more than one line or one that does not name the file,
or a native library's own log on stderr). The hostile mutations of the newer
readers (trace JSON, StableHLO, history stores, GPU dumps) are
tests/support/fuzz_hostile.py.

Used by tests/fuzz/test_fuzz_mutation.py (a bounded run in the default suite) and
scripts/fuzz.py (a long run with a printed seed).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import lzma
import math
import multiprocessing as mp
import os
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.fuzz_hostile import NATIVE_NOISE

REPO = Path(__file__).resolve().parents[2]      # tests/support/fuzzing.py -> the repository
SHARED = REPO.parent / "shared" / "traces"
SAMPLES = REPO / "sample_traces"

# Decompression is bounded at what protobuf can hold (2 GiB); the fuzzer lowers the bound so that its
# bombs (which expand past it) stay cheap. The bound's logic is the same at any size.
FUZZ_DECOMPRESS_LIMIT = 48 << 20
WORKER_MEMORY = 6 << 30  # address-space limit of the worker: a case needing more is a finding
MEMORY_FINDING = 4 << 30  # resident peak of one case (a fresh worker each time it is passed) that is a finding


@dataclass(frozen=True)
class Seed:
    kind: str      # which reader: xplane, trace_json, hlo_text, hlo_proto, trace_proto, baseline, config, hardware,
                   # cli_analyze, history_db
    name: str      # file name the case is written under (suffix matters to readers)
    data: bytes


@dataclass
class Case:
    number: int
    seed: str
    kind: str
    mutation: str
    name: str
    data: bytes
    expect: str = ""   # "refused": must be a clean error; "dropped": read only with a dropped-events warning


@dataclass
class Finding:
    case: Case
    outcome: str   # crash, hang, died, memory, garbage, message
    detail: str

    def line(self) -> str:
        return f"case {self.case.number} [{self.case.kind} {self.case.seed} {self.case.mutation}]: " \
               f"{self.outcome}: {self.detail}"


@dataclass
class Report:
    seed: int
    cases: int = 0
    outcomes: Counter = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        return (f"fuzz seed {self.seed}: {self.cases} cases in {self.seconds:.0f} s ({parts}); "
                f"{len(self.findings)} finding(s)")


# ------------------------------------------------------------------------ seeds

def _small(paths: list[Path], limit: int) -> list[Path]:
    return [p for p in paths if p.is_file() and p.stat().st_size <= limit]


def default_seeds(shared: bool = True, max_trace_bytes: int = 400_000) -> list[Seed]:
    """Seed files: the project's samples, and the real traces of ../shared/traces when present."""
    seeds: list[Seed] = []
    traces = sorted(SAMPLES.glob("mlp/plugins/profile/*/*.xplane.pb"))
    hlo_text = sorted(SAMPLES.glob("mlp/hlo/*after_optimizations.txt")) + \
        sorted(SAMPLES.glob("sharded/hlo/*after_optimizations.txt")) + \
        sorted(SAMPLES.glob("serving/hlo/*jit_decode.cpu_after_optimizations.txt"))
    # the parallelism structures: a ring-attention loop, a pipeline schedule, a top-k router and all-to-alls
    hlo_text += [p for name in ("ring_attention", "pipeline", "moe")
                 for p in sorted(SAMPLES.glob(f"{name}/hlo/*after_optimizations.txt"))]
    hlo_proto = sorted(SAMPLES.glob("mlp/hlo/*after_optimizations.hlo.pb")) + \
        sorted(SAMPLES.glob("sharded/hlo/*after_optimizations.hlo.pb")) + \
        sorted(SAMPLES.glob("serving/hlo/*jit_decode.cpu_after_optimizations.hlo.pb"))
    if shared and SHARED.is_dir():
        traces += _small(sorted(SHARED.glob("AMD-AGI-TraceLens/jax08_gemm/*.xplane.pb")), max_trace_bytes)
        hlo_text += _small(sorted(SHARED.glob("AI-Hypercomputer-maxtext/reference_hlo_qwen3*.txt")), 400_000)
        hlo_proto += _small(sorted(SHARED.glob("AMD-AGI-TraceLens/jax_conv_minimal_legacy/*.hlo_proto.pb")), 50_000)
        hlo_proto += _small(sorted(SHARED.glob("NVIDIA-JAX-Toolbox/maxtext_fsdp4_h100/dump/*before*.hlo.pb.xz")),
                            50_000)
        tpu = SHARED / "openxla-xprof" / "tpu_inference_2.xplane.pb"
        if tpu.is_file():  # its embedded HLO protos: the 'flipped byte in the TPU trace' family
            from traceview.parsers.xspace.reader import read_xplane

            for key, data in list(read_xplane(tpu).hlo_protos.items())[:2]:
                seeds.append(Seed("trace_proto", f"{key}.hlo_proto", data))
    seeds += [Seed("xplane", p.name, p.read_bytes()) for p in traces]
    for perfetto in sorted(SAMPLES.glob("mlp_perfetto/plugins/profile/*/perfetto_trace.json.gz")):
        seeds.append(Seed("trace_json", "host.trace.json", gzip.decompress(perfetto.read_bytes())))
    seeds.append(Seed("trace_json", "tpu.trace.json", json.dumps(TPU_TRACE_JSON).encode()))
    seeds.append(Seed("stablehlo", "train_step.hlo.txt", STABLEHLO.encode()))
    seeds += [Seed("hlo_text", p.name, p.read_bytes()) for p in hlo_text]
    # the pipeline's permutes as XLA's GPU passes write them: send/recv with their frontend attributes
    from tests.support.send_recv import decompose

    for p in sorted(SAMPLES.glob("pipeline/hlo/*train_step*after_optimizations.txt"))[:1]:
        seeds.append(Seed("hlo_text", f"sendrecv_{p.name}", decompose(p.read_text(), annotate=True).text.encode()))
    seeds += [Seed("hlo_proto", p.name, p.read_bytes()) for p in hlo_proto]
    seeds += [Seed("baseline", "baseline.json", json.dumps(BASELINE).encode()),
              Seed("baseline", "hlo-baseline.json", json.dumps(HLO_BASELINE).encode()),
              Seed("config", "budgets.toml", CONFIG.encode()),
              Seed("hardware", "chips.json", json.dumps(HARDWARE).encode())]
    history = history_seed()
    if history is not None:
        seeds.append(Seed("history_db", "history.db", history))
    if shared and SHARED.is_dir():
        from tests.support.fuzz_hostile import gpu_dump_seeds

        seeds += [Seed("gpu_dump", name, data) for name, data in gpu_dump_seeds()]
    return seeds


# A StableHLO module as jax.jit(f).lower(...).as_text() prints it (a dot, a reduce, a while loop).
STABLEHLO = """module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8x16xf32>, %arg1: tensor<16x4xf32>) -> (tensor<f32> {jax.result_info = "result"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %1 = stablehlo.tanh %0 : tensor<8x4xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = stablehlo.reduce(%1 init: %cst) applies stablehlo.add across dimensions = [0, 1] : (tensor<8x4xf32>, tensor<f32>) -> tensor<f32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %3:2 = stablehlo.while(%iterArg = %c, %iterArg_0 = %2) : tensor<i32>, tensor<f32>
    cond {
      %c_1 = stablehlo.constant dense<3> : tensor<i32>
      %4 = stablehlo.compare  LT, %iterArg, %c_1,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %4 : tensor<i1>
    } do {
      %c_1 = stablehlo.constant dense<1> : tensor<i32>
      %4 = stablehlo.add %iterArg, %c_1 : tensor<i32>
      %5 = stablehlo.multiply %iterArg_0, %iterArg_0 : tensor<f32>
      stablehlo.return %4, %5 : tensor<i32>, tensor<f32>
    }
    return %3#1 : tensor<f32>
  }
}
"""

# A small Chrome trace as XProf's trace viewer exports a TPU run: modules, ops (one instant), steps, a host.
TPU_TRACE_JSON = {"displayTimeUnit": "ns", "traceEvents": [
    {"ph": "M", "pid": 3, "name": "process_name", "args": {"name": "/device:TPU:0"}},
    {"ph": "M", "pid": 3, "tid": 1, "name": "thread_name", "args": {"name": "Steps"}},
    {"ph": "M", "pid": 3, "tid": 2, "name": "thread_name", "args": {"name": "XLA Modules"}},
    {"ph": "M", "pid": 3, "tid": 3, "name": "thread_name", "args": {"name": "XLA Ops"}},
    {"ph": "M", "pid": 701, "name": "process_name", "args": {"name": "/host:CPU"}},
    {"ph": "M", "pid": 701, "tid": 9, "name": "thread_name", "args": {"name": "main/1"}},
    {"ph": "X", "pid": 3, "tid": 1, "ts": 10.0, "dur": 50.0, "name": "0"},
    {"ph": "X", "pid": 3, "tid": 2, "ts": 10.5, "dur": 40.0, "name": "jit_f(12190760917235803885)"},
    {"ph": "X", "pid": 3, "tid": 3, "ts": 11.0, "dur": 20.0, "name": "fusion.1",
     "args": {"device_duration_ps": "19999000", "device_offset_ps": "11000000", "hlo_category": "convolution",
              "model_flops": "1000000", "bytes_accessed": "4096"}},
    {"ph": "X", "pid": 3, "tid": 3, "ts": 12.0, "dur": 5.0, "name": "copy.2",
     "args": {"hlo_category": "data formatting", "bytes_accessed": "2048"}},
    {"ph": "i", "pid": 3, "tid": 3, "ts": 35.0, "name": "all-reduce-done", "s": "t"},
    {"ph": "X", "pid": 701, "tid": 9, "ts": 5.0, "dur": 60.0, "name": "train", "args": {"step_num": "0"}},
    {}]}


def history_seed() -> bytes | None:
    """A small history store (SQLite) of six runs, two ops each; None without the `history` extra."""
    try:
        from traceview.history.record import Metric, RunRecord, parse_time
        from traceview.history.store import open_store
    except ImportError:
        return None
    import pandas as pd

    with tempfile.TemporaryDirectory(prefix="traceview-fuzz-seed-") as tmp:
        path = Path(tmp) / "history.db"
        with open_store(path, create=True) as store:
            for i in range(6):
                step = 1000.0 * (1.5 if i >= 3 else 1.0)
                steps = [step * f for f in (0.98, 1.0, 1.02, 1.01)]
                ops = pd.DataFrame({"module": ["jit_f", "jit_f"], "op": ["fusion.3", "all-reduce.1"],
                                    "opcode": ["fusion", "all-reduce"], "bound": ["compute", "communication"],
                                    "time_ps": [4e9, 1e9], "occurrences": [4.0, 4.0], "flops": [1e9, 0.0],
                                    "step_times_ps": [[1e9] * 4, [2.5e8] * 4]})
                store.add(RunRecord(label=f"run-{i}", time=parse_time(f"2026-11-0{i + 1}"),
                                    meta={"commit": f"c{i}"}, trace_path=None, target="tpu-v6e", steps=4,
                                    metrics={"step_time": Metric(step, "us", step * 0.99, step * 1.01, steps),
                                             "mfu": Metric(0.4 / (1.5 if i >= 3 else 1.0), "fraction"),
                                             "peak_memory:static": Metric(1e6, "bytes")}, ops=ops))
        return path.read_bytes()


BASELINE = {
    "traceview_version": "0.1.0", "source": {"path": "logs", "run": "r", "hosts": ["h"], "files": ["h.xplane.pb"]},
    "devices": [{"id": "h/TPU:0", "kind": "TPU", "peak_flops": 9.18e14, "hbm_bandwidth": 1.64e12}],
    "target": {"name": "tpu-v6e", "detected": True, "peak_flops": {"bf16": 9.18e14}, "hbm_bandwidth": 1.64e12},
    "summary": {"device_time_us": 2000.0, "steps": [{"step": 0, "time_us": 1000.0}, {"step": 1, "time_us": 1010.0}],
                "time_by_bound_us": {"compute": 1500.0, "memory": 500.0, "communication": 0.0, "unknown": 0.0},
                "mfu": 0.4},
    "ops": [{"program_id": 7, "module": "jit_f", "name": "fusion.3", "category": "loop fusion", "occurrences": 2,
             "total_time_us": 900.0, "self_time_us": 900.0, "flops": 1.0e9, "bytes_accessed": 1.0e6,
             "collective_bytes": 0.0, "dtype": "bf16", "bound": "compute", "roofline_time_us": 10.0,
             "efficiency": 0.5, "gap_us": 10.0, "step_times_us": [450.0, 450.0]},
            {"program_id": 7, "module": "jit_f", "name": "all-reduce.1", "occurrences": 2, "self_time_us": 100.0,
             "flops": 0.0, "bytes_accessed": 4096, "collective_bytes": 4096, "bound": "communication"}],
    "warnings": [],
}
HLO_BASELINE = {"modules": [{"name": "jit_f", "file": "f.txt", "flops": 1.0e9, "transcendentals": 0.0,
                             "bytes_accessed": 1.0e6, "collective_bytes": 0.0, "instructions": [
                                 {"computation": "main", "name": "dot.1", "opcode": "dot", "category": "matmul",
                                  "shape": "f32[8,8]", "dtype": "f32", "flops": 1024.0, "transcendentals": 0.0,
                                  "bytes_read": 512.0, "bytes_written": 256.0, "collective": None}]}],
                "warnings": []}
CONFIG = """[check]
max_step_regression = "10%"
max_op_regression = "50%"
min_op_time = "1ms"
max_flops_increase = "1%"
max_collective_increase = "0%"

[[check.ops]]
pattern = "*/ynn_fusion*"
max_regression = "30%"

[[check.ops]]
pattern = "*copy*"
ignore = true
"""
HARDWARE = {"chips": [{"name": "my-chip", "kind": "GPU", "vendor": "ACME",
                       "peak_flops": {"bf16": {"value": 1.0e15, "source": "datasheet"}, "fp32": 2.0e14},
                       "hbm_bandwidth": 3.0e12, "hbm_capacity": 8.0e10,
                       "interconnect": {"type": "nvlink", "topology": "switch", "device_bandwidth": 4.5e11}}],
            "sources": {"datasheet": "ACME datasheet"}}


# ------------------------------------------------------------------------ mutations

def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _varint_end(data: bytes, pos: int) -> int:
    end = pos
    while end < len(data) and end - pos < 10 and data[end] & 0x80:
        end += 1
    return min(end + 1, len(data))


_BOMB_CACHE: dict[str, bytes] = {}


def bomb(kind: str = "gzip", size: int = FUZZ_DECOMPRESS_LIMIT + (8 << 20)) -> bytes:
    """A small compressed file expanding to `size` zero bytes (more than the fuzz bound)."""
    key = f"{kind}:{size}"
    if key not in _BOMB_CACHE:
        if kind == "gzip":
            buf = io.BytesIO()
            with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9) as fh:
                chunk = bytes(1 << 20)
                for _ in range(size >> 20):
                    fh.write(chunk)
            _BOMB_CACHE[key] = buf.getvalue()
        else:
            comp = lzma.LZMACompressor()
            chunk = bytes(1 << 20)
            _BOMB_CACHE[key] = b"".join([comp.compress(chunk) for _ in range(size >> 20)] + [comp.flush()])
    return _BOMB_CACHE[key]


def binary_mutations(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """One random mutation of protobuf (or any binary) bytes."""
    n = len(data)
    choice = rng.randrange(10)
    if choice == 0:
        cut = rng.randrange(n) if n else 0
        return f"truncate@{cut}", data[:cut]
    if choice == 1:
        out = bytearray(data)
        k = rng.choice((1, 1, 2, 8, 64))
        for _ in range(k):
            if out:
                out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        return f"bitflip x{k}", bytes(out)
    if choice == 2:
        out = bytearray(data)
        k = rng.choice((1, 4, 32))
        for _ in range(k):
            if out:
                out[rng.randrange(len(out))] = rng.randrange(256)
        return f"bytes x{k}", bytes(out)
    if choice in (3, 4):  # a length-delimited field's length made huge, negative or slightly off
        candidates = [i for i in rng.sample(range(n), min(n, 4000)) if data[i] & 7 == 2 and 0 < data[i] >> 3 < 16]
        if not candidates:
            return "noop", data
        i = rng.choice(candidates)
        end = _varint_end(data, i + 1)
        old = 0
        for k, b in enumerate(data[i + 1:end]):
            old |= (b & 0x7F) << (7 * k)
        new = rng.choice((-1, 1 << 63, (1 << 64) - 2, 1 << 31, old + rng.randint(1, 64), max(old - rng.randint(1, 64), 0),
                          0x7FFFFFFF))
        return f"length@{i}={new}", data[:i + 1] + _varint(new) + data[end:]
    if choice == 5:  # a varint field (time, id, count) made negative or huge
        candidates = [i for i in rng.sample(range(n), min(n, 4000)) if data[i] & 7 == 0 and 0 < data[i] >> 3 < 16]
        if not candidates:
            return "noop", data
        i = rng.choice(candidates)
        end = _varint_end(data, i + 1)
        new = rng.choice((-1, -(1 << 40), (1 << 63) - 1, 1 << 62, (1 << 64) - 1, 0))
        return f"varint@{i}={new}", data[:i + 1] + _varint(new) + data[end:]
    if choice == 6:
        a = rng.randrange(n) if n else 0
        b = min(n, a + rng.randint(1, 4096))
        return f"repeat[{a}:{b}]", data[:b] + data[a:b] * rng.randint(1, 8) + data[b:]
    if choice == 7:
        a = rng.randrange(n) if n else 0
        return f"insert@{a}", data[:a] + rng.randbytes(rng.randint(1, 64)) + data[a:]
    if choice == 8:
        how = rng.choice(("gzip", "xz", "gzip-truncated", "gzip-bomb", "xz-bomb"))
        if how == "gzip":
            return how, gzip.compress(data, compresslevel=1)
        if how == "xz":
            return how, lzma.compress(data, preset=0)
        if how == "gzip-truncated":
            z = gzip.compress(data, compresslevel=1)
            return how, z[: rng.randrange(2, max(len(z), 3))]
        return how, bomb("gzip" if how == "gzip-bomb" else "xz")
    a = rng.randrange(n) if n else 0
    b = min(n, a + rng.randint(1, 256))
    return f"delete[{a}:{b}]", data[:a] + data[b:]


_TEXT_TOKENS = [
    b"(" * 5000, b"{" * 5000, b"[" * 5000, b"9" * 400, b"9" * 5000, b"-1", b"-1024", b"4611686018427387904",
    b"1e400", b"NaN", b"\xff\xfe", b"\x00", b"\x1b[2J", b"\n", b"|", b"<img src=x>", b"![x](http://e/x.png)",
    b'"', b"'", b"\\", b"true", b"\"no\"", b"[2,4]<=[3]", b"[3,3]<=[9]T(5,9)", b"[1000000000,1000000000]<=[1000000000000000000]",
    b"calls=%", b"to_apply=%", b"body=%", b"stack_frame_id=x", b"known_trip_count\":{\"n\":\"" + b"9" * 400,
    b"f32[-1024,128]", b"f32[4611686018427387904,4]", b"s32[]", b"((((((((((f32[1]))))))))))",
]


def text_mutations(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """One random mutation of text (HLO, JSON, TOML): hostile tokens, numbers, nesting, lines moved."""
    n = len(data)
    choice = rng.randrange(8)
    if choice in (0, 1):
        token = rng.choice(_TEXT_TOKENS)
        a = rng.randrange(n + 1)
        return f"insert {token[:12]!r}@{a}", data[:a] + token + data[a:]
    if choice == 2:  # replace a number with a hostile one
        numbers = list(re.finditer(rb"-?\d+(\.\d+)?", data[:200_000]))
        if not numbers:
            return "noop", data
        m = rng.choice(numbers)
        new = rng.choice((b"-1", b"-7", b"0", b"9" * 400, b"4611686018427387903", b"1e308", b"-0.5", b"99999999999"))
        return f"number@{m.start()}={new[:10]!r}", data[:m.start()] + new + data[m.end():]
    if choice == 3:
        lines = data.split(b"\n")
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return f"swap lines {i},{j}", b"\n".join(lines)
    if choice == 4:
        lines = data.split(b"\n")
        i = rng.randrange(len(lines))
        return f"dup line {i}", b"\n".join(lines[:i + 1] + [lines[i]] + lines[i + 1:])
    if choice == 5:  # rename: every occurrence of a name made to collide with another one (cycles, duplicates)
        names = list(set(re.findall(rb"%?[A-Za-z_][\w.\-]{2,40}", data[:100_000])))
        if len(names) < 2:
            return "noop", data
        a, b = rng.sample(names, 2)
        return f"rename {a[:20]!r}->{b[:20]!r}", data.replace(a, b)
    if choice == 6:
        return binary_mutations(rng, data)
    return f"truncate@{n // 2}", data[: rng.randrange(n + 1)]


_HOSTILE_NAMES = ["a|b\nc", "<script>x</script>", "![img](http://example.com/x.png)", "[link](http://e)",
                  "\x1b[2J\x1b]0;title\x07", "\x01\x0b\x1b", "**bold** _it_", "`tick`", "# head", "-", "", "\u202e",
                  "x" * 5000]
_HOSTILE_INTS = [-1, -(1 << 40), (1 << 63) - 1, 1 << 62, 0, 2**31, -(1 << 63)]


def xspace_mutations(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """A semantic mutation of an XSpace: impossible times, wrong stat types, hostile names, odd ids."""
    from traceview.parsers.xspace.schema import XSpace

    space = XSpace()
    space.ParseFromString(data)
    planes = [p for p in space.planes]
    lines = [(p, ln) for p in planes for ln in p.lines if len(ln.events)]
    choice = rng.randrange(9)
    if choice <= 2 and lines:
        plane, line = rng.choice(lines)
        events = list(line.events)
        k = rng.choice((1, 1, 3, len(events)))
        field_name = rng.choice(("duration_ps", "offset_ps", "duration_ps"))
        value = rng.choice(_HOSTILE_INTS)
        for e in rng.sample(events, min(k, len(events))):
            setattr(e, field_name, value)
        mutation = f"{field_name}={value} x{k} on {line.name[:20]!r}"
    elif choice == 3 and lines:
        plane, line = rng.choice(lines)
        line.timestamp_ns = rng.choice(_HOSTILE_INTS)
        mutation = f"timestamp_ns={line.timestamp_ns}"
    elif choice == 4 and planes:  # a stat of a surprising type, looked up by name
        plane = rng.choice(planes)
        names = {m.name: k for k, m in plane.stat_metadata.items()}
        wanted = rng.choice(["compute_cap_major", "compute_cap_minor", "peak_teraflops_per_second", "clock_rate",
                             "core_count", "memory_bandwidth", "program_id", "flops", "bytes_accessed",
                             "device_duration_ps", "device_offset_ps", "step_num", "hlo_op", "hlo_module",
                             "device_ordinal", "run_id", "_p", "_c"])
        sid = names.get(wanted)
        if sid is None:
            sid = max(plane.stat_metadata.keys(), default=0) + 1
            plane.stat_metadata[sid].id = sid
            plane.stat_metadata[sid].name = wanted
        kind = rng.choice(("str_value", "double_value", "int64_value", "uint64_value", "bytes_value", "ref_value"))
        value = {"str_value": rng.choice(["9.5", "abc", "", "9" * 400, "-1", "nan"]),
                 "double_value": rng.choice([float("nan"), float("inf"), -1.0, 1e300, 9.5]),
                 "int64_value": rng.choice(_HOSTILE_INTS), "uint64_value": rng.choice([0, (1 << 64) - 1, 1 << 63]),
                 "bytes_value": b"\xff\x00", "ref_value": rng.choice([0, 999999, sid])}[kind]
        targets = [plane.stats]
        md = list(plane.event_metadata.values())
        if md:
            targets.append(rng.choice(md).stats)
        events = [e for ln in plane.lines for e in ln.events]
        if events:
            targets += [e.stats for e in rng.sample(events, min(20, len(events)))]
        for stats in targets:
            st = stats.add()
            st.metadata_id = sid
            setattr(st, kind, value)
        mutation = f"stat {wanted}.{kind}={value!r:.20}"
    elif choice == 5 and planes:  # hostile names: ops, threads, planes
        plane = rng.choice(planes)
        md = list(plane.event_metadata.values())
        name = rng.choice(_HOSTILE_NAMES)
        for m in rng.sample(md, min(len(md), 5)):
            m.name = name + m.name
            m.display_name = name
        for ln in plane.lines:
            ln.name = name + ln.name
        mutation = f"names {name[:12]!r}"
    elif choice == 6 and lines:  # events pointing at metadata that does not exist
        plane, line = rng.choice(lines)
        for e in rng.sample(list(line.events), min(5, len(line.events))):
            e.metadata_id = rng.choice([-1, 0, 1 << 40, 123456789])
        mutation = "unknown metadata ids"
    elif choice == 7 and planes:  # an embedded HLO proto made hostile
        from traceview.parsers.hlo.schema import message_class

        for plane in planes:
            names = {k: m.name for k, m in plane.stat_metadata.items()}
            for md in plane.event_metadata.values():
                for st in md.stats:
                    if names.get(st.metadata_id) in ("Hlo Proto", "hlo_proto") and st.bytes_value:
                        proto = message_class("HloProto").FromString(st.bytes_value)
                        what = _mutate_hlo_module(rng, proto.hlo_module)
                        st.bytes_value = proto.SerializeToString()
                        return f"embedded HLO: {what}", space.SerializeToString()
        mutation = "noop"
    else:  # planes duplicated (more devices), or dropped
        if planes and rng.random() < 0.5:
            space.planes.add().CopyFrom(rng.choice(planes))
            mutation = "duplicate plane"
        elif planes:
            del space.planes[rng.randrange(len(planes))]
            mutation = "drop plane"
        else:
            mutation = "noop"
    return mutation, space.SerializeToString()


def trace_json_mutations(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """A semantic mutation of trace-event JSON: impossible or mistyped times, ids and args, hostile names."""
    doc = json.loads(data)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    if not events:
        return "noop", data
    i = rng.randrange(len(events))
    event = events[i]
    if not isinstance(event, dict):
        return "noop", data
    key = rng.choice(["ts", "dur", "pid", "tid", "name", "ph", "args"])
    value = rng.choice([*_HOSTILE_INTS, *_HOSTILE_NAMES, 1e308, -0.5, None, [], {}, {"name": "/device:TPU:0"},
                        {"hlo_op": "x", "device_ordinal": "-3", "device_duration_ps": "-5", "program_id": "1e9"},
                        "X", "M", "i"])
    if rng.random() < 0.3 and isinstance(event.get("args"), dict) and event["args"]:
        arg = rng.choice(sorted(event["args"]))
        event["args"][arg] = value
        return f"event {i} args.{arg}={str(value)[:20]!r}", json.dumps(doc).encode()
    event[key] = value
    return f"event {i} {key}={str(value)[:20]!r}", json.dumps(doc).encode()


def _mutate_hlo_module(rng: random.Random, module) -> str:
    """A semantic mutation of an HloModuleProto, in place; returns what it did."""
    comps = list(module.computations)
    if not comps:
        return "noop"
    comp = rng.choice(comps)
    insts = list(comp.instructions)
    choice = rng.randrange(9)
    if choice == 0 and len(insts) > 1:  # XLA allows any order: must still be read
        reordered = list(reversed(insts))
        del comp.instructions[:]
        comp.instructions.extend(reordered)
        return "instructions reversed"
    if not insts:
        return "noop"
    inst = rng.choice(insts)
    if choice == 1:
        shape = inst.shape
        while shape.tuple_shapes:
            shape = shape.tuple_shapes[0]
        value = rng.choice([-1024, -1, 1 << 62, 1 << 40, (1 << 63) - 1])
        if shape.dimensions:
            shape.dimensions[rng.randrange(len(shape.dimensions))] = value
        else:
            shape.dimensions.append(value)
        return f"dim={value}"
    if choice == 2:  # a computation calling itself, or one calling its caller
        target = comp if rng.random() < 0.5 else rng.choice(comps)
        inst.called_computation_ids.append(target.id)
        for other in target.instructions:
            other.called_computation_ids.append(comp.id)
            break
        return "call cycle"
    if choice == 3:
        inst.operand_ids.append(rng.choice([-1, 1 << 40, inst.id]))
        return "odd operand id"
    if choice == 4:
        inst.backend_config = rng.choice([b'{"known_trip_count":{"n":"' + b"9" * 400 + b'"}}',
                                          b'{"known_trip_count":{"n":"-5"}}', b'{"known_trip_count":"x"}',
                                          b"[" * 3000, b"\xff\xfe"])
        return "backend_config"
    if choice == 5:
        inst.literal.f16s = rng.choice([b"\x00", b"\x00\x3c\x00", b""])
        inst.literal.bf16s = b"\x01"
        return "odd literal bytes"
    if choice == 6:
        iota = inst.collective_device_list.iota_replica_group_list
        iota.num_replica_groups, iota.num_devices_per_group = rng.choice([(2, 4), (1 << 30, 1 << 30), (0, 0), (-1, 3)])
        del iota.iota_reshape_dims[:]
        iota.iota_reshape_dims.extend(rng.choice([[3], [5, 9], [1 << 28, 1 << 28], []]))
        del iota.iota_transpose_perm[:]
        iota.iota_transpose_perm.extend(rng.choice([[], [5, 9], [1, 0], [0]]))
        inst.opcode = rng.choice(["all-reduce", "all-gather", inst.opcode])
        return "iota replica groups"
    if choice == 7:
        inst.metadata.stack_frame_id = rng.choice([-1, 1 << 40, 0, 7])
        inst.name = rng.choice(_HOSTILE_NAMES) + inst.name
        return "metadata/name"
    shape = inst.shape
    for _ in range(rng.choice([30, 90])):
        inner = type(shape)()
        inner.CopyFrom(shape)
        shape.Clear()
        shape.element_type = 13  # TUPLE
        shape.tuple_shapes.append(inner)
    return "deep tuple shape"


def hlo_proto_mutations(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    from traceview.parsers.hlo.schema import message_class

    raw = data
    compressed = raw[:6] == b"\xfd7zXZ\x00"
    if compressed:
        raw = lzma.decompress(raw)
    proto = message_class("HloProto").FromString(raw)
    module = proto.hlo_module if proto.hlo_module.computations else message_class("HloModuleProto").FromString(raw)
    what = _mutate_hlo_module(rng, module)
    out = proto.SerializeToString() if proto.hlo_module.computations else module.SerializeToString()
    return what, lzma.compress(out, preset=0) if compressed else out


def hlo_text_mutations(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """Semantic edits of HLO text: impossible dims, calls that cycle, odd trip counts and replica groups."""
    text = data.decode("utf-8", "replace")
    choice = rng.randrange(5)
    if choice == 0:
        dims = list(re.finditer(r"\[(\d+)(,\d+)*\]", text))
        if dims:
            m = rng.choice(dims)
            new = rng.choice(["[-1024,128]", "[4611686018427387904,4]", "[" + "9" * 40 + "]", "[1,2,-3]"])
            return f"dims {new}", (text[:m.start()] + new + text[m.end():]).encode()
    if choice == 1:
        comps = re.findall(r"^(?:ENTRY )?%?([\w.\-]+) ", text, flags=re.M)
        calls = list(re.finditer(r"(calls|to_apply|body|condition)=%?([\w.\-]+)", text))
        if comps and calls:
            m = rng.choice(calls)
            # the computation holding the call: the last header before it
            owner = [c for c in re.finditer(r"^(?:ENTRY )?%?([\w.\-]+) ", text[:m.start()], flags=re.M)]
            target = owner[-1].group(1) if owner else rng.choice(comps)
            return f"{m.group(1)}={target} (cycle)", (text[:m.start()] + f"{m.group(1)}=%{target}" +
                                                       text[m.end():]).encode()
    if choice == 2:
        m = re.search(r"replica_groups=(\{[^}]*\}\}|\[[^ ,]*\]<=\[[^\]]*\](T\([^)]*\))?)", text)
        new = rng.choice(["[2,4]<=[3]", "[3,3]<=[9]T(5,9)", "[1000000000,1000000000]<=[1000000000000000000]",
                          "[2,2]<=[2,2]T(0,0)", "{{0,1},{" + "9" * 30 + "}}"])
        if m:
            return f"replica_groups={new}", (text[:m.start()] + f"replica_groups={new}" + text[m.end():]).encode()
    if choice == 3:
        m = re.search(r"ROOT [^\n]*", text)
        if m:
            line = m.group()
            new = line.replace("}", '}, backend_config={"known_trip_count":{"n":"' + "9" * 400 + '"}}', 1) \
                if "}" in line else line
            return "trip count", text.replace(line, new, 1).encode()
    m = re.search(r"= (f32|bf16|s32|f16)\[", text)
    if m:
        deep = "(" * 3000 + "f32[1]" + ")" * 3000
        return "deep tuple", (text[:m.start()] + "= " + deep + text[m.end() - 1 - len(m.group(1)) + len(m.group(1)) + 1 - 1:]).encode()
    return text_mutations(rng, data)


def make_cases(seeds: list[Seed], count: int, seed: int) -> Iterator[Case]:
    """`count` cases, deterministic for `seed`: seeds taken in turn, weighted by how cheap their readers are."""
    from tests.support.fuzz_hostile import MUTATORS

    rng = random.Random(seed)
    weights = {"xplane": 3, "trace_json": 3, "stablehlo": 2, "hlo_text": 4, "hlo_proto": 4, "trace_proto": 2, "baseline": 2,
               "config": 2, "hardware": 1, "cli_analyze": 0, "history_db": 2, "gpu_dump": 1}
    pool = [s for s in seeds for _ in range(weights.get(s.kind, 1))]
    for number in range(count):
        s = rng.choice(pool)
        textual = s.kind in ("hlo_text", "baseline", "config", "hardware", "trace_json", "stablehlo", "gpu_dump")
        plain = text_mutations if textual else binary_mutations
        semantic = {"xplane": xspace_mutations, "hlo_proto": hlo_proto_mutations, "trace_proto": hlo_proto_mutations,
                    "hlo_text": hlo_text_mutations, "trace_json": trace_json_mutations,
                    "gpu_dump": hlo_text_mutations}.get(s.kind)
        hostile = MUTATORS.get(s.kind)
        expect = ""
        draw = rng.random()
        if hostile is not None and draw < 0.45:
            try:
                mutation, data, expect = hostile(rng, s.data)
            except Exception:  # noqa: BLE001 - a seed the mutator cannot parse: mutate its bytes
                mutation, data = plain(rng, s.data)
        else:
            mutate = semantic if semantic is not None and rng.random() < 0.6 else plain
            try:
                mutation, data = mutate(rng, s.data)
            except Exception:  # noqa: BLE001 - a seed the semantic mutator cannot parse: mutate its bytes
                mutation, data = plain(rng, s.data)
        if not expect and rng.random() < 0.15:  # a second mutation on top
            m2, data = plain(rng, data)
            mutation += " + " + m2
        yield Case(number, s.name, s.kind, mutation, s.name, data, expect)


# ------------------------------------------------------------------------ oracle (runs in the worker)

class Garbage(Exception):
    """Accepted input that produced impossible numbers."""


def _check_frame(frame, columns: tuple[str, ...], what: str) -> None:
    import numpy as np

    for column in columns:
        if column not in frame.columns or not len(frame):
            continue
        values = frame[column].to_numpy(dtype="float64", na_value=np.nan)
        finite = values[~np.isnan(values)]
        if np.isinf(finite).any() or (finite < 0).any():
            raise Garbage(f"{what}.{column} holds {finite[np.isinf(finite) | (finite < 0)][:3].tolist()}")


def _check_json_numbers(obj, path: str = "") -> None:
    """No negative, NaN or infinite time, size or FLOP count anywhere in a JSON report."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_json_numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:2000]):
            _check_json_numbers(v, f"{path}[{i}]")
    elif isinstance(obj, float) and not math.isfinite(obj):
        raise Garbage(f"{path} = {obj}")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) and obj < 0:
        leaf = path.rsplit(".", 1)[-1]
        if re.search(r"(_us|_ps|flops|bytes|occurrences|time|efficiency|mfu)(\[\d+\])?$", leaf) \
                and not leaf.startswith(("gap", "change")):
            raise Garbage(f"{path} = {obj}")


def _run_allocator_events(path: Path) -> None:
    """The memory view's reader of the host plane (found by reading the file's field headers alone): a clean
    refusal or events with no negative time or size."""
    from traceview.errors import UserError
    from traceview.parsers.xspace.allocator_events import read_allocator_events

    try:
        events = read_allocator_events(path)
    except UserError:
        return
    for column in ("time_ps", "stack_bytes", "heap_bytes", "allocation_bytes", "requested_bytes"):
        if column in events and len(events) and (events[column].to_numpy() < 0).any():
            raise Garbage(f"allocator events: negative {column}")


def _run_xplane(path: Path) -> None:
    """Both readers: the compiled one (numba, for large files) must end as cleanly as the pure one, and
    where both read the file, give the same tables."""
    from traceview.errors import UserError
    from traceview.parsers.native import loader as native_loader
    from traceview.parsers.xspace import fast as xspace_fast
    from traceview.parsers.xspace.reader import read_xplane

    compiled = None
    if native_loader.enabled():
        # fast=True maps the file (parsers/xspace/mapped.py); its lines are decoded in pieces of a few events
        # here, so the mutations meet the pieces' boundaries and page drops, not only a line's end
        xspace_fast._PIECE_EVENTS = 16
        try:
            compiled = read_xplane(path, fast=True)
        except UserError:
            pass
        else:
            _check_trace_data(compiled)
    data = read_xplane(path, fast=False)
    _check_trace_data(data)
    _run_allocator_events(path)
    if compiled is not None:
        import pandas as pd

        for table in ("ops", "host_events", "steps"):
            try:
                pd.testing.assert_frame_equal(getattr(compiled, table), getattr(data, table), check_exact=True)
            except AssertionError as exc:
                raise Garbage(f"the compiled and pure readers disagree on {table}: {str(exc)[:200]}") from None


def _run_trace_json(path: Path):
    from traceview.parsers.trace_json.reader import read_trace_json

    data = read_trace_json(path)
    _check_trace_data(data)
    return data


def _run_stablehlo(path: Path) -> None:
    """StableHLO text through jaxlib's converter and the HLO reader; without jax, the one-line error."""
    from traceview.parsers.hlo.dump import read_hlo_file

    _check_costs(read_hlo_file(path))


def _check_trace_data(data) -> None:
    _check_frame(data.ops, ("start_ps", "duration_ps", "self_ps"), "ops")
    _check_frame(data.host_events, ("start_ps", "duration_ps"), "host_events")
    _check_frame(data.steps, ("duration_ps",), "steps")
    if len(data.ops) and (data.ops["self_ps"] > data.ops["duration_ps"]).any():
        raise Garbage("ops.self_ps above duration_ps")
    _check_measured_pipeline(data.ops)


def _check_measured_pipeline(ops) -> None:
    """A pipeline measured from hostile op executions (a program per stage): its idle times and bubbles."""
    from traceview.parallelism.mpmd import measure_mpmd

    found = measure_mpmd(ops)
    if found is None:
        return
    for stage in found.stages:
        idle = (stage.idle_before_ps, stage.idle_after_ps, stage.idle_between_ps, stage.busy_ps)
        if min(idle) < 0 or not 0 <= stage.bubble_fraction <= 1 or stage.microbatches < 1:
            raise Garbage(f"measured pipeline: stage {stage.stage} idle {idle}, bubble {stage.bubble_fraction}")


def _check_costs(module) -> None:
    from traceview.cost import instruction_costs, module_totals

    costs = instruction_costs(module)
    _check_frame(costs, ("flops", "transcendentals", "bytes_read", "bytes_written", "bytes_accessed",
                         "payload_bytes"), "costs")
    totals = module_totals(module)
    _check_json_numbers({k: v for k, v in totals.items() if k != "warnings"}, "totals")
    _check_serving_program(module)


def _check_serving_program(module) -> None:
    """The serving reading of a module (traceview.inference.programs): sizes and counts are sane."""
    from traceview.inference.programs import read_program

    program = read_program(module)
    if program.weight_bytes < 0 or program.kv_cache_bytes < 0:
        raise Garbage("negative weight or KV-cache bytes")
    for value in (program.batch, program.tokens_per_sequence, program.max_sequence_length):
        if value is not None and value < 0:
            raise Garbage(f"negative serving count {value}")


def _check_parallelism(module) -> None:
    """The parallelism report of a hostile module (mesh, roles, ring, pipeline, experts, verdicts on a chip)."""
    from traceview.hardware.database import get_chip, load_hardware
    from traceview.parallelism.diagnose import DiagnoseInputs, diagnose
    from traceview.render.parallelism import parallelism_json

    report = diagnose(DiagnoseInputs([module], chip=get_chip("h100-sxm", load_hardware(None))))
    record = parallelism_json(report)
    _check_json_numbers(record, "parallelism")
    for axis in record["axes"]:
        bubble = (axis.get("pipeline") or {}).get("bubble_fraction")
        if bubble is not None and not 0 <= bubble < 1:
            raise Garbage(f"parallelism: axis {axis['name']!r} has a bubble fraction of {bubble}")


def _run_hlo(path: Path) -> None:
    """The full read, and the cheap name readers a dump folder uses to skip modules: these never raise,
    and where they find a name it is the name the full read gives (else a wanted module is skipped)."""
    from traceview.errors import UserError
    from traceview.parsers.compressed import read_head
    from traceview.parsers.hlo.dump import read_hlo_file
    from traceview.parsers.hlo.files import read_bytes
    from traceview.parsers.hlo.proto import proto_module_name
    from traceview.parsers.hlo.text import header_module_name

    names = {"header": header_module_name(read_head(path, 4096).decode("utf-8", errors="replace"))}
    try:
        names["proto"] = proto_module_name(read_bytes(path))
    except UserError:
        pass
    module = read_hlo_file(path)
    _check_costs(module)
    _check_parallelism(module)
    kind = "proto" if ".pb" in path.name else "header"
    if names.get(kind) is not None and names[kind] != module.name:
        raise Garbage(f"the {kind} names the module {names[kind]!r}, the full read {module.name!r}")


def _run_trace_proto(path: Path) -> None:
    from traceview.parsers.hlo.proto import modules_from_trace_protos

    modules, _ = modules_from_trace_protos({"jit_f(1)": path.read_bytes()}, source=str(path))
    for m in modules:  # a bad proto is a warning; a readable one must cost sanely
        _check_costs(m)


def _run_baseline(path: Path) -> None:
    from traceview.regress.baseline import load_baseline

    snap = load_baseline(path)
    _check_frame(snap.ops, ("time_ps", "flops", "bytes", "collective_bytes", "occurrences"), "baseline.ops")
    import numpy as np

    steps = np.asarray(snap.step_times_ps, dtype=float)
    if steps.size and (~np.isfinite(steps) | (steps < 0)).any():
        raise Garbage(f"baseline step times {steps[:3].tolist()}")


def _run_config(path: Path) -> None:
    from traceview.regress.budgets import make_budgets

    budgets = make_budgets(path)
    for rule in budgets.ops:
        if not isinstance(rule.ignore, bool):
            raise Garbage(f"rule {rule.pattern!r}: ignore = {rule.ignore!r}")


def _run_hardware(path: Path) -> None:
    from traceview.hardware.database import load_hardware

    for chip in load_hardware(path).values():
        for value in [*chip.peak_flops.values(), chip.hbm_bandwidth]:
            if value is not None and not (math.isfinite(value) and value > 0):
                raise Garbage(f"chip {chip.name}: figure {value}")


def _run_history(path: Path) -> None:
    """A history store (SQLite) with corrupted pages or values: a report in every format, or one clean error."""
    from tests.support.fuzz_hostile import check_history_untouched
    from traceview.history.store import open_store
    from traceview.history.trends import build_report
    from traceview.render.history import FORMATS, render

    with open_store(path) as store:
        report = build_report(store, ["*"])
    for fmt in FORMATS:
        render(report, fmt)
    _check_json_numbers(report.to_json())
    check_history_untouched(path)


def _run_gpu_dump(path: Path) -> None:
    """A current GPU dump's text: the full read as for any HLO file, and its hlo JSON bounded by its size."""
    from tests.support.fuzz_hostile import output_bound

    _run_hlo(path)
    output_bound(path)


def _run_cli_analyze(path: Path) -> None:
    import contextlib

    from traceview.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["analyze", str(path), "--format", "json"])
    if rc == 2:
        from traceview.errors import UserError

        raise UserError(err.getvalue().strip().removeprefix("traceview: error: "))
    if rc != 0:
        raise RuntimeError(f"exit {rc}: {err.getvalue().strip()[:300]}")
    _check_json_numbers(json.loads(out.getvalue()))
    # the scope tree of what analyze accepted: clean numbers, and roots + unattributed = total
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["scopes", str(path), "--format", "json"])
    if rc != 0:
        raise RuntimeError(f"scopes: exit {rc} where analyze read the trace: {err.getvalue().strip()[:300]}")
    tree = json.loads(out.getvalue())
    _check_json_numbers(tree)
    roots = sum(n["total_us"] for n in tree["nodes"] if len(n["path"]) == 1) + tree["unattributed_us"]
    if abs(roots - tree["total_us"]) > 1e-6 * max(abs(tree["total_us"]), 1.0):
        raise Garbage(f"scopes: roots + unattributed {roots} != total {tree['total_us']}")


RUNNERS: dict[str, Callable[[Path], None]] = {
    "xplane": _run_xplane, "trace_json": _run_trace_json, "stablehlo": _run_stablehlo, "hlo_text": _run_hlo, "hlo_proto": _run_hlo, "trace_proto": _run_trace_proto,
    "baseline": _run_baseline, "config": _run_config, "hardware": _run_hardware, "cli_analyze": _run_cli_analyze,
    "history_db": _run_history, "gpu_dump": _run_gpu_dump,
}


def run_one(case: Case, folder: Path) -> tuple[str, str]:
    """(outcome, detail) of one case, in this process: ok, error (a good UserError), garbage, message or crash."""
    from traceview.errors import UserError

    path = folder / f"c{case.number}" / case.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(case.data)
    try:
        result = RUNNERS[case.kind](path)
        if case.expect == "refused":
            raise Garbage("accepted an input that must be refused")
        if case.expect == "dropped" and not any("dropped" in w for w in getattr(result, "warnings", [])):
            raise Garbage("events with unusable times read without a dropped-events warning")
    except UserError as exc:
        text = str(exc)
        if "\n" in text or not text.strip():
            return "message", f"not one line: {text[:200]!r}"
        if case.kind != "trace_proto" and path.name not in text:
            return "message", f"does not name the file: {text[:200]!r}"
        return "error", ""
    except Garbage as exc:
        return "garbage", str(exc)
    except _Timeout:
        return "hang", "over the time limit"
    except BaseException as exc:  # noqa: BLE001 - every other exception is a finding
        tb = traceback.extract_tb(exc.__traceback__)
        where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb)
                      if "traceview" in f.filename or "/parsers/" in f.filename), "?")
        return "crash", f"{type(exc).__name__} at {where}: {str(exc)[:200]}"
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)
    return "ok", ""


# ------------------------------------------------------------------------ worker process

class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _worker(conn, timeout_s: float) -> None:
    try:
        import traceview.parsers.compressed as compressed

        compressed.PROTO_LIMIT = compressed.TEXT_LIMIT = FUZZ_DECOMPRESS_LIMIT
        import traceview.parsers.trace_json.text as trace_json

        trace_json.JSON_LIMIT = FUZZ_DECOMPRESS_LIMIT
    except ImportError:  # an older traceview (the fuzzer run against another version)
        pass
    load_compiled_reader()  # a fork server's worker loads it here: set-up, before any case's alarm and limit
    try:
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
    except (ValueError, OSError):
        pass
    signal.signal(signal.SIGALRM, _alarm)
    with tempfile.TemporaryDirectory(prefix="traceview-fuzz-") as tmp:
        while True:
            case = conn.recv()
            if case is None:
                return
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
            try:
                with _native_stderr() as said:
                    result = run_one(case, Path(tmp))
            except _Timeout:
                result = ("hang", "over the time limit")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            noise = NATIVE_NOISE.search(said.getvalue())
            if noise is not None and result[0] in ("ok", "error"):
                result = ("message", f"a native library wrote to stderr: {noise.group()[:120]!r}")
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            if peak > MEMORY_FINDING:
                conn.send(("memory", f"peak {peak / 2**30:.1f} GiB"))
                return   # a fresh worker measures the next case from zero
            conn.send(result)


@contextlib.contextmanager
def _native_stderr() -> Iterator[io.StringIO]:
    """What is written to file descriptor 2 (by Python or by a native library) while the block runs."""
    said = io.StringIO()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield said
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            said.write(sink.read(1 << 20).decode("utf-8", errors="replace"))


def load_compiled_reader() -> bool:
    """Load (on a fresh clone: compile, 15-40 s) the compiled reader's kernels here, before any case's
    clock starts. Compiling is set-up, not a hang; the forked workers inherit the loaded kernels."""
    try:
        from traceview.parsers.native import loader as native_loader
    except ImportError:  # an older traceview (the fuzzer run against another version)
        return False
    return native_loader.enabled()


def _start_method() -> str:
    """fork where it is safe (the worker inherits the loaded reader); a fork server once JAX or another
    threaded runtime runs in this process (a fork there can deadlock), as traceview's own pool decides."""
    try:
        from traceview.runtime.forked import fork_is_safe
    except ImportError:  # an older traceview (the fuzzer run against another version)
        return "fork"
    return "fork" if fork_is_safe() else "forkserver"


class _Pool:
    """One worker process; a case that kills it or outlives its time is recorded and the worker replaced."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.ctx = mp.get_context(_start_method())
        self.proc = None
        self.conn = None

    def _start(self) -> None:
        load_compiled_reader()  # in this process, before the fork: the worker's alarm times cases, not set-up
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child, self.timeout_s), daemon=True)
        self.proc.start()
        self.conn = parent

    def run(self, case: Case) -> tuple[str, str]:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        assert self.conn is not None and self.proc is not None
        self.conn.send(case)
        if self.conn.poll(self.timeout_s * 2 + 5):
            try:
                return self.conn.recv()
            except EOFError:
                pass
        code = self.proc.exitcode
        self.proc.kill()
        self.proc.join()
        self.proc = None
        if code is None:
            return "hang", f"no answer within {self.timeout_s * 2 + 5:.0f} s (killed)"
        return "died", f"worker exit code {code}"

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.conn.send(None)
            self.proc.join(5)
            if self.proc.is_alive():
                self.proc.kill()


def fuzz(count: int, seed: int, seeds: list[Seed] | None = None, timeout_s: float = 20.0,
         progress: Callable[[int, Report], None] | None = None) -> Report:
    """Run `count` cases from `seed`; findings are every outcome but ok and error."""
    report = Report(seed=seed)
    pool = _Pool(timeout_s)
    start = time.monotonic()
    try:
        for case in make_cases(seeds if seeds is not None else default_seeds(), count, seed):
            outcome, detail = pool.run(case)
            report.cases += 1
            report.outcomes[outcome] += 1
            if outcome not in ("ok", "error"):
                report.findings.append(Finding(case, outcome, detail))
            if progress is not None:
                progress(case.number, report)
    finally:
        pool.close()
        report.seconds = time.monotonic() - start
    return report
