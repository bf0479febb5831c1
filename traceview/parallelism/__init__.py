"""Parallelism diagnosis: the device mesh, communication per mesh axis, and the book's verdict per axis.

mesh (axes, sizes, names) <- groups (each collective's device groups) -> attribution (axes per collective)
-> roles (what each axis is for) + dots (per-chip batch, per-shard width) -> rules (the book's C/W tests)
-> diagnose (one report, with the Analysis's exposed times) -> report (JSON / table / Markdown).
"""
