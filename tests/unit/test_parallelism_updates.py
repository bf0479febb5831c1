"""The data flow that tells a gradient from an activation of the same shape (traceview/parallelism/updates.py),
on generated training steps written as HLO text: one tensor-parallel MLP block whose per-device rows T equal
F / Y, so that the activation all-reduce [T, D] and the second weight's shard and gradient [F / Y, D] are the
same array type. Names, widths and ways are drawn per seed; what is expected follows from how the text was
written, not from traceview."""

from __future__ import annotations

import random

import pytest

from traceview.parallelism.updates import WALK_LIMIT, find_updates, weight_values
from traceview.parsers.hlo.text import parse_hlo_text


def _step(rng: random.Random) -> tuple[str, dict[str, str]]:
    """A training step's HLO text and the names of its parts: forward x @ w1 -> relu -> @ w2 -> all-reduce
    (activation), backward dW1, dW2 as dots, their all-reduce over the data axis (gradients), and the update
    w - lr * g of each weight."""
    y = rng.choice((2, 4, 8))
    f = y * rng.randrange(8, 64)
    t, d = f // y, rng.randrange(16, 128)
    n = {k: f"{k}_{rng.randrange(1000)}" for k in ("x", "w1", "w2", "h", "act", "ar", "dh", "g1", "g2", "gar",
                                                    "u1", "u2", "gw1", "gw2", "fused")}
    n["w1 shape"] = f"f32[{d},{t}]"
    text = f"""HloModule step_{rng.randrange(10**6)}

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%{n['fused']} (p0: f32[{d},{t}], p1: f32[{t},{d}]) -> f32[{d},{d}] {{
  %p0 = f32[{d},{t}] parameter(0)
  %p1 = f32[{t},{d}] parameter(1)
  %cp = f32[{t},{d}] copy(%p1)
  ROOT %inner = f32[{d},{d}] dot(%p0, %cp), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}

ENTRY %main (x: f32[{t},{d}], w1: f32[{d},{t}], w2: f32[{t},{d}]) -> (f32[{d},{t}], f32[{t},{d}], f32[{d},{d}]) {{
  %{n['x']} = f32[{t},{d}] parameter(0)
  %{n['w1']} = f32[{d},{t}] parameter(1)
  %{n['w2']} = f32[{t},{d}] parameter(2)
  %{n['h']} = f32[{t},{t}] dot(%{n['x']}, %{n['w1']}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %{n['act']} = f32[{t},{d}] dot(%{n['h']}, %{n['w2']}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %{n['ar']} = f32[{t},{d}] all-reduce(%{n['act']}), channel_id=1, replica_groups={{{{0,1}}}}, to_apply=%add
  %{n['dh']} = f32[{t},{t}] dot(%{n['ar']}, %{n['w2']}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
  %{n['g1']} = f32[{d},{t}] dot(%{n['x']}, %{n['dh']}), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
  %{n['g2']} = f32[{t},{d}] dot(%{n['h']}, %{n['ar']}), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
  %{n['gar']} = (f32[{d},{t}], f32[{t},{d}]) all-reduce(%{n['g1']}, %{n['g2']}), channel_id=2, replica_groups={{{{0,2}}}}, to_apply=%add
  %{n['gw1']} = f32[{d},{t}] get-tuple-element(%{n['gar']}), index=0
  %{n['gw2']} = f32[{t},{d}] get-tuple-element(%{n['gar']}), index=1
  %{n['u1']} = f32[{d},{t}] subtract(%{n['w1']}, %{n['gw1']})
  %{n['u2']} = f32[{t},{d}] subtract(%{n['w2']}, %{n['gw2']})
  %probe = f32[{d},{d}] fusion(%{n['w1']}, %{n['w2']}), kind=kOutput, calls=%{n['fused']}
  ROOT %out = (f32[{d},{t}], f32[{t},{d}], f32[{d},{d}]) tuple(%{n['u1']}, %{n['u2']}, %probe)
}}
"""
    return text, n


@pytest.mark.parametrize("seed", range(25))
def test_gradients_feed_the_update_and_same_shaped_activations_do_not(seed):
    text, n = _step(random.Random(seed))
    module = parse_hlo_text(text)
    found = find_updates(module)
    assert found is not None
    assert found.updates == {n["u1"], n["u2"]}, seed
    assert found.state == {n["w1"], n["w2"]}, seed          # the input x, of w2's shape, is not state
    assert found.feeds_update(found.computation, n["gar"]) is True
    assert found.feeds_update(found.computation, n["ar"]) is False      # the activation all-reduce
    assert found.feeds_update("some_other_computation", n["gar"]) is None
    weights = weight_values(module)
    assert weights is not None
    entry = found.computation
    assert (entry, n["w2"]) in weights and (entry, n["x"]) not in weights
    assert (n["fused"], "p1") in weights and (n["fused"], "cp") in weights and (n["fused"], "p0") in weights


def test_a_program_that_updates_nothing_has_no_updates():
    text, n = _step(random.Random(3))
    forward = text.replace("ROOT %out", "%out_unused").replace(
        "%probe = ", "ROOT %probe = ")
    module = parse_hlo_text(forward)
    assert find_updates(module) is None


def test_a_cycle_in_hostile_text_ends():
    text, n = _step(random.Random(5))
    # the update reads an add that reads itself: the walk must end, not loop
    cyclic = text.replace(f"subtract(%{n['w1']}, %{n['gw1']})", f"subtract(%{n['w1']}, %loop)").replace(
        f"  %{n['u1']} =", f"  %loop = {n['w1 shape']} add(%loop, %loop)\n  %{n['u1']} =")
    module = parse_hlo_text(cyclic)
    found = find_updates(module)
    assert found is not None and "loop" in found.feeding and len(found.feeding) < WALK_LIMIT


def _buffers(rng: random.Random) -> tuple[str, dict[str, str]]:
    """A step whose gradients are written into buffers: an embedding's gradient scattered into zeros, and a
    weight's gradient accumulated by a loop that starts from zeros; a same-shaped activation buffer (zeros a
    scatter fills from the tokens) that feeds no update."""
    v, d = rng.randrange(16, 256), rng.randrange(8, 64)
    n = {k: f"{k}_{rng.randrange(1000)}" for k in ("emb", "w", "zeros", "grad", "acc0", "loop", "gw", "mask0",
                                                    "mask", "ue", "uw", "init")}
    text = f"""HloModule buffers_{rng.randrange(10**6)}

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%body (t: (s32[], f32[{d},{d}])) -> (s32[], f32[{d},{d}]) {{
  %t = (s32[], f32[{d},{d}]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %g = f32[{d},{d}] get-tuple-element(%t), index=1
  %g2 = f32[{d},{d}] add(%g, %g)
  ROOT %r = (s32[], f32[{d},{d}]) tuple(%i, %g2)
}}

%cond (t: (s32[], f32[{d},{d}])) -> pred[] {{
  %t = (s32[], f32[{d},{d}]) parameter(0)
  ROOT %p = pred[] constant(false)
}}

ENTRY %main (emb: f32[{v},{d}], w: f32[{d},{d}], ids: s32[{v},1], upd: f32[{v},{d}]) -> (f32[{v},{d}], f32[{d},{d}], f32[{v},{d}]) {{
  %{n['emb']} = f32[{v},{d}] parameter(0)
  %{n['w']} = f32[{d},{d}] parameter(1)
  %ids = s32[{v},1] parameter(2)
  %upd = f32[{v},{d}] parameter(3)
  %zero = f32[] constant(0)
  %{n['zeros']} = f32[{v},{d}] broadcast(%zero), dimensions={{}}
  %{n['grad']} = f32[{v},{d}] scatter(%{n['zeros']}, %ids, %upd), update_window_dims={{1}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=%add
  %{n['mask0']} = f32[{v},{d}] broadcast(%zero), dimensions={{}}
  %{n['mask']} = f32[{v},{d}] scatter(%{n['mask0']}, %ids, %upd), update_window_dims={{1}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=%add
  %{n['acc0']} = f32[{d},{d}] broadcast(%zero), dimensions={{}}
  %c0 = s32[] constant(0)
  %{n['init']} = (s32[], f32[{d},{d}]) tuple(%c0, %{n['acc0']})
  %{n['loop']} = (s32[], f32[{d},{d}]) while(%{n['init']}), condition=%cond, body=%body
  %{n['gw']} = f32[{d},{d}] get-tuple-element(%{n['loop']}), index=1
  %{n['ue']} = f32[{v},{d}] subtract(%{n['emb']}, %{n['grad']})
  %{n['uw']} = f32[{d},{d}] subtract(%{n['w']}, %{n['gw']})
  ROOT %out = (f32[{v},{d}], f32[{d},{d}], f32[{v},{d}]) tuple(%{n['ue']}, %{n['uw']}, %{n['mask']})
}}
"""
    return text, n


@pytest.mark.parametrize("seed", range(10))
def test_the_buffers_gradients_are_written_into_count_as_gradients(seed):
    text, n = _buffers(random.Random(seed))
    found = find_updates(parse_hlo_text(text))
    assert found is not None and found.updates == {n["ue"], n["uw"]}
    assert {n["grad"], n["zeros"], n["gw"], n["loop"], n["acc0"]} <= found.feeding, seed
    assert n["mask"] not in found.feeding and n["mask0"] not in found.feeding, seed


@pytest.mark.parametrize("bad", ["lhs_contracting_dims={2}, rhs_contracting_dims={0}",
                                 "lhs_contracting_dims={1}, rhs_contracting_dims={3}",
                                 "lhs_batch_dims={7}, lhs_contracting_dims={1}, rhs_batch_dims={0}, "
                                 "rhs_contracting_dims={0}"])
def test_a_dot_whose_dimension_numbers_pass_its_operands_rank_is_no_matmul(bad):
    """Hostile text (the bounded fuzz run's case): dimension numbers past an operand's rank are refused where
    the dot is read, so the per-chip batch, which weighs dots by their FLOPs, never indexes past a shape."""
    from traceview.parallelism.dots import dot_of, per_chip_tokens, shape_map

    text, n = _step(random.Random(9))
    lines = [line.replace("lhs_contracting_dims={1}, rhs_contracting_dims={0}", bad)
             if line.startswith(f"  %{n['h']} =") else line for line in text.splitlines()]
    module = parse_hlo_text("\n".join(lines))
    entry = module.entry_computation()
    shapes = shape_map(entry)
    read = {i.name: dot_of(i, shapes, entry.name) for i in entry.instructions if i.opcode == "dot"}
    assert read.pop(n["h"]) is None and read and all(d is not None for d in read.values())
    weights = {tuple(sorted(a)) for a in ((8, 8),)}
    assert per_chip_tokens(module, weights, weight_values(module)).how       # reads, does not raise
