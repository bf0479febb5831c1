"""The selected op, shared by the roofline chart, the op table and the op-detail panel.

Streamlit keeps a chart's or a table's selection in its widget state and
reports it again on every rerun; only a *changed* selection moves the shared
one, so picking another op elsewhere is not overridden by a stale click.
"""

from __future__ import annotations

import streamlit as st

SELECTED = "tv_selected"          # session-state key: (module, op name) or absent


def selected() -> tuple[str, str] | None:
    value = st.session_state.get(SELECTED)
    return tuple(value) if value else None


def select(module: str, name: str) -> None:
    st.session_state[SELECTED] = (str(module), str(name))


def select_if_changed(widget: str, value: tuple[str, str] | None) -> None:
    """The widget named `widget` reports `value` as its selection: it becomes the selected op if it changed."""
    memo = f"_tv_last_{widget}"
    if st.session_state.get(memo) == value:
        return
    st.session_state[memo] = value
    if value:
        select(*value)
