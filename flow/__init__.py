"""rlhls.flow — see DESIGN.md."""
