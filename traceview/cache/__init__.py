"""The parsed-table cache and the finished-output cache, under one cache directory."""
