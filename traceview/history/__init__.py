"""The regression history: every CI run recorded in a database, trends per metric, change points.

``record`` turns an analysis into a run (its metrics and ops), ``store`` keeps runs in SQLite or
PostgreSQL (through SQLAlchemy; ``schema`` is the versioned schema), ``changes`` finds change points
and confirms each with the runs' own step times, ``trends`` builds the report (the JSON contract of
``traceview history report``) and ``window`` the stable baseline ``traceview check --history`` uses.
docs/history.md defines every metric.
"""
