"""The per-host tables both trace readers (XSpace and trace-event JSON) build: op rows, host events,
steps; GPU kernels as HLO op executions (:mod:`.gpu_kernels`)."""
