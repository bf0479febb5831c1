"""The XSpace reader (``*.xplane.pb``): the wire schema, the file (checks, decompression, mapping),
lenient decoding, the events of each line into the per-host tables, and the allocator events of the
memory view. The compiled decoding kernels are :mod:`traceview.parsers.native`."""
