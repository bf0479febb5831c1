"""Hostile mutations for the newer readers (trace-event JSON, StableHLO, history stores, current GPU dumps), and
the oracle checks they need beyond tests/support/fuzzing.py's.

Each mutator takes a seed's bytes and returns ``(what it did, bytes, expectation)``; the expectation is
``""`` (any clean outcome), ``"refused"`` (the input must be a clean error: accepting it is garbage) or
``"dropped"`` (accepted only with a warning that events were dropped). The kinds are what an attacker or a
careless user hands traceview: strings with lone surrogates, invalid UTF-8 and control characters; times of
the wrong JSON type; threads, streams and processes by the ten thousand; decompression bombs; StableHLO that
recurses, nests deep or names impossible shardings; history stores cut short, damaged, deeply nested or in
another journal mode; HLO dumps with giant source names.

Sizes are chosen so that a case stays cheap at the fuzz bounds (tests/support/fuzzing.py lowers the
decompression and JSON limits); the readers' own bounds are what turn each into a clean outcome.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import sqlite3
import tempfile
from pathlib import Path

Mutation = tuple[str, bytes, str]

# ------------------------------------------------------------------------ trace-event JSON

_SURROGATES = ["\ud800", "\udfff", "\udc00x", "a\ud83d", "\ud83d\ude00"]   # the last a valid pair
_BAD_TIMES = [True, False, "1", "12.5", None, [], {}, "NaN", 1e400, -1, 1 << 70]


def _events(data: bytes) -> tuple[object, list]:
    doc = json.loads(data)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return doc, [e for e in events if isinstance(e, dict)]


def trace_json_hostile(rng: random.Random, data: bytes) -> Mutation:
    """One hostile edit of trace-event JSON (see the module docstring)."""
    doc, events = _events(data)
    choice = rng.randrange(9)
    if choice == 0:   # lone surrogates in op names, thread names, event names (escaped: json.dumps' ASCII)
        text = rng.choice(_SURROGATES)
        for e in events:
            args = e.get("args")
            if isinstance(args, dict) and ("hlo_op" in args or "name" in args):
                args["hlo_op" if "hlo_op" in args else "name"] = f"op{text}x"
            elif rng.random() < 0.3:
                e["name"] = f"ev{text}"
        return f"surrogates {text!r}", json.dumps(doc).encode(), ""
    if choice == 1:   # raw invalid UTF-8 and control characters inside strings
        raw = json.dumps(doc).encode()
        spots = [m.start() + 1 for m in re.finditer(rb'"name": "', raw)][:200]
        bad = rng.choice([b"\xff\xfe", b"\xed\xa0\x80", b"\x01\x1b[2J", b"\x00", b"\xc3"])
        out = bytearray(raw)
        for at in sorted(rng.sample(spots, min(len(spots), 20)), reverse=True):
            out[at + 8:at + 8] = bad
        return f"bytes {bad!r} in names", bytes(out), ""
    if choice in (2, 3):   # times of the wrong JSON type
        value = rng.choice(_BAD_TIMES)
        timed = [e for e in events if e.get("ph") in ("X", "i", "I")]
        if choice == 2:
            for e in timed:
                e["ts"] = value
            return f"every ts={value!r:.12}", json.dumps(doc).encode(), "refused"
        hit = rng.sample(timed, max(1, len(timed) // 10)) if timed else []
        for e in hit:   # an instant event has no duration to spoil: its time
            e[rng.choice(["ts", "dur"]) if e.get("ph") == "X" else "ts"] = value if value is not None else "x"
        return f"some ts/dur={value!r:.12}", json.dumps(doc).encode(), "dropped" if hit else ""
    if choice == 4:
        return threads(rng.choice([2000, 20000]), rng.choice(["gpu", "host"]))
    if choice == 5:   # many device processes
        n = rng.choice([500, 5000])
        extra = [{"ph": "M", "pid": 10_000 + k, "name": "process_name", "args": {"name": f"/device:GPU:{k}"}}
                 for k in range(n)]
        extra += [{"ph": "X", "pid": 10_000 + k, "tid": 1, "ts": k, "dur": 1, "name": "k", "args": {"hlo_op": "f"}}
                  for k in range(n)]
        extra += [{"ph": "M", "pid": 10_000 + k, "tid": 1, "name": "thread_name", "args": {"name": "Stream #1"}}
                  for k in range(n)]
        return f"{n} device processes", json.dumps({"traceEvents": events + extra}).encode(), ""
    if choice == 6:
        return event_bomb(rng.choice([600_000, 3_000_000]))
    if choice == 7:   # deep nesting inside args, and a deep document
        depth = rng.choice([500, 5000, 100_000])
        raw = json.dumps(doc).encode()
        return f"nested {depth}", raw[:-1] + b', "x": ' + b"[" * depth + b"]" * depth + b"}", ""
    value = rng.choice([-1, 1 << 63, "9" * 400, 1e308, -(1 << 40)])
    for e in events:
        if isinstance(e.get("args"), dict) and rng.random() < 0.5:
            e["args"][rng.choice(["device_ordinal", "program_id", "device_duration_ps", "step_num"])] = value
    return f"args={value!r:.12}", json.dumps(doc).encode(), ""


def threads(n: int, kind: str) -> Mutation:
    """A trace of `n` GPU streams (or host threads) of one event each."""
    process = "/device:GPU:0" if kind == "gpu" else "/host:CPU"
    prefix = "Stream #" if kind == "gpu" else "thread "
    events = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": process}}]
    for t in range(n):
        events.append({"ph": "M", "pid": 1, "tid": t, "name": "thread_name", "args": {"name": f"{prefix}{t}"}})
        events.append({"ph": "X", "pid": 1, "tid": t, "ts": t, "dur": 1, "name": "k",
                       "args": {"hlo_op": f"fusion.{t % 7}"}})
    return f"{n} {kind} threads", json.dumps({"traceEvents": events}).encode(), ""


def event_bomb(n: int) -> Mutation:
    """A small gzip of `n` minimal events (about 53 bytes each once inflated)."""
    head = b'{"traceEvents":[{"ph":"M","pid":1,"name":"process_name","args":{"name":"/device:GPU:0"}}'
    event = b',{"ph":"X","pid":1,"tid":1,"ts":1,"dur":1,"name":"a"}'
    return f"gzip of {n} events", gzip.compress(head + event * n + b"]}", compresslevel=6), ""


# ------------------------------------------------------------------------ StableHLO

def stablehlo_hostile(rng: random.Random, data: bytes) -> Mutation:
    """One hostile edit of a StableHLO module: recursion, deep nesting, impossible or unparseable shardings."""
    text = data.decode()
    depth = rng.choice([300, 2000, 100_000])
    ret = "return %3#1 : tensor<f32>"
    choice = rng.randrange(8)
    if choice == 0:
        call = "%9 = call @main(%arg0, %arg1) : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<f32>\n    "
        return "calls itself", text.replace(ret, call + "return %9 : tensor<f32>").encode(), "refused"
    if choice == 1:
        call = ("%9 = call @g(%arg0, %arg1) : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<f32>\n"
                "    return %9 : tensor<f32>\n  }\n  func.func private @g(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>)"
                " -> tensor<f32> {\n    %0 = call @main(%a, %b) : (tensor<8x16xf32>, tensor<16x4xf32>) -> "
                "tensor<f32>\n    return %0 : tensor<f32>")
        return "mutual recursion", text.replace(ret, call).encode(), "refused"
    if choice == 2:
        deep = "x = " + "[" * depth + "]" * depth
        return f"attribute {depth} deep", text.replace("mhlo.num_replicas = 1 : i32", deep).encode(), "refused"
    if choice == 3:
        deep = "tuple<" * depth + "tensor<f32>" + ">" * depth
        return (f"tuple type {depth} deep",
                text.replace("%arg1: tensor<16x4xf32>)", f"%arg1: tensor<16x4xf32>, %arg9: {deep})").encode(),
                "refused")
    if choice == 4:
        loc = "loc(" + "fused[" * depth + '"x"' + "]" * depth + ")"
        return f"fused location {depth} deep", text.replace(ret, f"{ret} {loc}").encode(), "refused"
    if choice == 5:
        body = "%c = stablehlo.constant dense<1> : tensor<i32>\n"
        for _ in range(depth if depth < 5000 else 2000):
            body = ('%r = "stablehlo.case"(%i) ({\n' + body + "stablehlo.return %c : tensor<i32>\n}) : "
                    "(tensor<i32>) -> tensor<i32>\n")
        return "case regions", text.replace(ret, body + ret).encode(), "refused"
    if choice == 6:
        sharding = rng.choice(['{{{', '{devices=[99999999,99999999]<=[9999999999]}', '{devices=[2,2]<=[3]}',
                               '{devices=[a,b]0,1}', '}{', '{replicated'])
        mutated = text.replace("%arg0: tensor<8x16xf32>", f'%arg0: tensor<8x16xf32> {{mhlo.sharding = "{sharding}"}}')
        return f"sharding {sharding[:20]!r}", mutated.encode(), "refused"
    return "module nesting", ("module {" * depth + "}" * depth + "\n" + text).encode(), "refused"


# ------------------------------------------------------------------------ history stores

def history_hostile(rng: random.Random, data: bytes) -> Mutation:
    """One hostile edit of a SQLite history store (see the module docstring)."""
    page = int.from_bytes(data[16:18], "big") or 4096
    choice = rng.randrange(10)
    if choice == 0:
        cut = rng.randrange(1, max(len(data) // page, 2)) * page
        return f"cut at page {cut // page}", data[:cut], "refused"
    if choice == 1:
        return "last byte missing", data[:-1], "refused"
    if choice == 2:   # a b-tree page overwritten: SQLite's quick check finds it
        at = rng.randrange(1, max(len(data) // page, 2)) * page
        return f"page at {at} zeroed", data[:at] + bytes(page) + data[at + page:], "refused"
    if choice == 3:
        return "empty file", b"", ""
    edits = {
        4: ("deep samples", "UPDATE traceview_metrics SET samples = ?", ("[" * 100_000 + "]" * 100_000,)),
        5: ("deep meta", "UPDATE traceview_runs SET meta = ?", ('{"a":' * 100_000 + "1" + "}" * 100_000,)),
        6: ("version row missing", "DELETE FROM traceview_schema", ()),
        7: ("labels not UTF-8", "UPDATE traceview_runs SET label = CAST(x'ff' || label AS TEXT)", ()),
        8: ("huge meta", "UPDATE traceview_runs SET meta = ?", (json.dumps({"k": "v" * 2_000_000}),)),
    }
    if choice in edits:
        what, sql, params = edits[choice]
        return what, _edited(data, sql, params), "refused" if choice == 6 else ""
    return "rollback journal", _edited(data, None, (), journal="DELETE"), ""


def _edited(data: bytes, sql: str | None, params: tuple, journal: str | None = None) -> bytes:
    with tempfile.TemporaryDirectory(prefix="traceview-fuzz-store-") as tmp:
        path = Path(tmp) / "h.db"
        path.write_bytes(data)
        conn = sqlite3.connect(path)
        try:
            if journal:
                conn.execute(f"PRAGMA journal_mode = {journal}")
            if sql:
                conn.execute(sql, params)
                conn.commit()
        finally:
            conn.close()
        return path.read_bytes()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""


def check_history_untouched(path: Path) -> None:
    """The history oracle: a report leaves the file as it was; a failed add (a label already recorded) too;
    a damaged store (SQLite's own quick check) is never reported as intact."""
    from tests.support.fuzzing import Garbage
    from traceview.errors import UserError
    from traceview.history.record import RunRecord, parse_time
    from traceview.history.store import open_store
    from traceview.history.trends import build_report

    before, beside = digest(path), sorted(p.name for p in path.parent.iterdir())
    try:
        with open_store(path) as store:
            build_report(store, ["*"])
            labels = list(store.runs()["label"])
    finally:
        if digest(path) != before:
            raise Garbage("history report modified the store")
        if sorted(p.name for p in path.parent.iterdir()) != beside:
            raise Garbage("history report left files beside the store")
    if not _intact(path):
        raise Garbage("a damaged store was reported as intact")
    labels = [label for label in labels if "\ufffd" not in label]   # a label as stored, not as shown
    if labels:
        record = RunRecord(label=labels[0], time=parse_time("2026-01-01"), meta={}, trace_path=None, target=None,
                           steps=0, metrics={})
        try:
            with open_store(path, create=True) as store:
                store.add(record)
        except UserError:
            if digest(path) != before:
                raise Garbage("a failed history add modified the store") from None
            raise
        raise Garbage(f"a second run labelled {labels[0]!r} was stored")


def _intact(path: Path) -> bool:
    if path.stat().st_size == 0:
        return True
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("PRAGMA quick_check")] == ["ok"]
    except sqlite3.DatabaseError:
        return False
    finally:
        conn.close()


# ------------------------------------------------------------------------ current GPU dumps (HLO text)

def gpu_dump_hostile(rng: random.Random, data: bytes) -> Mutation:
    """One hostile edit of a GPU HLO dump's text: giant source names, hostile stack-frame tables."""
    text = data.decode("utf-8", errors="replace")
    choice = rng.randrange(4)
    m = re.search(r'^FileNames\n1 "([^"\n]*)"', text, flags=re.M)
    if choice == 0 and m:
        name = "/" + "a" * rng.choice([100_000, 2_000_000]) + ".py"
        return f"file name of {len(name)} chars", (text[:m.start(1)] + name + text[m.end(1):]).encode(), ""
    f = re.search(r'^FunctionNames\n1 "([^"\n]*)"', text, flags=re.M)
    if choice == 1 and f:
        name = "f" * 1_000_000
        return "function name of 1M chars", (text[:f.start(1)] + name + text[f.end(1):]).encode(), ""
    frames = re.search(r"^StackFrames\n", text, flags=re.M)
    if choice == 2 and frames:
        rows = "".join(f"{k} {{file_location_id={rng.choice([-1, 0, 1, 1 << 40, 'x'])} parent_frame_id={k - 1}}}\n"
                       for k in range(1, 2000))
        return "hostile stack frames", (text[:frames.end()] + rows + text[frames.end():]).encode(), ""
    op = re.search(r"op_name=\"([^\"\n]*)\"", text)
    if op:
        name = "x/" * 200_000
        return "op_name of 400k chars", (text[:op.start(1)] + name + text[op.end(1):]).encode(), ""
    return "noop", data, ""


MUTATORS = {"trace_json": trace_json_hostile, "stablehlo": stablehlo_hostile, "history_db": history_hostile,
            "gpu_dump": gpu_dump_hostile}
# The readers a campaign over "the newer readers" covers (scripts/fuzz.py --kinds newer).
NEWER = ("trace_json", "stablehlo", "history_db", "gpu_dump")


def gpu_dump_seeds() -> list[tuple[str, bytes]]:
    """Current GPU dumps (H200, sm_9.0a, with their FileNames and StackFrames tables) from ../shared/traces."""
    from tests.support.fuzzing import SHARED

    paths = sorted(SHARED.glob("h200/kernels/hlo/*after_optimizations.txt"))
    paths += sorted(SHARED.glob("h200/decode/hlo/*jit_prefill*after_optimizations.txt"))
    return [(p.name, p.read_bytes()) for p in paths]


def output_bound(path: Path) -> None:
    """The `hlo` JSON of a dump is at most a few times its file: no shared string printed once per op."""
    from tests.support.fuzzing import Garbage
    from traceview.api.hlo import hlo

    size = len(json.dumps(hlo(path).to_json()))
    limit = 20 * path.stat().st_size + (1 << 20)
    if size > limit:
        raise Garbage(f"the hlo JSON of a {path.stat().st_size}-byte dump is {size} bytes")


# Lines a native library writes on its own (absl / XLA logs, RET_CHECK failures, stack traces): never the user's.
NATIVE_NOISE = re.compile(r"^(?:[EFW]\d{4} |\*\*\* |.*RET_CHECK|.*Check failed|.*[Ss]tack trace)", re.M)
