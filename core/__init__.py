"""The bottom layer: what every layer uses. ``errors`` (the one error type a user sees as one
line), ``fileio`` (safe file writing, folders rlhls owns, bounded readers), ``procs`` (child
processes that never outlive rlhls, what libraries print), ``toolchain`` (g++ with its
content-hash build cache) and ``native`` (a checked C library loaded with ctypes). It imports
nothing of rlhls above it."""

__version__ = "0.1.0"
