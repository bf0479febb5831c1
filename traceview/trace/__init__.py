"""Reading: PATH -> the profile (hosts one after another, in a pool or on Dask; the parsed-table cache used), with progress."""
