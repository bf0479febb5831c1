"""Regressions: baselines, op matching and diffs, budgets and check verdicts, and their reports."""
