"""A pod's map-reduce: each host's tables reduced where they are read to one small part (its ops, its device
and host activity, its allocators' peaks), the parts merged into the run's tables, kept rows spilled to disk."""
