"""Send and recv as XLA prints them (traceview.parallelism.p2p): their pairs, validation and halves.

The pairs are read from the frontend attribute XLA's decomposer writes, printed unquoted by XLA and quoted
in hand-written HLO; a host transfer is no collective; a recv is read with its send (same channel); the two
sends of a ring XLA split into its back edge and the rest are one transfer of one value.
"""

from __future__ import annotations

import random

import pytest

from traceview.parallelism import p2p
from traceview.parallelism.groups import collective_sites
from traceview.parallelism.loops import enclosing_loops
from traceview.parsers.hlo.text import parse_hlo_text


def _module(pairs_text: str, validation: str = "", host: bool = False, loop_mark: bool = False) -> str:
    extra = f",_xla_send_recv_validation={validation}" if validation else ""
    host_attr = ", is_host_transfer=true" if host else ""
    mark = ', frontend_attributes={is_pipelined_while_loop="true"}' if loop_mark else ""
    return f"""HloModule m, num_partitions=4

body {{
  p = (s32[], f32[4,16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4,16]{{1,0}} get-tuple-element(p), index=1
  aa = token[] after-all()
  r = (f32[4,16]{{1,0}}, u32[], token[]) recv(token[] aa), channel_id=3{host_attr}, frontend_attributes={{_xla_send_recv_pipeline="1",_xla_send_recv_source_target_pairs={pairs_text}{extra}}}
  s = (f32[4,16]{{1,0}}, u32[], token[]) send(f32[4,16]{{1,0}} x, token[] aa), channel_id=3{host_attr}, frontend_attributes={{_xla_send_recv_pipeline="1",_xla_send_recv_source_target_pairs={pairs_text}{extra}}}, control-predecessors={{r}}
  rd = (f32[4,16]{{1,0}}, token[]) recv-done(r), channel_id=3
  sd = token[] send-done(s), channel_id=3
  y = f32[4,16]{{1,0}} get-tuple-element(rd), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[4,16]) tuple(j, y)
}}

cond {{
  p = (s32[], f32[4,16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT c = pred[] compare(i, n), direction=LT
}}

ENTRY e {{
  x = f32[4,16] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[4,16]) tuple(z, x)
  w = (s32[], f32[4,16]) while(t), condition=cond, body=body{mark}
  ROOT o = f32[4,16] get-tuple-element(w), index=1
}}
"""


def _pairs_text(pairs, quoted: bool) -> str:
    text = "{" + ",".join(f"{{{a},{b}}}" for a, b in pairs) + "}"
    return f'"{text}"' if quoted else text


@pytest.mark.parametrize("quoted", [False, True])
def test_pairs_and_validation_read_as_printed(quoted):
    rng = random.Random(40)
    for _ in range(20):
        n = rng.randint(2, 8)
        pairs = [(i, (i + 1) % n) for i in range(n)]
        rng.shuffle(pairs)
        bounds = [(rng.randint(0, 5), rng.randint(6, 20)) for _ in pairs]
        module = parse_hlo_text(_module(_pairs_text(pairs, quoted), _pairs_text(bounds, quoted)))
        body = module.computations["body"].by_name()
        for name in ("r", "s"):
            assert p2p.send_recv_pairs(body[name]) == pairs
            assert p2p.validation(body[name]) == bounds
        sites = {s.name: s for s in collective_sites(module)}
        assert set(sites) == {"r", "s"} and sites["s"].pairs == pairs and sites["r"].pairs == pairs


def test_frontend_attributes_keep_commas_and_braces_inside_values():
    def send(frontend: str):  # attributes are decoded on first read: a fresh instruction per text
        inst = parse_hlo_text(_module(_pairs_text([(0, 1)], False))).computations["body"].by_name()["s"]
        inst.attributes["frontend_attributes"] = frontend
        return inst

    inst = send('{a="x,y",b={{1,2},{3,4}},c="say \\"hi\\"",d=7}')
    assert p2p.frontend_attributes(inst) == {"a": "x,y", "b": "{{1,2},{3,4}}", "c": 'say "hi"', "d": "7"}
    assert p2p.frontend_attributes(send("not braces")) == {}


def test_invalid_validation_and_host_transfers():
    module = parse_hlo_text(_module(_pairs_text([(0, 1)], False), '"invalid"'))
    assert p2p.validation(module.computations["body"].by_name()["s"]) == []
    host = parse_hlo_text(_module(_pairs_text([(0, 1)], False), host=True))
    assert collective_sites(host) == []                    # a transfer to or from the host: no collective
    bare = parse_hlo_text(_module(_pairs_text([(0, 1)], False)).replace("_xla_send_recv_source_target_pairs",
                                                                        "_xla_other"))
    assert all(s.pairs is None and "no source-target pairs" in s.note for s in collective_sites(bare))


def test_a_recv_is_read_with_its_send():
    module = parse_hlo_text(_module(_pairs_text([(0, 1), (1, 2)], False)))
    body = module.computations["body"].by_name()
    assert p2p.partner(module, "body", body["r"])[1].name == "s"
    assert p2p.partner(module, "body", body["s"])[1].name == "r"
    assert p2p.received_value(module, "body", body["s"]) == ("body", "rd")
    assert p2p.received_value(module, "body", body["r"]) == ("body", "rd")
    # both halves move one value: the send's operand
    assert p2p.transfer_key(module, "body", body["r"]) == p2p.transfer_key(module, "body", body["s"]) == ("body", "x")


@pytest.mark.parametrize("span, agrees", [(7, True), (5, False)])
def test_validation_checked_against_the_loop_reading(span, agrees):
    bounds = [(i, i + span - 1) for i in range(3)]
    module = parse_hlo_text(_module(_pairs_text([(0, 1), (1, 2), (2, 3)], False), _pairs_text(bounds, False),
                                    loop_mark=True))
    loop = enclosing_loops(module)["body"]
    sends = [module.computations["body"].by_name()["s"]]
    note = p2p.send_recv_note(module, loop, sends, 7)          # n - p + 1 = 10 - 4 + 1
    assert "send/recv pair" in note and "is_pipelined_while_loop" in note
    assert ("it agrees" in note) == agrees and (f"on {span} iterations" in note)
    assert p2p.send_recv_note(module, loop, [None], 7) == ""
