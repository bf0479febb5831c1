"""The trace-event JSON reader (Chrome trace format, as XProf and JAX's Perfetto export write it):
decoding with its bounds (:mod:`.text`) and the mapping of its events to the per-host tables
(:mod:`.reader`)."""
