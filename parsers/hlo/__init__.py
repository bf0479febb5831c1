"""HLO readers: XLA HLO text, HloProto bytes, dump folders, StableHLO, buffer assignments, and the HLO
model (:mod:`.model`) every layer above reads; plus the placement of command-buffer kernels on the HLO
instructions that launched them (:mod:`.command_buffers`). Nothing here reads a trace."""
