"""traceview: roofline analysis of XLA / JAX profiler traces."""

__version__ = "0.1.0"
