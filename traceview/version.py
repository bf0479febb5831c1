"""The package version: one place, read by the CLI, the caches' keys and the reports (no other import)."""

__version__ = "0.1.0"
