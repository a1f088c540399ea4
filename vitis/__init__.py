"""Data package: the C++ side of rlhls (HLS headers, templates, AIE shim). No Python here."""
