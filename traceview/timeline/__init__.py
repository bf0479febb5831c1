"""Time on the device timeline: interval unions, async start/done pairing, exposed time, per-op and per-step aggregates."""
