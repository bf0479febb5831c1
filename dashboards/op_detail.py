"""Op detail: the selected op's HLO, fused computation, source location and the roofline arithmetic behind
its label, all from the same records `traceview analyze --format json` prints."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from traceview.cost import fused_instruction_costs
from traceview.dashboards import selection
from traceview.dashboards.data import View
from traceview.dashboards.hlo_format import (
    computation_text,
    find_instruction,
    instruction_text,
    source_location,
    source_snippet,
)
from traceview.dashboards.persist import keep_across_tabs
from traceview.errors import UserError
from traceview.hardware.chips import Chip, dtype_class
from traceview.render.escape import markdown_code, markdown_text
from traceview.units import fmt_pct, fmt_si, fmt_time_us, number

PICK = "tv_op_pick"


def arithmetic(record: dict, chip: Chip) -> pd.DataFrame:
    """The roofline terms of one op as rows (term, formula, time): how its bound was reached.

    Figures are the op's totals over its occurrences, as in the JSON; the
    times are the record's own (`t_*_us`), the formulas show the inputs.
    """
    rows = []
    flops, dtype = number(record.get("flops")), record.get("dtype")
    peak, note = chip.peak_flops_rule(dtype) if dtype else (None, None)
    if flops is None and record.get("cost_lower_bound"):   # a kernel with bytes but no FLOP figure
        rows.append(("T_compute", "unknown: custom kernel without a cost estimate (no FLOP figure); its "
                     "roofline time is the memory time, a lower bound", record.get("t_compute_us")))
    elif flops == 0:    # no math: no peak is involved, and no precision rule applies
        rows.append(("T_compute", "0 FLOP: no compute", record.get("t_compute_us")))
    else:
        # the precision note concerns matrix work only (f32 matmuls as bf16 passes on the MXU)
        applies = note and record.get("contraction") is not False
        used = dtype_class(dtype) if dtype else None
        peak_class = used if used in chip.peak_flops else chip.dtype_fallbacks.get(used or "", (used, ""))[0]
        rows.append(("T_compute", f"{fmt_si(flops, 'FLOP')} / {fmt_si(peak, 'FLOP/s')} ({peak_class or '?'} peak"
                     + (f" for {dtype}" if peak_class and dtype and peak_class != dtype_class(dtype) else "")
                     + (f"; {note}" if applies else "") + ")", record.get("t_compute_us")))
    bytes_ = number(record.get("bytes_accessed"))
    rows.append(("T_memory", f"{fmt_si(bytes_, 'B')} / {fmt_si(chip.hbm_bandwidth, 'B/s')} (HBM)",
                 record.get("t_memory_us")))
    kind = record.get("collective_kind")
    if kind:
        link = chip.pcie_bandwidth if kind == "host-transfer" else chip.interconnect_bandwidth
        which = "PCIe" if kind == "host-transfer" else (chip.interconnect.type if chip.interconnect else "link")
        group = number(record.get("group_size"))
        rows.append(("T_comm", f"{kind} of {fmt_si(number(record.get('collective_bytes')), 'B')}"
                     + (f" over {int(group)} devices" if group and kind != "host-transfer" else "")
                     + f", {which} {fmt_si(link, 'B/s')} (collective formula, traceview.analysis.roofline)",
                     record.get("t_comm_us")))
    else:
        rows.append(("T_comm", "not a collective", record.get("t_comm_us")))
    rows.append(("roofline", f"max(T_compute, T_memory, T_comm) -> {record.get('bound')}-bound",
                 record.get("roofline_time_us")))
    judged = record.get("judged_time_us")
    rows.append(("measured", "judged time (self time; in-flight time for an async start)", judged))
    if record.get("projected_time_us") is not None:
        rows.append(("projected", "time on the target if the op keeps the fraction of its roofline it reached "
                     "on the capture chip", record.get("projected_time_us")))
    rows.append(("gap", f"measured - roofline; efficiency = roofline / measured = {fmt_pct(record.get('efficiency'))}",
                 record.get("gap_us")))
    rows.append(("gain", "device time saved at the roofline: the gap, at most the time the device waited on the "
                 "op (exposed time) for async or communication work", record.get("gain_us")))
    return pd.DataFrame([{"term": t, "time": fmt_time_us(number(v)), "formula": f} for t, f, v in rows])


def _labels(view: View) -> tuple[list[str], dict[str, tuple[str, str]]]:
    ops = view.ops
    keys = list(zip(ops["module"].astype(str), ops["name"].astype(str)))
    labels = [f"{name}  ·  {module}" for module, name in keys]
    return labels, dict(zip(labels, keys))


def _picked() -> None:
    key = st.session_state.get(f"{PICK}_map", {}).get(st.session_state.get(PICK))
    if key:
        selection.select(*key)


def render(view: View) -> None:
    if view.ops.empty:
        st.info("No device ops in this trace.")
        return
    labels, by_label = _labels(view)
    st.session_state[f"{PICK}_map"] = by_label
    current = selection.selected()
    wanted = next((label for label, key in by_label.items() if key == current), labels[0])
    if st.session_state.get(PICK) != wanted:
        st.session_state[PICK] = wanted
    label = st.selectbox("op (ordered by gap; or click one in the roofline chart or the op table)", labels,
                         key=PICK, on_change=_picked)
    module, name = by_label[label or labels[0]]
    record = view.ops[(view.ops["module"].astype(str) == module) & (view.ops["name"].astype(str) == name)] \
        .iloc[0].to_dict()
    _header(record)
    found = find_instruction(view.analysis.hlo.every, module, name, record.get("program_id"),
                             record.get("computation"))
    left, right = st.columns([1, 1])
    with left:
        st.markdown("**Roofline arithmetic**")
        if view.chip is None or not record.get("bound"):
            st.info("No target chip: pick one in the sidebar.")
        else:
            st.table(arithmetic(record, view.chip).set_index("term"))
            if record.get("unknown_reason"):
                st.caption(f"unknown because: {markdown_text(record['unknown_reason'])}")
    with right:
        st.markdown("**Source**")
        # The cost table resolves stack frames to file:line; the instruction's metadata is the fallback.
        file, line = record.get("source_file"), record.get("source_line")
        where = f"{file}:{int(float(line))}" if file and line else file or (found and source_location(found[2]))
        if where:
            st.code(where, language=None, wrap_lines=True)
            path, _, number = where.rpartition(":")
            snippet = source_snippet(path, int(number)) if number.isdigit() else None
            if snippet:
                st.code(snippet, language="python")
        else:
            st.caption("the HLO metadata names no source line for this op")
        if found and found[2].metadata.get("op_name"):
            st.caption(f"op_name: {markdown_text(found[2].metadata['op_name'])}")
    st.markdown("**HLO instruction**")
    if found is None:
        st.info(f"{markdown_text(name)}: no HLO instruction of that name in the modules found for this trace "
                "(is the trace's HLO missing? give a dump folder with `traceview dashboard PATH --hlo DIR`)")
        return
    module_obj, comp, inst = found
    st.code(instruction_text(inst, comp), language=None, wrap_lines=True)
    if inst.backend_config:
        with st.expander("backend config"):
            st.code(inst.backend_config, language="json", wrap_lines=True)
    _graph(view, module_obj, inst)
    if inst.opcode == "fusion":
        _fusion(module_obj, inst)


def _graph(view: View, module, inst) -> None:
    """The op's HLO neighbourhood, coloured by bound (the graph `traceview graph` draws), rendered in the page."""
    from traceview.graph.neighbourhood import annotate, op_graph
    from traceview.render.graph import to_dot

    st.markdown("**Graph** (operands above, users below; colour = bound, thick border = this op)")
    left, right = st.columns([3, 1])
    depth = left.slider("graph depth", 1, 4, 1, key="tv_graph_depth", **keep_across_tabs())
    expand = right.checkbox("open the fusion", value=True, key="tv_graph_expand", **keep_across_tabs(),
                            disabled=inst.opcode != "fusion", help="draw the fused computation inside the op")
    graph = op_graph([module], inst.name, depth=depth, expand=expand)
    annotate(graph, view.ops.to_dict("records"))
    st.graphviz_chart(to_dot(graph), width="stretch")


BOUND_BADGES = {"compute": "green", "memory": "blue", "communication": "violet", "unknown": "gray"}


def _header(record: dict) -> None:
    bound = record.get("bound")
    badge = f" :{BOUND_BADGES.get(bound, 'gray')}-badge[{bound}-bound]" if bound else ""
    st.markdown(f"#### {markdown_code(record['name'])}{badge}")
    cols = st.columns(4)
    cols[0].metric("measured", fmt_time_us(number(record.get("judged_time_us")) or number(record.get("self_time_us"))))
    cols[1].metric("roofline", fmt_time_us(number(record.get("roofline_time_us"))))
    cols[2].metric("efficiency", fmt_pct(record.get("efficiency")))
    cols[3].metric("gap", fmt_time_us(number(record.get("gap_us"))))
    st.caption(f"{markdown_text(record.get('category') or '-')} · {markdown_text(record.get('opcode') or '-')} · "
               f"{record.get('occurrences')} "
               f"occurrences ({record.get('kernels')} kernels) · {fmt_si(number(record.get('flops')), 'FLOP')} · "
               f"{fmt_si(number(record.get('bytes_accessed')), 'B')} · dtype {markdown_text(record.get('dtype') or '-')}")
    if record.get("above_roofline_reason"):
        st.info(f"Above its roofline: {markdown_text(record['above_roofline_reason'])}")


def _fusion(module, inst) -> None:
    st.markdown("**Fused computation** (FLOPs per instruction; bytes inside a fusion are not HBM traffic)")
    try:
        costs = fused_instruction_costs(module, inst.name)
    except UserError as exc:
        st.warning(markdown_text(exc))
        return
    costs = costs[costs["opcode"] != "parameter"] if len(costs) > 1 else costs
    st.dataframe(costs.drop(columns=["module", "computation"]), hide_index=True, width="stretch")
    fused = module.computations.get(inst.called_computations[0]) if inst.called_computations else None
    if fused is not None:
        with st.expander(f"HLO of {markdown_text(fused.name)} ({len(fused.instructions)} instructions)"):
            st.code(computation_text(fused), language=None)
