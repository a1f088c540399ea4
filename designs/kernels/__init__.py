"""Hardware kernels: one module per kernel (later issues)."""
