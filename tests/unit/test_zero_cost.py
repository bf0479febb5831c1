"""Compiler annotations and bookkeeping calls cost zero and are not "unknown"; unknown targets still are."""

from __future__ import annotations

from traceview.cost import instruction_costs
from traceview.parsers.hlo.text import parse_hlo_text

HLO = """HloModule zero

ENTRY main {
  p0 = f32[64,64]{1,0} parameter(0)
  sharded = f32[64,64]{1,0} custom-call(p0), custom_call_target="Sharding", sharding={replicated}
  full = f32[64,64]{1,0} custom-call(sharded), custom_call_target="SPMDFullToShardShape"
  placed = f32[64,64]{1,0} custom-call(full), custom_call_target="annotate_device_placement"
  buf = f32[64,64]{1,0} custom-call(), custom_call_target="AllocateBuffer"
  nop = f32[64,64]{1,0} custom-call(placed), custom_call_target="Noop"
  tup = (f32[64,64]{1,0}, f32[64,64]{1,0}) tuple(nop, buf)
  barrier = (f32[64,64]{1,0}, f32[64,64]{1,0}) opt-barrier(tup)
  mystery = f32[64,64]{1,0} custom-call(p0), custom_call_target="my_kernel"
  gte = f32[64,64]{1,0} get-tuple-element(barrier), index=0
  ROOT add = f32[64,64]{1,0} add(gte, mystery)
}
"""


def test_annotations_cost_zero_and_are_known():
    module = parse_hlo_text(HLO)
    costs = instruction_costs(module).set_index("name")
    for name in ("sharded", "full", "placed", "buf", "nop", "barrier"):
        row = costs.loc[name]
        assert row["flops"] == 0 and row["bytes_accessed"] == 0, name
        assert not row["unknown"] and not row["cost_lower_bound"], name
    # a custom call we do not know is not free: its FLOPs are unknown, its bytes only a lower bound
    assert costs.loc["mystery", "cost_lower_bound"] and costs.loc["mystery", "bytes_accessed"] == 2 * 64 * 64 * 4
    # add: 64*64 FLOPs, reads two 64x64 f32 operands and writes one: 3 * 16 KiB
    assert costs.loc["add", "flops"] == 64 * 64 and costs.loc["add", "bytes_accessed"] == 3 * 64 * 64 * 4
    warnings = " ".join(costs.attrs.get("warnings", []))
    assert "my_kernel" in warnings
    assert "my_kernel" in warnings and "Sharding" not in warnings and "AllocateBuffer" not in warnings
    assert "opt-barrier" not in warnings
