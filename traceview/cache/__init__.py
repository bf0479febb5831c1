"""Every cache of traceview under one cache directory: the store (folder, bounds, eviction), the parsed-table cache and the finished-output cache."""
