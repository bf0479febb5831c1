"""What the dashboard opens: passed from `traceview dashboard` to the app through environment variables.

One mechanism for every caller: the CLI sets these variables for the
Streamlit server it starts, and tests set them before `AppTest.run()`.
Environment variables survive Streamlit's re-execution of the script on
every interaction, unlike `sys.argv` (which AppTest does not set).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

PREFIX = "TRACEVIEW_DASHBOARD_"
_FIELDS = ("path", "run", "target", "hardware_file", "hlo", "stage", "history", "record_keys")


@dataclass(frozen=True)
class DashboardConfig:
    path: str | None = None           # a log dir, run dir or .xplane.pb file
    run: str | None = None            # which run of a log dir (default: the newest)
    target: str | None = None         # chip name; default: the one the trace was captured on
    hardware_file: str | None = None  # JSON adding or overriding chips
    hlo: str | None = None            # XLA dump folder or HLO file
    stage: str | None = None          # "after" (default) or "before" optimizations, for dumped HLO
    history: str | None = None        # a history store (SQLite file or postgresql:// URL) for the History tab
    # Result-cache keys (comma-separated) under which the analyze JSON record of the opening trace may be
    # stored, the last one the dashboard's own (dashboards/front.py); `traceview dashboard` computes them.
    record_keys: str | None = None

    def to_env(self) -> dict[str, str]:
        """The variables that make the app open this configuration."""
        return {PREFIX + name.upper(): str(getattr(self, name)) for name in _FIELDS
                if getattr(self, name) is not None}


def from_env(environ: Mapping[str, str] | None = None) -> DashboardConfig:
    env = os.environ if environ is None else environ
    return DashboardConfig(**{name: (env.get(PREFIX + name.upper()) or None) for name in _FIELDS})
