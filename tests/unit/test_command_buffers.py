"""Kernels of XLA command buffers placed on their instructions, on generated programs (random names, shapes,
shared kernels and library calls), and executions told apart from kernels."""

from __future__ import annotations

import numpy as np
import pytest

from traceview.parsers.hlo.command_buffers import KernelSchedule, kernel_key, place_kernels
from traceview.parsers.hlo.model import Computation, HloModule, Instruction, Shape
from traceview.parsers.tables.gpu_kernels import execution_starts

_LIBRARY_MAINS = ["nvjet_sm90_tst_128x256_64x4_2x1_v_bz_NNT", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n",
                  "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_nn_align8"]


class _Generator:
    """Random GPU programs and the kernels they launch as XLA would."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.stems = [f"{w}_fusion" for w in rng.choice(["loop_add", "input_reduce", "loop_convert", "fusion",
                                                          "wrapped_mul", "loop_broadcast", "input_transpose"], 4,
                                                         replace=False)]
        self.counters: dict[str, int] = {}
        self.first_of: dict[tuple, str] = {}

    def _name(self, stem: str, dot: bool = True) -> str:
        self.counters[stem] = self.counters.get(stem, -1) + 1
        n = self.counters[stem]
        return stem if n == 0 and not dot else f"{stem}.{n}"

    def segment(self, first: Instruction, length: int) -> tuple[list[Instruction], list[str], list[str]]:
        """Instructions after ``first`` (its operand), the kernels they launch and whose each kernel is."""
        rng, insts, kernels, owner = self.rng, [first], [], []
        for _ in range(length):
            kind = rng.random()
            if kind < 0.65:                                # an XLA fusion, maybe identical to an earlier one
                stem = str(rng.choice(self.stems))
                name = self._name(stem, dot=False)
                dims = (int(rng.choice([4, 8])), 8)
                inst = Instruction(name, "fusion", Shape("bf16", dims), [insts[-1].name], fusion_kind="kLoop",
                                   called_computations=[f"fused_{name}"])
                signature = (stem, dims, insts[-1].shape)
                kernels.append(kernel_key(self.first_of.setdefault(signature, name)))
                owner.append(name)
            elif kind < 0.9:                               # a cuBLAS call: memset, GEMM, maybe a split-K reduce
                name = self._name("custom-call")
                inst = Instruction(name, "custom-call",
                                   Shape("tuple", tuple_shapes=(Shape("bf16", (8, 8)), Shape("s8", (64,)))),
                                   [insts[-1].name], custom_call_target="__cublas$lt$matmul")
                launched = (["Memset 0"] if rng.random() < 0.6 else []) + [str(rng.choice(_LIBRARY_MAINS))]
                if rng.random() < 0.3:
                    launched.append("splitKreduce_kernel")
                kernels += launched
                owner += [name] * len(launched)
            else:                                          # a copy run as a memcpy node
                name = self._name("copy")
                inst = Instruction(name, "copy", insts[-1].shape, [insts[-1].name])
                kernels.append("memcpy32_post")
                owner.append(name)
            insts.append(inst)
            if rng.random() < 0.3:                         # views launch nothing
                insts.append(Instruction(f"bitcast.{self._name('bitcast')}", "bitcast", inst.shape, [inst.name]))
        return insts, kernels, owner


def _program(rng: np.random.Generator) -> tuple[HloModule, list[str], list[str]]:
    """A random GPU program, maybe with a loop (a scan's while: its body's kernels once per iteration), and the
    kernels it launches in order with the instruction each belongs to."""
    gen = _Generator(rng)
    head = Instruction("p0", "parameter", Shape("bf16", (8, 8)), [])
    computations: dict[str, Computation] = {}
    pre, kernels, owner = gen.segment(head, int(rng.integers(5, 30)))
    if rng.random() < 0.5:
        trips = int(rng.integers(2, 5))
        body_param = Instruction("body_p", "parameter", Shape("bf16", (8, 8)), [])
        body, body_kernels, body_owner = gen.segment(body_param, int(rng.integers(3, 12)))
        cond_name = gen._name("loop_compare_fusion", dot=False)
        cond = [Instruction("cond_p", "parameter", Shape("bf16", (8, 8)), []),
                Instruction(cond_name, "fusion", Shape("pred", ()), ["cond_p"], fusion_kind="kLoop")]
        computations["body"] = Computation("body", body, root=body[-1].name)
        computations["cond"] = Computation("cond", cond, root=cond_name)
        loop = Instruction("while.1", "while", body[-1].shape, [pre[-1].name], called_computations=["cond", "body"])
        for _ in range(trips):
            kernels += [kernel_key(cond_name)] + body_kernels
            owner += [cond_name] + body_owner
        kernels.append(kernel_key(cond_name))
        owner.append(cond_name)
        post, post_kernels, post_owner = gen.segment(loop, int(rng.integers(2, 10)))
        pre += post
        kernels += post_kernels
        owner += post_owner
    computations["main"] = Computation("main", pre, root=pre[-1].name, is_entry=True)
    return HloModule("jit_step", computations, "main"), kernels, owner


@pytest.mark.parametrize("seed", range(300))
def test_generated_programs_place_every_kernel_on_its_instruction(seed):
    rng = np.random.default_rng(seed)
    module, kernels, owner = _program(rng)
    placement = place_kernels(kernels, KernelSchedule.of(module))
    assert list(placement.ops) == owner
    xla = [j for j, k in enumerate(kernels) if KernelSchedule.of(module).xla_slot(k) is not None]
    assert all(placement.how[j] == "name" for j in xla)
    assert all(placement.how[j] == "order" for j in range(len(kernels)) if j not in set(xla))


def test_a_kernel_with_no_library_call_left_stays_unplaced():
    entry = Computation("main", [Instruction("p", "parameter", Shape("f32", (4,)), []),
                                 Instruction("loop_add_fusion", "fusion", Shape("f32", (4,)), ["p"], fusion_kind="kLoop")],
                        root="loop_add_fusion", is_entry=True)
    placement = place_kernels(["nvjet_sm90_gemm", "loop_add_fusion"], KernelSchedule.of(HloModule("m", {"main": entry}, "main")))
    assert placement.ops == (None, "loop_add_fusion")
    assert placement.how == ("", "name")


@pytest.mark.parametrize("seed", range(20))
def test_execution_starts_count_calls_not_kernels(seed):
    """Runs of an op's kernels: each call is [memset?] GEMM [reduce?]; a loop repeats the same call."""
    rng = np.random.default_rng(seed)
    op, kernel, calls = [], [], 0
    for _ in range(int(rng.integers(5, 40))):
        name = int(rng.integers(0, 4))
        pattern = [[10], [11, 12], [11, 12, 13], [14]][name]   # an op launches the same kernels each call
        for _repeat in range(int(rng.integers(1, 4))):      # the same op called again back to back (a loop)
            op += [name] * len(pattern)
            kernel += pattern
            calls += 1
    starts = execution_starts(np.array(op), np.array(kernel))
    assert int(starts.sum()) == calls
    assert starts[0] == 1
