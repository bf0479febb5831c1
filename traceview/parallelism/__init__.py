"""Parallelism diagnosis: the device mesh, communication per mesh axis, the strategies on each axis and the
book's verdict for each.

mesh (axes, sizes, names) <- groups (each collective's device groups) -> attribution (axes per collective)
-> roles (patterns and what each axis is for) + structure (context: the ring or gathered K/V; pipeline: the
schedule's loop, via loops; expert: the router and all-to-alls) + dots (per-chip batch, per-shard width)
-> rules (the book's tests) -> diagnose (one report, report.py's records, times.py's trace figures;
mpmd: a pipeline that runs a program per stage, its bubble measured in the trace's op executions)
-> render.parallelism (JSON / table / Markdown). docs/parallelism.md has the rules with worked examples.
"""
