"""Widget values that outlive their tab: only the open tab's widgets are drawn (dashboards/tabs.py), and
Streamlit forgets the value of a widget that a run does not draw unless told to keep it."""

from __future__ import annotations

import inspect

import streamlit as st

_PERSIST = "persist_state" in inspect.signature(st.selectbox).parameters


def keep_across_tabs() -> dict:
    """Keyword arguments that keep a widget's value while its tab is closed (where Streamlit can)."""
    return {"persist_state": "page"} if _PERSIST else {}
