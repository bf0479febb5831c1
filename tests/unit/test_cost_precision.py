"""The cost table's ``precision`` column (full f32 asked for, or not) reads the typed precision configs:
the op's own ``operand_precision`` and a library call's backend config. Each generated module is drawn
once and written both as HLO text (this test's own spelling of XLA's forms) and as an HloModuleProto; the
two routes must give the column the drawn precisions imply.
"""

from __future__ import annotations

import json
import random

import pytest

from traceview.cost.table import instruction_costs
from traceview.parsers.hlo.attributes import NO_PRECISION, Precision, config_precision
from traceview.parsers.hlo.proto import parse_hlo_proto
from traceview.parsers.hlo.schema import DOT_ALGORITHMS, PRECISION_NAMES, message_class
from traceview.parsers.hlo.text import parse_hlo_text

_PRECISIONS = {name: number for number, name in PRECISION_NAMES.items() if name != "packed_nibble"}
_ALGORITHMS = {name: number for number, name in DOT_ALGORITHMS.items()}
_DIMS = ("lhs_contracting_dims={1}, rhs_contracting_dims={0}", {"lhs_contracting_dimensions": ["1"],
                                                                "rhs_contracting_dimensions": ["0"]})


class _Op:
    """One drawn instruction: opcode, its precision config, its backend config (dict or None), what it
    calls, and whether it asks for full f32 precision by the rule under test."""

    def __init__(self, name: str, opcode: str, operands: tuple[str, ...] = (), algorithm: str | None = None,
                 config: dict | None = None, target: str = "", calls: str = "") -> None:
        self.name, self.opcode, self.operands, self.algorithm = name, opcode, operands, algorithm
        self.config, self.target, self.calls = config, target, calls

    @property
    def own_highest(self) -> bool:
        return "highest" in self.operands or (self.opcode == "dot" and self.algorithm == "dot_f32_f32_f32")

    @property
    def library_highest(self) -> bool:
        gemm = (self.config or {}).get("gemm_backend_config", self.config or {})
        found = gemm.get("precision_config") or {}
        return "HIGHEST" in found.get("operand_precision", ()) or found.get("algorithm") == "ALG_DOT_F32_F32_F32"


def _precision_config(rng: random.Random) -> tuple[tuple[str, ...], str | None]:
    operands = tuple(rng.choice(("default", "default", "high", "highest")) for _ in range(2))
    if all(p == "default" for p in operands):
        operands = ()  # XLA prints no all-default list (and the proto reads as unset)
    algorithm = rng.choice((None, None, *_ALGORITHMS))
    return operands, algorithm


def _gemm_config(rng: random.Random) -> dict | None:
    """A library call's backend config: none, a cuBLAS one with or without precision (wrapped or flat),
    a cuDNN convolution one (no precision)."""
    form = rng.choice(("none", "wrapped", "wrapped", "flat", "no_precision", "cudnn"))
    if form == "none":
        return None
    if form == "cudnn":
        return {"cudnn_conv_backend_config": {"conv_result_scale": 1, "activation_mode": "kNone"}}
    gemm: dict = {"alpha_real": 1, "beta": 0, "dot_dimension_numbers": _DIMS[1]}
    if form != "no_precision":
        operands = [rng.choice(("DEFAULT", "DEFAULT", "HIGH", "HIGHEST")) for _ in range(2)]
        algorithm = rng.choice(("ALG_UNSET", "ALG_UNSET", "ALG_DOT_F32_F32_F32", "ALG_DOT_BF16_BF16_F32",
                                "ALG_DOT_TF32_TF32_F32_X3"))
        items = [("operand_precision", operands), ("algorithm", algorithm)]
        rng.shuffle(items)  # XLA writes the two keys in either order
        gemm["precision_config"] = dict(items)
    return {"operation_queue_id": "0", "gemm_backend_config": gemm} if form != "flat" else gemm


def _contraction(rng: random.Random, name: str) -> _Op:
    if rng.random() < 0.5:
        return _Op(name, "dot", *_precision_config(rng))
    config = _gemm_config(rng)
    target = "__cudnn$convForward" if config and "cudnn_conv_backend_config" in config else \
        rng.choice(("__cublas$gemm", "__cublas$lt$matmul"))
    return _Op(name, "custom-call", *_precision_config(rng), config=config, target=target)


def _draw(rng: random.Random) -> tuple[list[_Op], dict[str, list[_Op]], dict[str, str]]:
    """(entry ops, fused computations by name, the precision each entry op must read as)."""
    entry: list[_Op] = []
    fused: dict[str, list[_Op]] = {}
    want: dict[str, str] = {}
    for k in range(rng.randint(2, 6)):
        op = _contraction(rng, f"op{k}")
        entry.append(op)
        want[op.name] = "highest" if op.own_highest or op.library_highest else ""
    # always one library call whose config alone asks for full f32: the backend-config rule must be read
    pinned = {"gemm_backend_config": {"dot_dimension_numbers": _DIMS[1], "precision_config": {
        "operand_precision": ["DEFAULT", "DEFAULT"], "algorithm": "ALG_DOT_F32_F32_F32"}}}
    entry.append(_Op("pinned", "custom-call", config=pinned, target="__cublas$gemm"))
    want["pinned"] = "highest"
    for k in range(rng.randint(1, 4)):
        parts = [_contraction(rng, f"f{k}_{j}") for j in range(rng.randint(1, 3))]
        highest = any(p.own_highest or p.library_highest for p in parts)
        if rng.random() < 0.4:  # a nested fusion: its own config counts, not what it holds
            inner = [_contraction(rng, f"g{k}_0")]
            fused[f"inner_{k}"] = inner
            nested = _Op(f"nest{k}", "fusion", *_precision_config(rng), calls=f"inner_{k}")
            parts.append(nested)
            highest = highest or nested.own_highest
        fused[f"fused_{k}"] = parts
        op = _Op(f"fusion{k}", "fusion", calls=f"fused_{k}")
        entry.append(op)
        want[op.name] = "highest" if highest else ""
    return entry, fused, want


def _text_line(op: _Op) -> str:
    attrs = []
    if op.opcode == "dot":
        attrs.append(_DIMS[0])
    if op.operands:
        attrs.append("operand_precision={" + ",".join(op.operands) + "}")
    if op.algorithm and op.opcode == "dot":
        attrs.append(f"algorithm={op.algorithm}")
    if op.opcode == "fusion":
        attrs += ["kind=kOutput", f"calls=%{op.calls}"]
    if op.target:
        attrs.append(f'custom_call_target="{op.target}"')
    if op.config is not None:
        attrs.append("backend_config=" + json.dumps(op.config, separators=(",", ":")))
    return f"  %{op.name} = f32[4,4]{{1,0}} {op.opcode}(f32[4,4]{{1,0}} %a, f32[4,4]{{1,0}} %b), " + ", ".join(attrs)


def _as_text(entry: list[_Op], fused: dict[str, list[_Op]]) -> str:
    lines = ["HloModule generated", ""]
    for name, parts in reversed(fused.items()):  # callees first, as XLA prints them
        lines += [f"%{name} (a: f32[4,4], b: f32[4,4]) -> f32[4,4] {{",
                  "  %a = f32[4,4]{1,0} parameter(0)", "  %b = f32[4,4]{1,0} parameter(1)"]
        lines += [_text_line(p) for p in parts]
        lines += [f"  ROOT %sum = f32[4,4]{{1,0}} add(f32[4,4]{{1,0}} %a, f32[4,4]{{1,0}} %{parts[-1].name})",
                  "}", ""]
    lines += ["ENTRY %main (a: f32[4,4], b: f32[4,4]) -> f32[4,4] {",
              "  %a = f32[4,4]{1,0} parameter(0)", "  %b = f32[4,4]{1,0} parameter(1)"]
    lines += [_text_line(op) for op in entry]
    lines += [f"  ROOT %out = (f32[4,4]{{1,0}}) tuple(f32[4,4]{{1,0}} %{entry[-1].name})", "}", ""]
    return "\n".join(lines)


def _as_proto(entry: list[_Op], fused: dict[str, list[_Op]]) -> bytes:
    shape = message_class("ShapeProto")(element_type=11, dimensions=[4, 4])
    HloInstructionProto = message_class("HloInstructionProto")
    ids = iter(range(1, 100_000))
    comp_ids = {name: 10 + i for i, name in enumerate(fused)}
    module = message_class("HloModuleProto")(name="generated", entry_computation_name="main", id=1)

    def computation(name: str, cid: int, ops: list[_Op], root_opcode: str) -> None:
        a = HloInstructionProto(name="a", opcode="parameter", id=next(ids), shape=shape, parameter_number=0)
        b = HloInstructionProto(name="b", opcode="parameter", id=next(ids), shape=shape, parameter_number=1)
        insts = [a, b]
        for op in ops:
            ip = HloInstructionProto(name=op.name, opcode=op.opcode, id=next(ids), shape=shape,
                                     operand_ids=[a.id, b.id], custom_call_target=op.target)
            if op.opcode == "dot":
                ip.dot_dimension_numbers.lhs_contracting_dimensions.append(1)
                ip.dot_dimension_numbers.rhs_contracting_dimensions.append(0)
                if op.algorithm:
                    ip.precision_config.algorithm = _ALGORITHMS[op.algorithm]
            if op.operands:
                ip.precision_config.operand_precision.extend(_PRECISIONS[p] for p in op.operands)
            if op.opcode == "fusion":
                ip.fusion_kind = "kOutput"
                ip.called_computation_ids.append(comp_ids[op.calls])
            if op.config is not None:
                ip.backend_config = json.dumps(op.config).encode()
            insts.append(ip)
        root = HloInstructionProto(name="root", opcode=root_opcode, id=next(ids), shape=shape,
                                   operand_ids=[a.id, insts[-1].id][: 1 if root_opcode == "tuple" else 2])
        insts.append(root)
        module.computations.add(name=name, id=cid, root_id=root.id).instructions.extend(insts)

    for name, parts in reversed(fused.items()):
        computation(name, comp_ids[name], parts, "add")
    computation("main", 1, entry, "tuple")
    return module.SerializeToString()


def _column(module) -> dict[str, str]:
    df = instruction_costs(module)
    return dict(zip(df["name"], df["precision"]))


@pytest.mark.parametrize("seed", range(30))
def test_precision_from_proto_equals_text_equals_drawn(seed):
    entry, fused, want = _draw(random.Random(seed))
    from_proto = _column(parse_hlo_proto(_as_proto(entry, fused), f"generated-{seed}"))
    from_text = _column(parse_hlo_text(_as_text(entry, fused), f"generated-{seed}.txt"))
    got_proto = {name: from_proto[name] for name in want}
    got_text = {name: from_text[name] for name in want}
    assert got_proto == got_text == want


def test_the_drawn_cases_cover_each_rule():
    """Across the seeds, some op is full f32 only by its own operands, some only by its library config,
    some fusion only by a fused part, and some op only by its own F32_F32_F32 algorithm."""
    seen = {"own": 0, "library": 0, "fused": 0, "own_algorithm_f32": 0}
    for seed in range(30):
        entry, fused, want = _draw(random.Random(seed))
        for op in entry:
            seen["own"] += op.own_highest and not op.library_highest
            seen["library"] += op.library_highest and not op.own_highest
            seen["fused"] += op.opcode == "fusion" and want[op.name] == "highest"
            seen["own_algorithm_f32"] += (op.opcode == "dot" and op.algorithm == "dot_f32_f32_f32"
                                          and "highest" not in op.operands
                                          and not op.library_highest and want[op.name] == "highest")
    assert all(seen.values()), seen


def test_library_config_precision_forms():
    wrapped = {"gemm_backend_config": {"precision_config": {"algorithm": "ALG_DOT_F32_F32_F32",
                                                            "operand_precision": ["DEFAULT", "HIGHEST"]}}}
    assert config_precision(wrapped) == Precision(("default", "highest"), "dot_f32_f32_f32")
    flat = {"alpha_real": 1, "precision_config": {"operand_precision": ["HIGH", "DEFAULT"], "algorithm": "ALG_UNSET"}}
    assert config_precision(flat) == Precision(("high", "default"), None)
    for none in ({}, {"cudnn_conv_backend_config": {}}, {"gemm_backend_config": None},
                 {"gemm_backend_config": {"precision_config": "x"}},
                 {"gemm_backend_config": {"precision_config": {"algorithm": "ALG_UNSET"}}}):
        assert config_precision(none) == NO_PRECISION, none


# ---------------------------------------------------------------------------
# the execution thread of async wrappers (the typed ``async_execution_thread``)

def _threads_text(drawn: list[tuple[str | None, str | None]]) -> str:
    """Each wrapper printed as XLA prints it: no ``async_execution_thread`` and no computation
    ``execution_thread`` for the main thread."""
    lines = ["HloModule threads", ""]
    for k, (_, comp_thread) in enumerate(drawn):
        lines += [f"%wrapped_{k} (p: f32[4,4]) -> f32[4,4] {{", "  %p = f32[4,4]{1,0} parameter(0)",
                  "  ROOT %n = f32[4,4]{1,0} negate(f32[4,4]{1,0} %p)",
                  "}" + (f', execution_thread="{comp_thread}"' if comp_thread not in (None, "main") else ""), ""]
    lines += ["ENTRY %main (a: f32[4,4]) -> f32[4,4] {", "  %a = f32[4,4]{1,0} parameter(0)"]
    wrapper = "((f32[4,4]{1,0}), f32[4,4]{1,0}, s32[])"
    for k, (thread, _) in enumerate(drawn):
        printed = f', async_execution_thread="{thread}"' if thread not in (None, "main") else ""
        lines += [f"  %start{k} = {wrapper} async-start(f32[4,4]{{1,0}} %a){printed}, calls=%wrapped_{k}",
                  f"  %done{k} = f32[4,4]{{1,0}} async-done({wrapper} %start{k})"]
    lines += [f"  ROOT %out = f32[4,4]{{1,0}} negate(f32[4,4]{{1,0}} %done{len(drawn) - 1})", "}", ""]
    return "\n".join(lines)


def _threads_proto(drawn: list[tuple[str | None, str | None]]) -> bytes:
    Shape, HloInstructionProto = message_class("ShapeProto"), message_class("HloInstructionProto")
    array = Shape(element_type=11, dimensions=[4, 4])
    wrapper = Shape(element_type=13, tuple_shapes=[Shape(element_type=13, tuple_shapes=[array]), array,
                                                   Shape(element_type=4)])
    module = message_class("HloModuleProto")(name="threads", entry_computation_name="main", id=1)
    ids = iter(range(1, 10_000))
    for k, (_, comp_thread) in enumerate(drawn):
        p = HloInstructionProto(name="p", opcode="parameter", id=next(ids), shape=array)
        n = HloInstructionProto(name="n", opcode="negate", id=next(ids), shape=array, operand_ids=[p.id])
        module.computations.add(name=f"wrapped_{k}", id=10 + k, root_id=n.id,
                                execution_thread=comp_thread or "").instructions.extend([p, n])
    a = HloInstructionProto(name="a", opcode="parameter", id=next(ids), shape=array)
    insts = [a]
    for k, (thread, _) in enumerate(drawn):
        start = HloInstructionProto(name=f"start{k}", opcode="async-start", id=next(ids), shape=wrapper,
                                    operand_ids=[a.id], called_computation_ids=[10 + k],
                                    async_execution_thread=thread or "")
        insts += [start, HloInstructionProto(name=f"done{k}", opcode="async-done", id=next(ids), shape=array,
                                             operand_ids=[start.id])]
    insts.append(HloInstructionProto(name="out", opcode="negate", id=next(ids), shape=array,
                                     operand_ids=[insts[-1].id]))
    module.computations.add(name="main", id=1, root_id=insts[-1].id).instructions.extend(insts)
    return module.SerializeToString()


@pytest.mark.parametrize("seed", range(10))
def test_async_execution_thread_from_proto_equals_text_equals_drawn(seed):
    """A wrapper's own thread, else (none printed: the main one) its wrapped computation's; "" for main."""
    rng = random.Random(seed)
    drawn = [(rng.choice((None, "main", "sparsecore", "host")), rng.choice((None, "main", "sparsecore")))
             for _ in range(rng.randint(3, 8))]
    want = {}
    for k, (thread, comp_thread) in enumerate(drawn):
        chosen = thread if thread not in (None, "main") else comp_thread
        want[f"start{k}"] = want[f"done{k}"] = "" if chosen in (None, "main") else chosen
    columns = []
    for module in (parse_hlo_proto(_threads_proto(drawn), "threads"), parse_hlo_text(_threads_text(drawn), "t")):
        df = instruction_costs(module)
        got = dict(zip(df["name"], df["execution_thread"]))
        columns.append({name: got[name] for name in want})
    assert columns[0] == columns[1] == want
