"""Readers: trace discovery, XSpace (xplane) protobufs, HLO text and HLO protos.

Installed as ``traceview.parsers``.
"""
