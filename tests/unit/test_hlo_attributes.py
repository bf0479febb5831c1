"""Instruction.typed: an HLO instruction's attributes decoded once into typed values, as the cost model
reads them."""

from __future__ import annotations

import itertools

import pytest

from traceview.parsers.hlo.attributes import ConvDims, WindowDim
from traceview.parsers.hlo.text import parse_hlo_text

_HLO = """HloModule typed, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (p0: f32[1,8,8,4], p1: f32[3,3,2,8], p2: f32[4,6]) -> f32[1,4,4,8] {
  %p0 = f32[1,8,8,4]{3,2,1,0} parameter(0)
  %p1 = f32[3,3,2,8]{3,2,1,0} parameter(1)
  %p2 = f32[4,6]{1,0} parameter(2)
  %ar = f32[4,6]{1,0} all-reduce(%p2), replica_groups=[2,4]<=[8], to_apply=%add
  %cp = f32[4,6]{1,0} collective-permute(%p2), source_target_pairs={{0,1},{1,2},{2,0}}
  %t = f32[6,4]{1,0} transpose(%p2), dimensions={1,0}
  ROOT %conv = f32[1,4,4,8]{3,2,1,0} convolution(%p0, %p1), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=2
}
"""


@pytest.fixture(scope="module")
def insts():
    module = parse_hlo_text(_HLO)
    return {i.name: i for i in module.computations["main"].instructions}


def test_each_attribute_reads_as_its_type(insts):
    conv = insts["conv"].typed
    assert conv.window == (WindowDim(3, 2, 1, 1), WindowDim(3, 2, 1, 1))
    assert conv.conv_dims == ConvDims(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))
    assert (conv.feature_group_count, conv.batch_group_count) == (2, 1)
    # iota groups [2,4]<=[8]: two groups of four consecutive devices
    assert insts["ar"].typed.replica_groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert insts["cp"].typed.source_target_pairs == ((0, 1), (1, 2), (2, 0))
    assert insts["t"].typed.dimensions == (1, 0)
    assert [insts[f"p{k}"].typed.parameter_number for k in range(3)] == [0, 1, 2]


def test_absent_attributes_read_as_xla_defaults(insts):
    p2 = insts["p2"].typed
    assert p2.window == () and p2.conv_dims is None and p2.dimensions == () and p2.fft_length == ()
    assert (p2.feature_group_count, p2.batch_group_count, p2.index) == (1, 1, -1)
    assert p2.replica_groups is None and p2.source_target_pairs == () and p2.backend_config == {}
    assert p2.known_trip_count is None


def test_decoded_once_and_kept_with_the_instruction(insts):
    conv = insts["conv"]
    first = conv.typed
    assert conv.typed is first and first.window is conv.typed.window  # one decode, kept
    for a, b in itertools.combinations([conv, insts["ar"], insts["cp"]], 2):
        assert a.typed is not b.typed
    assert "_typed" not in repr(conv)  # not part of what an instruction shows or compares
