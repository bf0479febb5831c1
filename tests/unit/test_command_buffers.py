"""Kernels of XLA command buffers placed on their instructions, on generated programs (random names, shapes,
shared kernels and library calls), and executions told apart from kernels."""

from __future__ import annotations

import numpy as np
import pytest

from traceview.parsers.command_buffers import KernelSchedule, kernel_key, place_kernels
from traceview.parsers.gpu_kernels import execution_starts
from traceview.parsers.hlo_model import Computation, HloModule, Instruction, Shape

_LIBRARY_MAINS = ["nvjet_sm90_tst_128x256_64x4_2x1_v_bz_NNT", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n",
                  "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_nn_align8"]


def _program(rng: np.random.Generator) -> tuple[HloModule, list[str], list[str]]:
    """A random GPU program and the kernels it launches as XLA would: (module, kernels in order, the
    instruction each kernel belongs to)."""
    stems = [f"{w}_fusion" for w in rng.choice(["loop_add", "input_reduce", "loop_convert", "fusion", "wrapped_mul",
                                                  "loop_broadcast", "input_transpose"], 4, replace=False)]
    insts = [Instruction(f"p{i}", "parameter", Shape("bf16", (8, 8)), []) for i in range(2)]
    kernels: list[str] = []
    owner: list[str] = []
    first_of: dict[tuple, str] = {}
    counters: dict[str, int] = {}
    for _ in range(int(rng.integers(20, 60))):
        kind = rng.random()
        if kind < 0.65:                                    # an XLA fusion, maybe identical to an earlier one
            stem = str(rng.choice(stems))
            counters[stem] = counters.get(stem, -1) + 1
            name = stem if counters[stem] == 0 else f"{stem}.{counters[stem]}"
            dims = (int(rng.choice([4, 8])), 8)
            operand = insts[-1].name
            inst = Instruction(name, "fusion", Shape("bf16", dims), [operand], fusion_kind="kLoop",
                               called_computations=[f"fused_{name}"])
            signature = (stem, dims, insts[-1].shape)
            kernels.append(kernel_key(first_of.setdefault(signature, name)))
            owner.append(name)
        elif kind < 0.9:                                   # a cuBLAS call: memset, GEMM, maybe a split-K reduce
            counters["custom-call"] = counters.get("custom-call", 0) + 1
            name = f"custom-call.{counters['custom-call']}"
            inst = Instruction(name, "custom-call", Shape("tuple", tuple_shapes=(Shape("bf16", (8, 8)), Shape("s8", (64,)))),
                               [insts[-1].name], custom_call_target="__cublas$lt$matmul")
            launched = (["Memset 0"] if rng.random() < 0.6 else []) + [str(rng.choice(_LIBRARY_MAINS))]
            if rng.random() < 0.3:
                launched.append("splitKreduce_kernel")
            kernels += launched
            owner += [name] * len(launched)
        else:                                              # a copy run as a memcpy node
            counters["copy"] = counters.get("copy", 0) + 1
            name = f"copy.{counters['copy']}"
            inst = Instruction(name, "copy", insts[-1].shape, [insts[-1].name])
            kernels.append("memcpy32_post")
            owner.append(name)
        insts.append(inst)
        if rng.random() < 0.3:                             # views launch nothing
            insts.append(Instruction(f"bitcast.{len(insts)}", "bitcast", inst.shape, [inst.name]))
    entry = Computation("main", insts, root=insts[-1].name, is_entry=True)
    return HloModule("jit_step", {"main": entry}, "main"), kernels, owner


@pytest.mark.parametrize("seed", range(40))
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
