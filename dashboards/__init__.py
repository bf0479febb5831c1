"""The Streamlit dashboard. Installed as ``traceview.dashboards``."""
