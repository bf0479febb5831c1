"""The compiled tier: numba kernels (:mod:`.kernels`) and their machine code linked without numba
(:mod:`.linker`). Optional: every caller has a numpy path that gives the same results."""
