"""The checks StableHLO text passes before jaxlib's parser sees it (parsers/hlo/stablehlo_bounds.py)."""

from __future__ import annotations

import pytest

from traceview.errors import HloError
from traceview.parsers.hlo.stablehlo_bounds import MAX_NESTING, check_mlir, nesting_depth

MAIN = ('module @m {\n  func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n    BODY\n'
        '    return %a : tensor<4xf32>\n  }\nOTHER}\n')


def _module(body: str = "", other: str = "") -> str:
    return MAIN.replace("BODY", body).replace("OTHER", other)


def test_nesting_counts_brackets_outside_strings_and_comments():
    assert nesting_depth("a(b[c{d<e>}])") == 4
    assert nesting_depth(")))((") == 2            # a stray closing bracket never counts below zero
    check_mlir(_module('%0 = "x"() {s = "' + "(" * 10_000 + '"} : () -> ()  // ' + "[" * 10_000), "f.mlir")
    with pytest.raises(HloError, match=r"f\.mlir: StableHLO text nested \d+ levels deep"):
        check_mlir(_module("x = " + "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)), "f.mlir")


def test_arrows_are_no_brackets():
    check_mlir(_module("%0 = stablehlo.add %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n" * 400),
               "f.mlir")


def test_a_call_cycle_is_named():
    call_g = "%0 = call @g(%a) : (tensor<4xf32>) -> tensor<4xf32>"
    g = ("  func.func private @g(%b: tensor<4xf32>) -> tensor<4xf32> {\n    CALL\n"
         "    return %b : tensor<4xf32>\n  }\n")
    check_mlir(_module(call_g, g.replace("CALL", "")), "f.mlir")               # main calls g: fine
    with pytest.raises(HloError, match="@main calls itself: recursion"):
        check_mlir(_module("%0 = call @main(%a) : (tensor<4xf32>) -> tensor<4xf32>"), "f.mlir")
    with pytest.raises(HloError, match=r"@(main|g) calls itself \(through @(g|main)\)"):
        check_mlir(_module(call_g, g.replace("CALL", "%1 = func.call @main(%b) : (tensor<4xf32>) -> tensor<4xf32>")),
                   "f.mlir")


@pytest.mark.parametrize("sharding", ["{replicated}", "{maximal device=0}", "{devices=[2,2]<=[4]}",
                                      "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}",
                                      "{devices=[2,2]0,1,2,3}", "{{replicated}, {devices=[4]<=[4]}}", "{manual}"])
def test_real_shardings_pass(sharding):
    check_mlir(_module(f'%0 = stablehlo.custom_call @Sharding(%a) {{mhlo.sharding = "{sharding}"}} : '
                       "(tensor<4xf32>) -> tensor<4xf32>"), "f.mlir")


@pytest.mark.parametrize("sharding", ["{{{", "}{", "{replicated", "{devices=[2,2]<=[3]}", "{devices=[a,b]0,1}",
                                      "{devices=[99999999,99999999]<=[9999999999]}", "{nothing}"])
def test_shardings_xla_cannot_build_are_refused(sharding):
    with pytest.raises(HloError, match=r"f\.mlir: mhlo\.sharding"):
        check_mlir(_module(f'%0 = stablehlo.custom_call @Sharding(%a) {{mhlo.sharding = "{sharding}"}} : '
                           "(tensor<4xf32>) -> tensor<4xf32>"), "f.mlir")
