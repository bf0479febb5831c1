"""The process the analysis runs in: its pools of reading processes, forked passes over a pod's hosts, glibc
malloc and Python garbage-collector tuning, and the CPU ledger the scale benchmark reads."""
