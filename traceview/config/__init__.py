"""User files (hardware databases, budgets, baselines): read with bounds and validated against a schema."""
